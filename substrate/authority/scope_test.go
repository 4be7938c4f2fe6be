package authority

import (
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Who reads and writes which scope, by credential: the table the attack
// tests check through every surface, here against the rule alone.
func TestScopeRules(t *testing.T) {
	agent := &Principal{Kind: KindAgent, RoomID: "r", AgentID: "a", Grants: []string{"g", ScopeAudit}}
	plain := &Principal{Kind: KindAgent, RoomID: "r", AgentID: "b"}
	admin := &Principal{Kind: KindAgent, RoomID: "r", AgentID: "c", Grants: []string{"*"}}
	cases := []struct {
		p      *Principal
		scope  string
		system bool
		reads  bool
		writes errs.Code // "" when it may
		name   string
	}{
		{agent, "a", false, true, "", "own scope"},
		{agent, "g", false, true, "", "granted scope"},
		{agent, "b", false, false, errs.ScopeDenied, "another agent's scope"},
		{agent, ScopeShared, false, true, errs.ScopeDenied, "_shared without a grant"},
		{agent, ScopeAudit, true, true, errs.ScopeDenied, "_audit granted: read, never written"},
		{plain, ScopeAudit, true, false, errs.ScopeDenied, "_audit without a grant"},
		{plain, "_loom", true, true, errs.ScopeDenied, "a system scope"},
		{admin, "b", false, true, "", "room authority"},
		{admin, "_agents", true, true, errs.ScopeDenied, "room authority, a system scope"},
		{RoomPrincipal("r"), "b", false, true, "", "the room token"},
		{ViewPrincipal("r"), "b", false, true, errs.ReadOnlyToken, "the view token"},
		{ObserverPrincipal("r"), "b", false, false, errs.ReadOnlyToken, "an observer, a private scope"},
		{ObserverPrincipal("r"), ScopeShared, false, true, errs.ReadOnlyToken, "an observer, _shared"},
		{&Principal{Kind: KindObserver, RoomID: "r", ReadsAll: true}, "b", false, true, errs.ReadOnlyToken, "reads-all writes nothing"},
	}
	for _, c := range cases {
		if got := CanRead(c.p, c.scope); got != c.reads {
			t.Errorf("%s: CanRead = %v", c.name, got)
		}
		err := CheckWrite(c.p, c.scope, c.system)
		if c.writes == "" && err != nil || c.writes != "" && !errs.Is(err, c.writes) {
			t.Errorf("%s: CheckWrite = %v, want %q", c.name, err, c.writes)
		}
	}
}
