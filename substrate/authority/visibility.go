package authority

import (
	"encoding/json"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// One read rule (issue 25 item 3, issue 27): every path that shows room
// state to a reader (the context and its CEL, GET /state, a key's history,
// the room page, waits) asks the same question, "may this reader see this
// scope, this entry?", of one place. The core's own answer is CanRead (a
// private scope is its agent's; _audit is room authority's). Features
// built on rooms add theirs through a ReadRule: the loom decides its
// _loom* scopes exactly as its → commands do, and who reads a model's
// thinking; a Service runs it when Options.Features lists the loom
// (Feature.ReadRule), and seals the loom's names when it does not
// (the core's sealRule).

// RowFunc reads one mutable entry of the room being read (nil, false when
// it does not exist): from the read's snapshot or its transaction, so a
// rule needs no SQL of its own.
type RowFunc func(scope, key string) (json.RawMessage, bool, error)

// A ReadRule is a feature's say over what a reader sees.
type ReadRule interface {
	// Reader returns what p sees, reading p's standing (a permission
	// record, say) with row. It is asked only about what the core already
	// lets p read.
	Reader(p *Principal, row RowFunc) (Reader, error)
}

// Reader is one reader's view under a ReadRule.
type Reader struct {
	// Sees reports whether the reader sees key of scope; key "" asks
	// about the scope as a whole (may the reader read it at all). Nil
	// sees everything.
	Sees func(scope, key string) bool
	// HiddenPrefixes are the key prefixes of scope the reader does not
	// see (Sees agrees), so that a read that pages by position (a log)
	// leaves them out in its query rather than returning short pages.
	HiddenPrefixes func(scope string) []string
	// Refusal, when set, explains in the feature's words why the reader
	// may not read key of scope ("" the scope), for what Sees refused;
	// nil leaves it to the core's answer.
	Refusal func(scope, key string) error
	// Key, when set, names what this reader sees: two principals whose
	// readers of a rule have the same Key see the same under that rule
	// (the loom's: its reading permissions). Reads that evaluate state
	// for several principals share one evaluation between those whose
	// Keys all match; "" shares nothing.
	Key string
}

// Visibility is what one reader sees in one read.
type Visibility struct {
	p       *Principal
	readers []Reader
}

// VisibilityOf loads p's visibility under rules (the Service's wiring:
// its features' rules, then the seal, consulted in order; each may only
// narrow what the core admits) with row. A nil p (the system) sees
// everything.
func VisibilityOf(rules []ReadRule, p *Principal, row RowFunc) (*Visibility, error) {
	v := &Visibility{p: p}
	if p == nil {
		return v, nil
	}
	for _, r := range rules {
		rd, err := r.Reader(p, row)
		if err != nil {
			return nil, err
		}
		v.readers = append(v.readers, rd)
	}
	return v, nil
}

// Scope reports whether the reader reads scope at all.
func (v *Visibility) Scope(scope string) bool {
	return v.Entry(scope, "")
}

// Entry reports whether the reader sees key of scope ("" for the scope).
func (v *Visibility) Entry(scope, key string) bool {
	if v.p == nil {
		return true
	}
	if !CanRead(v.p, scope) {
		return false
	}
	for _, r := range v.readers {
		if r.Sees != nil && !r.Sees(scope, key) {
			return false
		}
	}
	return true
}

// Refuse is the error for a read of key of scope ("" the scope) that
// the reader may not make: a feature's words when its rule refused.
func (v *Visibility) Refuse(scope, key string) error {
	for _, r := range v.readers {
		if r.Refusal != nil && r.Sees != nil && !r.Sees(scope, key) {
			if err := r.Refusal(scope, key); err != nil {
				return err
			}
		}
	}
	return ReadDenied(scope, key)
}

// HiddenPrefixes are the key prefixes of scope the reader does not see
// (never nil, so it binds as an empty array).
func (v *Visibility) HiddenPrefixes(scope string) []string {
	out := []string{}
	for _, r := range v.readers {
		if r.HiddenPrefixes != nil {
			out = append(out, r.HiddenPrefixes(scope)...)
		}
	}
	return out
}

// ShareKey names what v's principal sees under the Service's rules
// (Reader.Key); ok is false when a rule did not say, and then nothing is
// shared.
func (v *Visibility) ShareKey() (key string, ok bool) {
	keys := make([]string, 0, len(v.readers))
	for _, r := range v.readers {
		if r.Key == "" {
			return "", false
		}
		keys = append(keys, r.Key)
	}
	return strings.Join(keys, "\x00"), true
}

// Unreadable is the visibility of a reader whose read rules could not be
// loaded: it sees nothing (a nil p, the system, still sees everything).
func Unreadable(p *Principal) *Visibility {
	return &Visibility{p: p, readers: []Reader{{Sees: func(string, string) bool { return false }}}}
}

// ReadDenied refuses a read of a scope the reader may not read, in the
// core's words (a feature's refusal comes through Visibility.Refuse).
func ReadDenied(scope, key string) error {
	return errs.New(errs.ScopeDenied, "scope %q is private to its agent", scope).
		WithHint("read your own scope, _shared and communal scopes, or ask the agent to publish a view")
}
