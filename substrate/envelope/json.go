package envelope

// Encoding the envelope once per room state: the state section of a large
// room is most of a context read's bytes, and most of its CPU was
// encoding/json sorting 500 keys and re-validating each stored value on
// every read of a room that had not changed. A scope shown exactly as the
// snapshot holds it is encoded once per snapshot and timer epoch (the
// core's live state it belongs to) and the bytes are reused by every read that
// shows that scope; which scopes a reader is shown is decided per read, as
// before, so the cache can only ever return bytes of a map the read itself
// chose to show.

import (
	"encoding/json"

	"github.com/syncsubstrate/sync/substrate/internal/jsoncache"
	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// sharedScope is a scope the envelope shows as the snapshot holds it: its
// live entries' stored JSON, unmodified. The envelope's encoder reuses the
// snapshot's encoding of it while env.State still holds that very map.
type sharedScope struct {
	enc  ScopeEncoder
	name string // the scope's name in the snapshot (self's is the agent id)
	m    map[string]json.RawMessage
}

// ScopeEncoder encodes a snapshot's scope once for every read that shows
// it as the snapshot holds it (the core's live state).
type ScopeEncoder interface {
	ScopeJSON(name string) ([]byte, error)
}

// Share records that State[scope] is m, the snapshot's own entries of
// the scope it names name, so that the encoding enc keeps is reused while
// State still holds that map (a budget that narrows it, or a delta that
// replaces it, makes the envelope encode its own).
func (e *Envelope[A]) Share(scope, name string, m map[string]json.RawMessage, enc ScopeEncoder) {
	if e.shared == nil {
		e.shared = map[string]sharedScope{}
	}
	e.shared[scope] = sharedScope{enc: enc, name: name, m: m}
}

// encodeJSON is json.Marshal without HTML escaping, as the API writes.
var encodeJSON = jsontext.Encode

// envelopeFields is Envelope without its methods, to encode the fields.
type envelopeFields[A any] Envelope[A]

// EncodeJSON encodes the envelope as valid, compact JSON (what
// MarshalJSON returns; httpmw.WriteJSON writes it without re-validating).
func (e *Envelope[A]) EncodeJSON() ([]byte, error) {
	if len(e.shared) == 0 || e.State == nil {
		return encodeJSON((*envelopeFields[A])(e))
	}
	rest := *(*envelopeFields[A])(e)
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
	scopes := make([]string, 0, len(e.State))
	for sc := range e.State {
		scopes = append(scopes, sc)
	}
	out, ok, err := jsoncache.Splice(head, tail, "state", scopes, e.scopeBytes)
	if err != nil || ok {
		return out, err
	}
	return encodeJSON((*envelopeFields[A])(e))
}

// scopeBytes is the JSON of e.State[sc]: the shared encoding while the
// envelope still holds the snapshot's own map (nothing narrowed or
// replaced it since envelope put it there), else encoded now.
func (e *Envelope[A]) scopeBytes(sc string) ([]byte, error) {
	v := e.State[sc]
	if sh, ok := e.shared[sc]; ok {
		if m, ok := v.(map[string]json.RawMessage); ok && jsoncache.Same(m, sh.m) {
			return sh.enc.ScopeJSON(sh.name)
		}
	}
	return encodeJSON(v)
}

// MarshalJSON encodes the envelope (see EncodeJSON).
func (e Envelope[A]) MarshalJSON() ([]byte, error) { return e.EncodeJSON() }
