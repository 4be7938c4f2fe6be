package write

import (
	"encoding/json"
	"time"
)

// Entry is one state entry as a read or a write's response shows it.
type Entry struct {
	Scope     string          `json:"scope"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Version   int64           `json:"version"`
	SortKey   *int64          `json:"sort_key,omitempty"`
	Revision  int64           `json:"revision"`
	Writer    string          `json:"writer"`
	UpdatedAt time.Time       `json:"updated_at"`
	// Timer is the entry's lifecycle, when it has one.
	Timer map[string]any `json:"timer,omitempty"`
	// Withheld: a write's response leaves out the value of an entry gated
	// by an enabled expression when the writer did not give the whole
	// value (a merge or an increment), as a read might not show it.
	Withheld bool `json:"withheld,omitempty"`
	// Gated and Disabled, in a state read with ReadQuery.Disabled (room
	// authority only): the entry has an enabled expression, and it is
	// false (or was not evaluated within the read's budget) for the room.
	Gated    bool `json:"gated,omitempty"`
	Disabled bool `json:"disabled,omitempty"`
}

// Result is what a write returns: the entries as written (a deleted
// entry has version 0 and no value) and the mutation's seq.
type Result struct {
	Seq     int64   `json:"seq"`
	Entries []Entry `json:"entries"`
}

// Withheld is the rule of a write's response for ops: withheld(scope,
// key, gated) reports whether the value of an entry the mutation wrote
// is left out. It is, for a gated entry (one with an enabled expression
// after the write) the writer did not give whole: merging {} into an
// entry whose gate hides it from the writer must not read it.
func Withheld(ops []Op) func(scope, key string, gated bool) bool {
	derived := map[[2]string]bool{}
	for _, o := range ops {
		k := [2]string{o.Scope, o.Key}
		derived[k] = derived[k] || o.Value == nil && !o.Delete
	}
	return func(scope, key string, gated bool) bool {
		return gated && derived[[2]string{scope, key}]
	}
}

// Shown is e as a write's response shows it: without its value when
// withheld and still there (a deleted entry has none to leave out).
func Shown(e Entry, withheld bool) Entry {
	if withheld && e.Version > 0 {
		e.Value, e.Withheld = nil, true
	}
	return e
}

// Ref names what a write wrote, without the value: what a
// caller needs to read it back or to write it again with if_version.
type Ref struct {
	Scope    string `json:"scope"`
	Key      string `json:"key"`
	Version  int64  `json:"version"`
	SortKey  *int64 `json:"sort_key,omitempty"`
	Revision int64  `json:"revision"`
	// Bytes is the value's size (0 for a deletion).
	Bytes int `json:"bytes"`
}

// Refs are the writes' references, in order (an empty list for none).
func Refs(writes []Entry) []Ref {
	out := []Ref{}
	for _, e := range writes {
		out = append(out, Ref{Scope: e.Scope, Key: e.Key, Version: e.Version, SortKey: e.SortKey, Revision: e.Revision, Bytes: len(e.Value)})
	}
	return out
}

// Summary is an invocation's result with references instead of the
// written values: a model that invoked an action knows what it sent, and
// the values can be large.
type Summary struct {
	Invoked bool   `json:"invoked"`
	Action  string `json:"action"`
	Agent   string `json:"agent"`
	Seq     int64  `json:"seq"`
	Writes  []Ref  `json:"writes"`
	Result  any    `json:"result,omitempty"`
	Builtin any    `json:"builtin_result,omitempty"`
}
