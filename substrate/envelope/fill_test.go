package envelope

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// fakeRoom is a reader's room as a Reading hands it over: entries by
// scope and key, with whether each is live.
type fakeRoom map[string]map[string]Row

func (f fakeRoom) reading(readUpTo *int64) *Reading {
	gated := "false"
	msg := func(seq int64, body string, enabled *string) Message {
		return Message{Seq: seq, Raw: json.RawMessage(body), Writer: "bob", Enabled: enabled}
	}
	return &Reading{
		Room: "r", Seq: 10, Now: time.Unix(100, 0), Self: "alice",
		Say:   func(s errs.Step) string { return fmt.Sprint(s.Args) },
		State: map[string]any{"_shared": map[string]any{"a": 1.0}}, Enc: noEncoder{},
		Visible: func(string) bool { return true },
		Roster:  []Presence{{ID: "alice", LastSeenSeq: 4}, {ID: "bob", LastSeenSeq: 9}},
		Enabled: map[string]bool{"zed": true, "mid": true, "off": false}, Available: map[string]bool{"zed": true},
		Action:   func(id string) *defs.ActionDef { return &defs.ActionDef{ID: id, Description: id + "!"} },
		Cooldown: func(string) map[string]any { return nil },
		Builtins: map[string]string{"help": "help", "_send_message": "send"},
		Count:    4, Unread: 3, DirectedUnread: 1, Counted: true,
		Row: func(scope, key string) (Row, bool) { r, ok := f[scope][key]; return r, ok },
		Rows: func(scope string) iter.Seq[Row] {
			return func(yield func(Row) bool) {
				for _, k := range slices.Sorted(maps.Keys(f[scope])) {
					if !yield(f[scope][k]) {
						return
					}
				}
			}
		},
		// The newest page (5 gated from the reader), and the message
		// to the reader it does not hold.
		Messages: func(context.Context, ContextRequest) ([]Message, error) {
			return []Message{msg(5, `{"body":"hidden"}`, &gated), msg(6, `{"body":"asks","ack":true}`, nil), msg(7, `{"body":"was","ack":true}`, nil)}, nil
		},
		Directed: func(context.Context, int) ([]Message, error) {
			return []Message{msg(2, `{"body":"to you","to":"alice"}`, nil)}, nil
		},
		Gate:     func(context.Context) func(*string) bool { return func(e *string) bool { return e == nil } },
		Sources:  slices.Values([]string{`state._shared.old > 0`}),
		ReadUpTo: readUpTo,
	}
}

func TestFillMessages(t *testing.T) {
	room := fakeRoom{"_acks": {
		"6": {Key: "6", Value: json.RawMessage(`{"to":["alice","bob"]}`), Live: true},
		"7": {Key: "7", Value: json.RawMessage(`{"to":["bob"]}`)},
	}}
	var readUpTo int64
	env, err := room.reading(&readUpTo).Fill(context.Background(), ContextRequest{Only: []string{"messages"}, MessagesLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, m := range env.Messages.Recent {
		seqs = append(seqs, m["seq"].(int64))
	}
	// The directed one ahead of the page, the gated one left out.
	if !reflect.DeepEqual(seqs, []int64{2, 6, 7}) {
		t.Fatalf("messages %v, want 2, 6, 7", seqs)
	}
	if got := env.Messages.Recent[1]["receipts"]; !reflect.DeepEqual(got, &Receipts{To: []string{"alice", "bob"}, ReadBy: []string{"bob"}, AckedBy: []string{}, Pending: []string{"alice", "bob"}}) {
		t.Fatalf("receipts of 6: %#v", got)
	}
	if _, ok := env.Messages.Recent[2]["receipts"]; ok {
		t.Fatal("receipts of 7, whose _acks entry is not live")
	}
	if readUpTo != 7 {
		t.Fatalf("read up to %d, want 7", readUpTo)
	}
	if env.Messages.Count != 4 || env.Messages.DirectedUnread != 1 {
		t.Fatalf("counters %+v", env.Messages)
	}
}

func TestFillActions(t *testing.T) {
	for _, c := range []struct {
		name      string
		depth     string
		readOnly  bool
		available []string
		builtins  string
	}{
		{"full: enabled actions and builtins", "full", false, []string{"_send_message", "help", "zed"}, ""},
		{"full, read-only: only help", "full", true, []string{"help"}, ""},
		{"lean: builtins in a line", "lean", false, []string{"zed"}, BuiltinsLine},
		{"lean, read-only", "lean", true, nil, ReadOnlyBuiltinsLine},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := fakeRoom{}.reading(new(int64))
			r.ReadOnly = c.readOnly
			env, err := r.Fill(context.Background(), ContextRequest{Only: []string{"actions"}, Depth: c.depth})
			if err != nil {
				t.Fatal(err)
			}
			var available []string
			for _, id := range slices.Sorted(maps.Keys(env.Actions)) {
				if env.Actions[id].Available {
					available = append(available, id)
				}
			}
			if _, off := env.Actions["off"]; off || env.Actions["mid"].Description != "mid!" {
				t.Fatalf("actions %v: want the enabled ones", env.Actions)
			}
			if !reflect.DeepEqual(available, c.available) || env.Builtins != c.builtins {
				t.Fatalf("available %v builtins %q, want %v %q", available, env.Builtins, c.available, c.builtins)
			}
		})
	}
}

func TestReadingRanksAndVersions(t *testing.T) {
	room := fakeRoom{"_shared": {
		"old":    {Key: "old", Revision: 1, Version: 3, Live: true},
		"new":    {Key: "new", Revision: 8, Version: 1, Live: true},
		"theirs": {Key: "theirs", Revision: 9, Version: 2},
		"mine":   {Key: "mine", Revision: 2, Writer: "alice", Version: 7, Live: true},
	}}
	r := room.reading(new(int64))
	keys := map[string]json.RawMessage{"old": nil, "new": nil, "theirs": nil, "mine": nil}
	if got := r.rankKeys("_shared", keys); !reflect.DeepEqual(got, []string{"mine", "old", "theirs", "new"}) {
		t.Fatalf("ranked %v: the reader's own first, then what the rules read, then the newest", got)
	}
	if got := r.versions("_shared"); !reflect.DeepEqual(got, map[string]int64{"old": 3, "new": 1, "theirs": 2, "mine": 7}) {
		t.Fatalf("versions %v", got)
	}
	var live []string
	for k := range r.live("_shared") {
		live = append(live, k)
	}
	if !reflect.DeepEqual(live, []string{"mine", "new", "old"}) {
		t.Fatalf("live %v", live)
	}
}
