package delta_test

import (
	"encoding/json"
	"iter"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/timer"
)

// room is a snapshot as plain data: the rule needs no database to be
// read or tried.
type room struct {
	rows    map[string]map[string]delta.Entry
	actions map[string]delta.Action
	views   []delta.View
}

func (r *room) Rows() iter.Seq2[string, delta.Entry] {
	return func(yield func(string, delta.Entry) bool) {
		for scope, keys := range r.rows {
			for _, e := range keys {
				if !yield(scope, e) {
					return
				}
			}
		}
	}
}

func (r *room) Entry(scope, key string) (delta.Entry, bool) {
	e, ok := r.rows[scope][key]
	return e, ok
}

func (r *room) Actions() iter.Seq2[string, delta.Action] { return maps.All(r.actions) }

func (r *room) Action(id string) (delta.Action, bool) {
	a, ok := r.actions[id]
	return a, ok
}

func (r *room) Views() iter.Seq[delta.View] { return slices.Values(r.views) }

func (r *room) Timed() iter.Seq2[string, delta.Entry] {
	return func(yield func(string, delta.Entry) bool) {
		for scope, e := range r.Rows() {
			if e.Timer != nil && e.Timer.Effect != nil && !yield(scope, e) {
				return
			}
		}
	}
}

func say(s errs.Step) string { return string(s.Op) }

// A wake-up shows what was written after the reader's seq, the views
// that read it, and the messages that are news, addressed ones first;
// the reader's own messages and the rest of the room are left out.
func TestNarrowShowsWhatChangedSince(t *testing.T) {
	// The gate reads a scope nothing changed in since: it cannot have
	// opened.
	gate := "state.quiet.open == true"
	r := &room{
		rows: map[string]map[string]delta.Entry{
			"_shared": {"old": {Revision: 3}, "new": {Revision: 7}, "gated": {Revision: 2, Enabled: &gate}},
		},
		actions: map[string]delta.Action{
			"steady": {Def: &defs.ActionDef{ID: "steady"}, Row: delta.Entry{Revision: 1}},
			"fresh":  {Def: &defs.ActionDef{ID: "fresh"}, Row: delta.Entry{Revision: 6}},
		},
		views: []delta.View{
			{Def: &defs.ViewDef{ID: "reads_new", Expr: "state._shared.new"}, Row: delta.Entry{Revision: 1}},
			{Def: &defs.ViewDef{ID: "reads_none", Expr: "1 + 1"}, Row: delta.Entry{Revision: 1}},
		},
	}
	raw := json.RawMessage(`1`)
	env := &envelope.Envelope[string]{
		State:   map[string]any{"_shared": map[string]json.RawMessage{"old": raw, "new": raw, "gated": raw}},
		Views:   map[string]any{"reads_new": 1, "reads_none": 2},
		Actions: map[string]string{"steady": "", "fresh": ""},
		Agents:  map[string]any{"a": nil},
		Messages: &envelope.Messages{Recent: []map[string]any{
			{"seq": int64(8), "from": "b"},
			{"seq": int64(9), "from": "me"},
			{"seq": int64(10), "from": "b", "to": []any{"me"}},
		}},
		Context: envelope.ContextMeta{Sections: []string{"state", "agents", "messages"}},
	}
	unseen := &delta.Unseen{Known: true, At: time.Unix(0, 0)}
	upTo := delta.Narrow(env, r, delta.Reader{Self: "me", Now: time.Unix(10, 0), Say: say},
		delta.Ask{Room: "r", From: 5, MessagesAfter: 7, Limit: 10, Unseen: unseen}, 10)
	if upTo != 10 {
		t.Errorf("read up to %d, want 10", upTo)
	}
	if got := slices.Sorted(maps.Keys(env.State["_shared"].(map[string]json.RawMessage))); !slices.Equal(got, []string{"new"}) {
		t.Errorf("state %v, want only the entry written since", got)
	}
	if got := slices.Sorted(maps.Keys(env.Views)); !slices.Equal(got, []string{"reads_new"}) {
		t.Errorf("views %v, want the one reading the changed scope", got)
	}
	if got := slices.Sorted(maps.Keys(env.Actions)); !slices.Equal(got, []string{"fresh"}) {
		t.Errorf("actions %v, want the one defined since", got)
	}
	if env.Agents != nil || slices.Contains(env.Context.Sections, "agents") {
		t.Errorf("agents left in a delta: %v %v", env.Agents, env.Context.Sections)
	}
	var seqs []int64
	for _, m := range env.Messages.Recent {
		seqs = append(seqs, m["seq"].(int64))
	}
	if !slices.Equal(seqs, []int64{10, 8}) {
		t.Errorf("messages %v, want the addressed one first and not the reader's own", seqs)
	}
	if d := env.Context.Delta; d == nil || d.FromSeq != 5 || d.Changed["_shared.new"] != 7 || len(d.Changed) != 1 {
		t.Errorf("delta %+v", env.Context.Delta)
	}
}

// What happened since is not known (the audit log was archived past the
// seq): every scope may have changed, so an entry behind a gate may have
// appeared and is shown; a view reading any scope is shown.
func TestNarrowWhenUnseenIsUnknown(t *testing.T) {
	gate := "state._shared.open == true"
	r := &room{rows: map[string]map[string]delta.Entry{"_shared": {"gated": {Revision: 2, Enabled: &gate}}}}
	env := &envelope.Envelope[string]{State: map[string]any{"_shared": map[string]json.RawMessage{"gated": json.RawMessage(`1`)}}}
	delta.Narrow(env, r, delta.Reader{Self: "me", Say: say}, delta.Ask{From: 5}, 0)
	if _, ok := env.State["_shared"]; !ok {
		t.Error("a gated entry that may have opened since was left out")
	}
}

// A tick timer run down by writes to the entry it counts changed the
// scope it is in, with no revision of its own.
func TestViewsUnseenSeeATickTimer(t *testing.T) {
	left, on, effect := int64(0), "_shared.a.b", "disable"
	r := &room{
		rows: map[string]map[string]delta.Entry{
			"_shared": {"a.b": {Revision: 9}, "ticking": {Revision: 1, Timer: &timer.State{TicksLeft: &left, TickOn: &on, Effect: &effect}}},
		},
		views: []delta.View{{Def: &defs.ViewDef{ID: "v", Expr: "state._shared.x"}}},
	}
	got := delta.ViewsUnseen(r, "", time.Now(), 5, &delta.Unseen{Known: true})
	if !got["v"] {
		t.Errorf("views unseen %v, want v: its scope's timer ran out since", got)
	}
	got = delta.ViewsUnseen(r, "", time.Now(), 9, &delta.Unseen{Known: true})
	if got["v"] {
		t.Errorf("views unseen %v at the tick's own seq, want none", got)
	}
}

func TestWakeRequestStartsAtTheReadersMarks(t *testing.T) {
	got := delta.WakeRequest(envelope.ContextRequest{}, &delta.Marks{ContextReads: 2, LastContextSeq: 40, LastSeenSeq: 30}, 50)
	if *got.Since != 40 || *got.MessagesAfter != 30 {
		t.Errorf("since %d, messages after %d; want 40, 30", *got.Since, *got.MessagesAfter)
	}
	got = delta.WakeRequest(envelope.ContextRequest{}, nil, 50)
	if *got.Since != 50 || got.MessagesAfter != nil {
		t.Errorf("a token's wait: since %d, messages after %v; want 50, none", *got.Since, got.MessagesAfter)
	}
}
