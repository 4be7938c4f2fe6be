package authority

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
)

func TestValidAgent(t *testing.T) {
	cases := []struct {
		name, id, agent, role, wantRole string
		want                            errs.Code
	}{
		{"an agent", "a", "Ann", "", "agent", ""},
		{"with a role", "a", "Ann", "host", "host", ""},
		{"no name", "a", "", "", "", errs.InvalidField},
		{"a system id", "_a", "Ann", "", "", errs.InvalidField},
		{"a name with a control character", "a", "A\x07nn", "", "", errs.InvalidField},
		{"a name with a bidi override", "a", "A\u202enn", "", "", errs.InvalidField},
		{"a name too long", "a", strings.Repeat("n", 129), "", "", errs.InvalidField},
		{"a role too long", "a", "Ann", strings.Repeat("r", 65), "", errs.InvalidField},
	}
	for _, c := range cases {
		role := c.role
		err := ValidAgent(c.id, c.agent, &role, 128)
		refused(t, c.name, err, c.want)
		if err == nil && role != c.wantRole {
			t.Errorf("%s: role %q, want %q", c.name, role, c.wantRole)
		}
	}
	empty, long := "", strings.Repeat("r", 65)
	refused(t, "an update without text", ValidAgentText(nil, nil), "")
	refused(t, "an update emptying the name", ValidAgentText(&empty, nil), errs.InvalidField)
	refused(t, "an update with a long role", ValidAgentText(nil, &long), errs.InvalidField)
}

func TestValidStatusAndRotatedPrefix(t *testing.T) {
	for status, want := range map[string]errs.Code{"": "", "busy": "", "done": "", "waiting": errs.InvalidField, "asleep": errs.InvalidField} {
		refused(t, "status "+status, ValidStatus(status), want)
	}
	for which, want := range map[string]string{"room": RoomTokenPrefix, "view": ViewTokenPrefix, "agent": ""} {
		prefix, view, err := RotatedPrefix(which)
		if prefix != want || view != (which == "view") || (err != nil) != (want == "") {
			t.Errorf("rotate %s: %q %v %v", which, prefix, view, err)
		}
	}
}

func TestAuditSeenOf(t *testing.T) {
	rec := `{"ts":"2026-01-02T03:04:05Z","by":"ann","kind":"agent_join","agent":"bob","ok":false,"error":"cooldown",
		"delta":[{"scope":"_shared","key":"a"},{"scope":"ann","key":"b"},{"scope":"_shared","key":"a"}]}`
	a, ok := AuditSeenOf(7, []byte(rec), false)
	if !ok || a.Seq != 7 || a.By != "ann" || a.Agent != "bob" || a.Error != nil || len(a.Keys) != 2 {
		t.Fatalf("as any reader: %+v %v", a, ok)
	}
	if admin, _ := AuditSeenOf(7, []byte(rec), true); admin.Error != "cooldown" {
		t.Errorf("room authority is not told the error: %+v", admin)
	}
	if inv, _ := AuditSeenOf(8, []byte(`{"kind":"invoke","agent":"bob"}`), true); inv.Agent != "" {
		t.Errorf("an invocation names an agent: %+v", inv)
	}
	if _, ok := AuditSeenOf(9, []byte(`not json`), true); ok {
		t.Error("a record that does not decode is told of")
	}
}

func TestAuditNarrowed(t *testing.T) {
	shared, private := ScopeKey{"_shared", "a"}, ScopeKey{"ann", "b"}
	all := []AuditSeen{{Seq: 1, Keys: []ScopeKey{shared, private}}, {Seq: 2, Keys: []ScopeKey{private}}, {Seq: 3}}
	got := AuditNarrowed(all, map[ScopeKey]bool{shared: true, private: false})
	if len(got) != 1 || got[0].Seq != 1 || len(got[0].Keys) != 1 || got[0].Keys[0] != shared {
		t.Errorf("narrowed: %+v", got)
	}
}

func TestAuditPageEnds(t *testing.T) {
	entry := func(n int) AuditEntry { return AuditEntry{Value: json.RawMessage(strings.Repeat("x", n))} }
	big := entry(AuditPageBytes)
	cases := []struct {
		name string
		page []AuditEntry
		n    int
		want bool
	}{
		{"short", []AuditEntry{entry(1)}, 2, true},
		{"full", []AuditEntry{entry(1), entry(1)}, 2, false},
		{"cut at its size", []AuditEntry{big, entry(1)}, 10, false},
		{"at its size exactly", []AuditEntry{big}, 10, true},
		{"no n: the most rows", []AuditEntry{entry(1)}, 0, true},
		{"n past the most", make([]AuditEntry, MaxAuditPageRows), MaxAuditPageRows + 5, false},
	}
	for _, c := range cases {
		if got := AuditPageEnds(c.page, c.n); got != c.want {
			t.Errorf("%s: ends %v, want %v", c.name, got, c.want)
		}
	}
	if AuditPageRows(0) != MaxAuditPageRows || AuditPageRows(5) != 5 || AuditPageRows(MaxAuditPageRows+1) != MaxAuditPageRows {
		t.Error("AuditPageRows")
	}
}
