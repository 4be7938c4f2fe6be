package salienceport

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"testing"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
)

// room is a read by alice of a room where bob's scope is granted to her
// but its "secret" entry is not readable to her one by one, and carol's
// scope is not hers to read (so not in her state).
func room() Room {
	rows := map[string]map[string]int64{
		"_shared": {"a": 4, "b": 9},
		"bob":     {"plan": 7, "secret": 12},
		"carol":   {"x": 20},
		"alice":   {"note": 3},
	}
	return Room{
		ID: "r", Seq: 30, Self: "alice",
		Agents:  []envelope.Presence{{ID: "alice", ContextReads: 2, LastContextSeq: 25}, {ID: "bob", ContextReads: 5}},
		Actions: map[string]ActionMeta{"vote": {Revision: 5}, "close": {Revision: 8}},
		Views:   map[string]any{"tally": 1.0, "_contested": map[string]any{}},
		State: map[string]any{
			"_shared": map[string]any{"a": 1.0, "b": 2.0},
			"bob":     map[string]any{"plan": "p", "secret": "s"},
			"alice":   map[string]any{"note": "n"},
			"self":    map[string]any{"note": "n"},
		},
		Readable: func(scope, key string) bool { return scope != "carol" && key != "secret" },
		Row: func(scope, key string) (int64, bool) {
			rev, ok := rows[scope][key]
			return rev, ok
		},
		Usage: func() (map[string]*Usage, error) {
			return map[string]*Usage{UsageKey("action", "vote"): {Uses: 1}, UsageKey("action", "hidden"): {Uses: 9},
				UsageKey("view", "tally"): {Uses: 2}, UsageKey("view", "gated"): {Uses: 3}}, nil
		},
	}
}

func TestEachShownIsWhatTheReaderMaySee(t *testing.T) {
	r := New(room())
	for _, c := range []struct {
		name string
		keep func(string) bool
		want []string
	}{
		{"every scope", func(string) bool { return true }, []string{"_shared/a@4", "_shared/b@9", "alice/note@3", "bob/plan@7"}},
		{"one scope", func(sc string) bool { return sc == "bob" }, []string{"bob/plan@7"}},
		{"a scope not in its state", func(sc string) bool { return sc == "carol" }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			r.EachShown(c.keep, func(scope, key string, rev int64) {
				got = append(got, scope+"/"+key+"@"+strconv.FormatInt(rev, 10))
			})
			sort.Strings(got)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("EachShown gave %v, want %v", got, c.want)
			}
		})
	}
	for _, c := range []struct {
		scope string
		after int64
		want  bool
	}{{"bob", 7, false}, {"bob", 6, true}, {"carol", 0, false}, {"_shared", 8, true}} {
		if got := r.ScopeChangedAfter(c.scope, c.after); got != c.want {
			t.Errorf("ScopeChangedAfter(%s, %d) = %v, want %v (a secret's write is not the reader's news)", c.scope, c.after, got, c.want)
		}
	}
}

func TestRevisionIsOfWhatTheReaderComputesWith(t *testing.T) {
	r := New(room())
	for _, c := range []struct {
		scope, key string
		rev        int64
		ok         bool
	}{
		{"_shared", "b", 9, true},
		{"bob", "secret", 12, true}, // computed with, though not shown
		{"carol", "x", 0, false},    // not in its state
		{"_shared", "zz", 0, false},
	} {
		if rev, ok := r.Revision(c.scope, c.key); rev != c.rev || ok != c.ok {
			t.Errorf("Revision(%s, %s) = %d, %v; want %d, %v", c.scope, c.key, rev, ok, c.rev, c.ok)
		}
	}
	for _, c := range []struct {
		def *defs.ViewDef
		rev int64
		ok  bool
	}{
		{&defs.ViewDef{ID: "tally", Scope: "carol"}, 20, true}, // the registrar's scope, which the view reads
		{&defs.ViewDef{ID: "tally", Scope: "_shared"}, 0, false},
		{&defs.ViewDef{ID: "gated", Scope: "carol"}, 0, false}, // not shown
	} {
		if rev, ok := r.ViewSelfRevision(c.def, "x"); rev != c.rev || ok != c.ok {
			t.Errorf("ViewSelfRevision(%+v) = %d, %v; want %d, %v", c.def, rev, ok, c.rev, c.ok)
		}
	}
}

func TestActionsAndUsageAreOfWhatTheReaderIsShown(t *testing.T) {
	r := New(room())
	if got := r.ShownActions(); !reflect.DeepEqual(got, []string{"close", "vote"}) {
		t.Fatalf("ShownActions = %v", got)
	}
	if !r.ActionEnabled("vote") || r.ActionEnabled("hidden") {
		t.Fatal("ActionEnabled says otherwise than the actions handed over")
	}
	if _, ok := r.Action("hidden"); ok {
		t.Fatal("an action not shown has a definition")
	}
	u, err := r.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range u {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if want := []string{"action:vote", "view:tally"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("usage of %v, want %v (the usage of what is hidden says it is there)", keys, want)
	}
	rm := room()
	rm.Usage = func() (map[string]*Usage, error) { return nil, errors.New("not read with the snapshot") }
	if u, err := New(rm).Usage(context.Background()); err == nil || u != nil {
		t.Fatalf("a usage that could not be read gave %v, %v", u, err)
	}
}

func TestReadsAndLogKey(t *testing.T) {
	r := New(room())
	total, self := r.Reads()
	if total != 7 || self == nil || *self != (ReaderMarks{ContextReads: 2, LastContextSeq: 25}) {
		t.Fatalf("Reads = %d, %+v", total, self)
	}
	rm := room()
	rm.Self = ""
	if _, self := New(rm).Reads(); self != nil {
		t.Fatalf("a caller without an agent has marks %+v", self)
	}
	for _, c := range []struct {
		a, b []int64
		same bool
	}{
		{nil, []int64{}, true},
		{[]int64{3, 5}, []int64{3, 5}, true},
		{[]int64{3, 5}, []int64{3, 6}, false},
		{nil, []int64{3}, false},
	} {
		if (LogKey(c.a) == LogKey(c.b)) != c.same {
			t.Errorf("LogKey(%v) vs LogKey(%v): same %v, want %v", c.a, c.b, !c.same, c.same)
		}
	}
	if LogKey(nil) != "" {
		t.Error("a reader that sees every message has a log key")
	}
}

func TestViewsUsedBy(t *testing.T) {
	for _, c := range []struct {
		name string
		def  defs.ActionDef
		want []string
	}{
		{"none", defs.ActionDef{If: "true"}, nil},
		{"each once, in order", defs.ActionDef{If: `views.a > 1 && views["b"] == views.a`, Result: "views.c"}, []string{"a", "b", "c"}},
		{"expression writes only", defs.ActionDef{Writes: []defs.WriteTemplate{
			{Value: json.RawMessage(`"views.w"`), Expr: true}, {Value: json.RawMessage(`"views.literal"`)}}}, []string{"w"}},
		{"system views are nobody's", defs.ActionDef{Enabled: "size(views._contested) == 0 && views.d"}, []string{"d"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ViewsUsedBy(&c.def, "_contested"); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("ViewsUsedBy = %v, want %v", got, c.want)
			}
		})
	}
}
