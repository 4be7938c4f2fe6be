package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
)

// One read rule (issue 25 item 3, issue 27): every path that shows room
// state to a reader (the context and its CEL, GET /state, a key's history,
// the room page, waits) asks the same question, "may this reader see this
// scope, this entry?", of one place. The core's own answer is canRead (a
// private scope is its agent's; _audit is room authority's). Features
// built on rooms add theirs through a ReadRule: the loom decides its
// _loom* scopes exactly as its → commands do, and who reads a model's
// thinking; a Service runs it when Options.Features lists the loom
// (Feature.ReadRule), and seals the loom's names when it does not
// (sealRule).

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

// visibility is what one reader sees in one read.
type visibility struct {
	p       *Principal
	readers []Reader
}

// visibilityOf loads p's visibility under rules (the Service's wiring:
// its features' rules, then the seal, consulted in order; each may only
// narrow what the core admits) with row. A nil p (the system) sees
// everything.
func visibilityOf(rules []ReadRule, p *Principal, row RowFunc) (*visibility, error) {
	v := &visibility{p: p}
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

// scope reports whether the reader reads scope at all.
func (v *visibility) scope(scope string) bool {
	return v.entry(scope, "")
}

// entry reports whether the reader sees key of scope ("" for the scope).
func (v *visibility) entry(scope, key string) bool {
	if v.p == nil {
		return true
	}
	if !canRead(v.p, scope) {
		return false
	}
	for _, r := range v.readers {
		if r.Sees != nil && !r.Sees(scope, key) {
			return false
		}
	}
	return true
}

// refuse is the error for a read of key of scope ("" the scope) that
// the reader may not make: a feature's words when its rule refused.
func (v *visibility) refuse(scope, key string) error {
	for _, r := range v.readers {
		if r.Refusal != nil && r.Sees != nil && !r.Sees(scope, key) {
			if err := r.Refusal(scope, key); err != nil {
				return err
			}
		}
	}
	return scopeDenied(scope, key)
}

// hiddenPrefixes are the key prefixes of scope the reader does not see
// (never nil, so it binds as an empty array).
func (v *visibility) hiddenPrefixes(scope string) []string {
	out := []string{}
	for _, r := range v.readers {
		if r.HiddenPrefixes != nil {
			out = append(out, r.HiddenPrefixes(scope)...)
		}
	}
	return out
}

// shareKey names what v's principal sees under the Service's rules
// (Reader.Key); ok is false when a rule did not say, and then nothing is
// shared.
func (v *visibility) shareKey() (key string, ok bool) {
	keys := make([]string, 0, len(v.readers))
	for _, r := range v.readers {
		if r.Key == "" {
			return "", false
		}
		keys = append(keys, r.Key)
	}
	return strings.Join(keys, "\x00"), true
}

// snapRows reads entries from a snapshot (every mutable row, timers not
// applied: a rule's records carry no timers).
func snapRows(snap *snapshot) RowFunc {
	return func(scope, key string) (json.RawMessage, bool, error) {
		r, ok := snap.scopes[scope][key]
		if !ok {
			return nil, false, nil
		}
		return r.Value, true, nil
	}
}

// dbRows reads entries on q.
func dbRows(ctx context.Context, q querier, roomID string) RowFunc {
	return func(scope, key string) (json.RawMessage, bool, error) {
		var v json.RawMessage
		err := q.QueryRow(ctx, `SELECT value FROM state WHERE room_id = $1 AND scope = $2 AND key = $3 AND sort_key IS NULL`+liveSQL,
			roomID, scope, key).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
}

// visibilityIn loads p's visibility in roomID on q.
func (s *Service) visibilityIn(ctx context.Context, q querier, p *Principal, roomID string) (*visibility, error) {
	return visibilityOf(s.wired.rules, p, dbRows(ctx, q, roomID))
}
