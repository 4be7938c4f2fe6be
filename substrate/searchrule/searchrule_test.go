package searchrule

import (
	"slices"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

func TestValidScope(t *testing.T) {
	for scope, ok := range map[string]bool{"": true, "self": true, "views": true, "_shared": true, "ann": true,
		"bad scope": false, string(make([]byte, 129)): false} {
		err := ValidScope(scope)
		if (err == nil) != ok || (err != nil && errs.From(err).Details["field"] != "scope") {
			t.Errorf("scope %q: %v", scope, err)
		}
	}
}

func TestNarrowing(t *testing.T) {
	agent := &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann", Grants: []string{"g"}}
	starred := &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "boss", Grants: []string{"*"}}
	cases := []struct {
		name       string
		p          *authority.Principal
		restricted bool
		mine       []string
	}{
		{"no principal (the system)", nil, false, nil},
		{"room authority", authority.RoomPrincipal("r"), false, nil},
		{"the view token", authority.ViewPrincipal("r"), false, nil},
		{"an agent with \"*\"", starred, false, nil},
		{"an agent", agent, true, []string{"ann", "g"}},
		{"an agent reading the whole room", &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann", ReadsAll: true}, false, nil},
		{"an observer", authority.ObserverPrincipal("r"), true, nil},
	}
	for _, c := range cases {
		restricted, mine := Narrowing(c.p)
		if restricted != c.restricted || !slices.Equal(mine, c.mine) && len(mine)+len(c.mine) > 0 {
			t.Errorf("%s: restricted %v mine %v, want %v %v", c.name, restricted, mine, c.restricted, c.mine)
		}
		if mine == nil {
			t.Errorf("%s: mine is nil (the statement's array would be NULL)", c.name)
		}
	}
}

func TestClassify(t *testing.T) {
	seq, kind, thread := int64(9), "note", "4"
	cases := []struct {
		name    string
		row     Row
		sortKey *int64
		want    Row
		logKey  string
	}{
		{"an entry", Row{Scope: "_shared", Key: "a", Version: 3}, nil, Row{Kind: "entry", Scope: "_shared", Key: "a", Version: 3}, "a"},
		{"a log entry", Row{Scope: "_log", Key: "9", Version: 1}, &seq, Row{Kind: "log", Scope: "_log", Key: "9", Version: 1, Seq: 9}, "9"},
		{"a message", Row{Scope: "_messages", Key: "k", Version: 1}, &seq, Row{Kind: "message", Scope: "_messages", Seq: 9, MsgKind: "note", Thread: 4}, "9"},
	}
	for _, c := range cases {
		h := c.row
		Classify(&h, c.sortKey, &kind, &thread)
		if h != c.want || LogKey(&h) != c.logKey {
			t.Errorf("%s: %+v (key %q), want %+v", c.name, h, LogKey(&h), c.want)
		}
	}
}

func TestSlotKeyTellsCredentialsApart(t *testing.T) {
	ann := &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann"}
	bob := &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "bob"}
	obs := authority.ObserverPrincipal("r")
	keys := []string{SlotKey(nil, "r", ""), SlotKey(ann, "r", ""), SlotKey(bob, "r", ""), SlotKey(ann, "r2", ""),
		SlotKey(obs, "r", "u1"), SlotKey(obs, "r", "u2"), SlotKey(authority.RoomPrincipal("r"), "r", "")}
	for i := range keys {
		for j := range i {
			if keys[i] == keys[j] {
				t.Errorf("credentials %d and %d share their searches' slots", i, j)
			}
		}
	}
	if SlotKey(ann, "r", "") != SlotKey(&authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann"}, "r", "") {
		t.Error("one credential has two slot keys")
	}
	if err := Busy("r"); !errs.Is(err, errs.RoomBusy) || err.Details["limit"] != AtOnce {
		t.Errorf("busy: %v", err)
	}
}

func TestCostAndLanguage(t *testing.T) {
	if Cost(time.Millisecond) != CostPerMS || Cost(0) != 0 || Cost(2*time.Second) != 2000*CostPerMS {
		t.Errorf("cost of 1 ms: %d", Cost(time.Millisecond))
	}
	if err := TooLong(StatementTime); !errs.Is(err, errs.InvalidField) || err.Details["field"] != "q" {
		t.Errorf("too long: %v", err)
	}
	for lang, dict := range map[string]string{"": "", "  ": "", "simple": "simple", " English ": "english_stem", "german": "german_stem"} {
		if got := Dictionary(lang); got != dict {
			t.Errorf("language %q: %q, want %q", lang, got, dict)
		}
	}
	if Ident(`a"b`) != `"a""b"` {
		t.Error("Ident does not quote a quote")
	}
}
