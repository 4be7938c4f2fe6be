package jsoncache

import (
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/substrate/internal/jsontext"
)

// Splice writes what encoding the whole object writes.
func TestSpliceIsTheWholeEncoding(t *testing.T) {
	state := map[string]any{"b": map[string]int{"x": 1}, "a": []string{"<y>"}}
	whole, _ := jsontext.Encode(struct {
		Self  string         `json:"self"`
		State map[string]any `json:"state"`
		Rest  int            `json:"rest"`
	}{"me", state, 3})
	head, _ := jsontext.Encode(struct {
		Self string `json:"self"`
	}{"me"})
	rest, _ := jsontext.Encode(struct {
		Self  string         `json:"self"`
		State map[string]any `json:"state,omitempty"`
		Rest  int            `json:"rest"`
	}{"me", nil, 3})
	var o Once
	got, ok, err := Splice(head, rest, "state", []string{"b", "a"}, func(k string) ([]byte, error) {
		return o.Get(k, func() any { return state[k] })
	})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if string(got) != string(whole) || !json.Valid(got) {
		t.Fatalf("spliced %s\nwhole   %s", got, whole)
	}
	if _, ok, _ := Splice([]byte(`{"other":1}`), rest, "state", nil, nil); ok {
		t.Fatal("a head that is not rest's start was spliced")
	}
}

func TestOnceEncodesOnce(t *testing.T) {
	var o Once
	n := 0
	for range 3 {
		if b, _ := o.Get("k", func() any { n++; return n }); string(b) != "1" {
			t.Fatalf("got %s", b)
		}
	}
	a, b := map[string]int{}, map[string]int{}
	if Same(a, b) || !Same(a, a) {
		t.Fatal("Same compares contents, not maps")
	}
}
