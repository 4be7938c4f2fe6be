package substrate

// Encoding the envelope once per room state: the state section of a large
// room is most of a context read's bytes, and most of its CPU was
// encoding/json sorting 500 keys and re-validating each stored value on
// every read of a room that had not changed. A scope shown exactly as the
// snapshot holds it is encoded once per snapshot and timer epoch (the
// liveState it belongs to) and the bytes are reused by every read that
// shows that scope; which scopes a reader is shown is decided per read, as
// before, so the cache can only ever return bytes of a map the read itself
// chose to show.

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"sync"
)

// sharedScope is a scope the envelope shows as the snapshot holds it: its
// live entries' stored JSON, unmodified. The envelope's encoder reuses the
// liveState's encoding of it while env.State still holds that very map.
type sharedScope struct {
	live *liveState
	name string // the scope's name in the snapshot (self's is the agent id)
	m    map[string]json.RawMessage
}

// scopeJSON returns raw[name] encoded, encoding it on first use.
func (l *liveState) scopeJSON(name string) ([]byte, error) {
	l.encMu.Lock()
	b, ok := l.enc[name]
	l.encMu.Unlock()
	if ok {
		return b, nil
	}
	b, err := encodeJSON(l.raw[name])
	if err != nil {
		return nil, err
	}
	l.encMu.Lock()
	if l.enc == nil {
		l.enc = map[string][]byte{}
	}
	l.enc[name] = b
	l.encMu.Unlock()
	return b, nil
}

// encodeJSON is json.Marshal without HTML escaping, as the API writes.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// envelopeFields is Envelope without its methods, to encode the fields.
type envelopeFields Envelope

var envBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// EncodeJSON encodes the envelope as valid, compact JSON (what
// MarshalJSON returns; httpmw.WriteJSON writes it without re-validating).
func (e *Envelope) EncodeJSON() ([]byte, error) {
	if len(e.shared) == 0 || e.State == nil {
		return encodeJSON((*envelopeFields)(e))
	}
	rest := *(*envelopeFields)(e)
	rest.State = nil
	tail, err := encodeJSON(&rest)
	if err != nil {
		return nil, err
	}
	// The fields in declaration order: about, self and _context, then
	// state, then the rest.
	head, err := encodeJSON(struct {
		About   *RoomAbout   `json:"about,omitempty"`
		Self    string       `json:"self"`
		Context *ContextMeta `json:"_context"`
	}{e.About, e.Self, &e.Context})
	if err != nil {
		return nil, err
	}
	head = append(head[:len(head)-1], ',')
	if !bytes.HasPrefix(tail, head) {
		return encodeJSON((*envelopeFields)(e))
	}
	buf := envBufs.Get().(*bytes.Buffer)
	defer envBufs.Put(buf)
	buf.Reset()
	buf.Write(head)
	buf.WriteString(`"state":{`)
	scopes := make([]string, 0, len(e.State))
	for sc := range e.State {
		scopes = append(scopes, sc)
	}
	sort.Strings(scopes)
	for i, sc := range scopes {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := encodeJSON(sc)
		buf.Write(k)
		buf.WriteByte(':')
		v, err := e.scopeBytes(sc)
		if err != nil {
			return nil, err
		}
		buf.Write(v)
	}
	buf.WriteString("},")
	buf.Write(tail[len(head):])
	return bytes.Clone(buf.Bytes()), nil
}

// scopeBytes is the JSON of e.State[sc]: the shared encoding while the
// envelope still holds the snapshot's own map (nothing narrowed or
// replaced it since envelope put it there), else encoded now.
func (e *Envelope) scopeBytes(sc string) ([]byte, error) {
	v := e.State[sc]
	if sh, ok := e.shared[sc]; ok {
		if m, ok := v.(map[string]json.RawMessage); ok && sameMap(m, sh.m) {
			return sh.live.scopeJSON(sh.name)
		}
	}
	return encodeJSON(v)
}

// sameMap reports whether a and b are the same map (not equal contents:
// the same one, which the snapshot never changes).
func sameMap(a, b map[string]json.RawMessage) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// MarshalJSON encodes the envelope (see EncodeJSON).
func (e Envelope) MarshalJSON() ([]byte, error) { return e.EncodeJSON() }
