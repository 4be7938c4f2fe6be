// Package jsoncache encodes a value once and reuses the bytes: the state
// section of a large room is most of a context read's bytes, and most of
// its CPU was encoding/json sorting 500 keys and re-validating each
// stored value on every read of a room that had not changed.
//
// The rule is the envelope's (substrate/envelope/json.go): which scopes a
// reader is shown is decided per read, and an encoding kept here is used
// only while the envelope still holds the very map it was made from, so
// the cache can only ever return bytes of a map the read itself chose to
// show.
package jsoncache

import (
	"bytes"
	"reflect"
	"sort"
	"sync"

	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// Once keeps one encoding per name. The zero value is empty and ready;
// it is safe for concurrent use.
type Once struct {
	mu sync.Mutex
	m  map[string][]byte
}

// Get returns the encoding kept under name, encoding v (jsontext.Encode)
// on first use. An error is not kept.
func (o *Once) Get(name string, v func() any) ([]byte, error) {
	o.mu.Lock()
	b, ok := o.m[name]
	o.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := jsontext.Encode(v())
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	if o.m == nil {
		o.m = map[string][]byte{}
	}
	o.m[name] = b
	o.mu.Unlock()
	return b, nil
}

// Same reports whether a and b are the same map (not equal contents: the
// same one).
func Same[K comparable, V any](a, b map[K]V) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

var bufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Splice writes the object head (an object's encoding holding the fields
// before field, as a JSON object), then field whose value is an object of
// keys, each value's encoding from value, then the fields of rest (an
// object's encoding that begins with head's fields). ok is false when
// rest does not begin with head's fields: the caller encodes whole.
func Splice(head, rest []byte, field string, keys []string, value func(key string) ([]byte, error)) (_ []byte, ok bool, _ error) {
	head = append(head[:len(head)-1:len(head)-1], ',')
	if !bytes.HasPrefix(rest, head) {
		return nil, false, nil
	}
	buf := bufs.Get().(*bytes.Buffer)
	defer bufs.Put(buf)
	buf.Reset()
	buf.Write(head)
	name, err := jsontext.Encode(field)
	if err != nil {
		return nil, false, err
	}
	buf.Write(name)
	buf.WriteString(":{")
	keys = append([]string(nil), keys...)
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, _ := jsontext.Encode(k)
		buf.Write(kb)
		buf.WriteByte(':')
		v, err := value(k)
		if err != nil {
			return nil, false, err
		}
		buf.Write(v)
	}
	buf.WriteString("},")
	buf.Write(rest[len(head):])
	return bytes.Clone(buf.Bytes()), true, nil
}
