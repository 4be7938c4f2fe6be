package authority

import (
	"errors"
	"slices"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The principals the room rules are asked about: room authority by token
// and by grant, an agent, another agent, read-only credentials, and a
// stranger from another room.
var (
	roomTok  = RoomPrincipal("r")
	starred  = &Principal{Kind: KindAgent, RoomID: "r", AgentID: "boss", Grants: []string{"*"}}
	alice    = &Principal{Kind: KindAgent, RoomID: "r", AgentID: "alice", Grants: []string{"g"}}
	bob      = &Principal{Kind: KindAgent, RoomID: "r", AgentID: "bob"}
	viewTok  = ViewPrincipal("r")
	observer = ObserverPrincipal("r")
	stranger = &Principal{Kind: KindAgent, RoomID: "other", AgentID: "alice"}
)

// refused checks err against want: "" when the rule must allow, else the
// code it must refuse with.
func refused(t *testing.T, name string, err error, want errs.Code) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: refused (%v), want allowed", name, err)
	case want != "" && !errs.Is(err, want):
		t.Errorf("%s: got %v, want %s", name, err, want)
	}
}

func TestAddress(t *testing.T) {
	boom := errors.New("lookup failed")
	cases := []struct {
		name   string
		p      *Principal
		exists bool
		err    error
		want   errs.Code
	}{
		{"no token", nil, true, nil, errs.Unauthorized},
		{"the room's own agent", alice, false, nil, ""},
		{"the room token", roomTok, false, nil, ""},
		{"a view token", viewTok, false, nil, ""},
		{"another room's token, the room exists", stranger, true, nil, errs.Forbidden},
		{"another room's token, no such room", stranger, false, nil, errs.RoomNotFound},
	}
	for _, c := range cases {
		asked := false
		err := Address(c.p, "r", func() (bool, error) { asked = true; return c.exists, c.err })
		refused(t, c.name, err, c.want)
		// The lookup is a round trip: only a token of another room needs it.
		if wantAsked := c.p != nil && c.p.RoomID != "r"; asked != wantAsked {
			t.Errorf("%s: asked whether the room exists = %v", c.name, asked)
		}
	}
	if err := Address(stranger, "r", func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Errorf("a failed lookup: got %v, want it passed on", err)
	}
}

func TestMayJoin(t *testing.T) {
	cases := []struct {
		name  string
		p     *Principal
		agent string
		j     Joining
		want  errs.Code
	}{
		{"room token adds an agent", roomTok, "new", Joining{}, ""},
		{"a starred agent adds an agent", starred, "new", Joining{}, ""},
		{"no token, closed room", nil, "new", Joining{}, errs.Unauthorized},
		{"an agent, closed room", alice, "new", Joining{}, errs.Forbidden},
		{"no token, open room", nil, "new", Joining{OpenJoin: true}, ""},
		{"open room, a person's id", nil, "ann:web", Joining{OpenJoin: true}, errs.Forbidden},
		{"room token, a person's id", roomTok, "ann:web", Joining{}, ""},
		{"open room, a scope that holds state", nil, "new", Joining{OpenJoin: true, ScopeUsed: true}, errs.ScopeInUse},
		{"room token, a scope that holds state", roomTok, "new", Joining{ScopeUsed: true}, errs.ScopeInUse},
		{"open room, sets its own gate", nil, "new", Joining{OpenJoin: true, SetsEnabled: true}, errs.Forbidden},
		{"room token sets the gate", roomTok, "new", Joining{SetsEnabled: true}, ""},
		{"re-join with its own token", alice, "alice", Joining{Exists: true}, ""},
		{"re-join with the room token", roomTok, "alice", Joining{Exists: true}, ""},
		{"re-join with another agent's token", bob, "alice", Joining{Exists: true, OpenJoin: true}, errs.AgentExists},
		{"re-join with no token, open room", nil, "alice", Joining{Exists: true, OpenJoin: true}, errs.AgentExists},
		{"re-join a person's agent, room token", roomTok, "ann:web", Joining{Exists: true, Account: true}, errs.Forbidden},
		{"re-join sets its own gate", alice, "alice", Joining{Exists: true, SetsEnabled: true}, errs.Forbidden},
	}
	for _, c := range cases {
		refused(t, c.name, MayJoin(c.p, "r", c.agent, c.j), c.want)
	}
}

// The rules that need room authority, or an agent's own, and nothing
// more of the room.
func TestRoomAuthorityRules(t *testing.T) {
	type rule struct {
		name string
		f    func(p *Principal) error
	}
	admin := []rule{
		{"MayChangeAgent", MayChangeAgent},
		{"MayDeleteRoom", func(p *Principal) error { return MayDeleteRoom(p, "r") }},
		{"MayRotate", func(p *Principal) error { return MayRotate(p, "r") }},
	}
	cases := []struct {
		p    *Principal
		want errs.Code
	}{
		{roomTok, ""}, {starred, ""}, {alice, errs.Forbidden}, {bob, errs.Forbidden}, {viewTok, errs.Forbidden}, {observer, errs.Forbidden},
		{starred.WithGrants(nil), errs.Forbidden},
	}
	for _, r := range admin {
		for _, c := range cases {
			refused(t, r.name+" by "+string(c.p.Kind)+":"+c.p.AgentID, r.f(c.p), c.want)
		}
	}
	heartbeat := []struct {
		p    *Principal
		want errs.Code
	}{
		{alice, ""}, {roomTok, ""}, {starred, ""}, {bob, errs.Forbidden}, {viewTok, errs.Forbidden}, {observer, errs.Forbidden},
	}
	for _, c := range heartbeat {
		refused(t, "MayHeartbeat(alice) by "+string(c.p.Kind)+":"+c.p.AgentID, MayHeartbeat(c.p, "alice"), c.want)
	}
	invoke := []struct {
		p    *Principal
		want errs.Code
	}{
		{alice, ""}, {roomTok, ""}, {viewTok, errs.ReadOnlyToken}, {observer, errs.ReadOnlyToken},
		{&Principal{Kind: KindObserver, RoomID: "r", ReadsAll: true}, errs.ReadOnlyToken},
	}
	for _, c := range invoke {
		refused(t, "MayInvoke by "+string(c.p.Kind), MayInvoke(c.p), c.want)
		refused(t, "ViewDeleter by "+string(c.p.Kind), ViewDeleter(c.p), c.want)
	}
}

func TestMayRenameAndEmbodies(t *testing.T) {
	refused(t, "rename a token agent", MayRename("alice", false), "")
	refused(t, "rename a person's agent", MayRename("ann:web", true), errs.Forbidden)
	ann, eve := "ann", "eve"
	cases := []struct {
		name  string
		owner *string
		want  errs.Code
	}{
		{"still the user's", &ann, ""},
		{"taken over by another user", &eve, errs.Forbidden},
		{"no longer a person's", nil, errs.Forbidden},
	}
	for _, c := range cases {
		err := Embodies("r", "writer", "ann", c.owner)
		refused(t, c.name, err, c.want)
		if c.want != "" && errs.From(err).Details["reason"] != "taken_over" {
			t.Errorf("%s: reason = %v, want taken_over", c.name, errs.From(err).Details["reason"])
		}
	}
}

func TestGrants(t *testing.T) {
	system := func(s string) bool { return s == ScopeAudit || s == "_agents" || s == "_loom" }
	cases := []struct {
		name string
		gs   []string
		out  []string
		want errs.Code
	}{
		{"scopes and star, repeats dropped", []string{"g", "*", "g", ScopeShared}, []string{"g", "*", ScopeShared}, ""},
		{"none", []string{}, []string{}, ""},
		{"_audit, read only, may be granted", []string{ScopeAudit}, []string{ScopeAudit}, ""},
		{"a system scope", []string{"_agents"}, nil, errs.InvalidField},
		{"a feature's scope", []string{"_loom"}, nil, errs.InvalidField},
		{"an invalid name", []string{"a b"}, nil, errs.InvalidField},
		{"over the limit, repeats counted", []string{"a", "b", "a", "b", "c"}, nil, errs.InvalidField},
	}
	for _, c := range cases {
		got, err := Grants(c.gs, 4, 64, system)
		refused(t, c.name, err, c.want)
		if c.want == "" && !slices.Equal(got, c.out) {
			t.Errorf("%s: grants %q, want %q", c.name, got, c.out)
		}
	}
}

func TestActionMayWrite(t *testing.T) {
	cases := []struct {
		name            string
		invoker, target string
		system          bool
		want            errs.Code
	}{
		{"a communal scope", "bob", ScopeShared, false, ""},
		{"the action's own scope", "bob", "alice", false, ""},
		{"the invoker's own scope", "bob", "bob", false, ""},
		{"another agent's scope", "bob", "carol", false, errs.ScopeDenied},
		{"a system scope", "bob", "_agents", true, errs.ScopeDenied},
		{"the action's own scope, but the system's", "bob", "alice", true, errs.ScopeDenied},
		{"no invoker known (registration)", "", "bob", false, errs.ScopeDenied},
		{"no invoker known, the empty scope", "", "", false, errs.ScopeDenied},
	}
	for _, c := range cases {
		refused(t, c.name, ActionMayWrite("act", "alice", c.invoker, c.target, c.system), c.want)
	}
}

func TestDefinitionRules(t *testing.T) {
	regs := []struct {
		name  string
		p     *Principal
		scope string
		out   string
		want  errs.Code
	}{
		{"an agent's view defaults to its own scope", alice, "", "alice", ""},
		{"the room token's view defaults to _shared", roomTok, "", ScopeShared, ""},
		{"an agent's view in _shared", alice, ScopeShared, ScopeShared, ""},
		{"an agent's view in another's scope", alice, "bob", "", errs.ScopeDenied},
		{"room authority in another's scope", starred, "bob", "bob", ""},
		{"the view token", viewTok, "", "", errs.ReadOnlyToken},
	}
	for _, c := range regs {
		got, err := ViewRegistrar(c.p, c.scope)
		refused(t, c.name, err, c.want)
		if c.want == "" && got != c.out {
			t.Errorf("%s: scope %q, want %q", c.name, got, c.out)
		}
	}
	redefs := []struct {
		name      string
		p         *Principal
		scope, by string
		want      errs.Code
	}{
		{"its registrar", bob, ScopeShared, "bob", ""},
		{"its scope's agent", alice, "alice", "bob", ""},
		{"room authority", roomTok, "alice", "alice", ""},
		{"another agent", bob, "alice", "alice", errs.ActionOwned},
		{"another agent, a _shared one", bob, ScopeShared, "alice", errs.ActionOwned},
		{"the view token", viewTok, ScopeShared, "alice", errs.ActionOwned},
	}
	for _, c := range redefs {
		refused(t, "redefine by "+c.name, MayRedefine(c.p, "view", "v", c.scope, c.by), c.want)
		refused(t, "undefine by "+c.name, MayUndefine(c.p, "action", "a", c.scope, c.by), c.want)
	}
}
