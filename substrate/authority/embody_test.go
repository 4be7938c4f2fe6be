package authority

import (
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
)

func TestMayEmbody(t *testing.T) {
	ann, ben := "ann", "ben"
	cases := []struct {
		name      string
		exists    bool
		owner     *string
		scopeUsed bool
		want      errs.Code
	}{
		{"a new agent", false, nil, false, ""},
		{"one's own agent", true, &ann, false, ""},
		{"one's own agent whose scope holds state", true, &ann, true, ""},
		{"another user's agent", true, &ben, false, errs.Forbidden},
		{"an agent made with a token", true, nil, false, errs.Forbidden},
		{"a new id whose scope holds state", false, nil, true, errs.ScopeInUse},
	}
	for _, c := range cases {
		refused(t, c.name, MayEmbody("a", ann, c.exists, c.owner, c.scopeUsed), c.want)
	}
	refused(t, "no user", EmbodiedBy(""), errs.InvalidField)
	refused(t, "a user", EmbodiedBy(ann), "")
}

func TestMayFillRoleID(t *testing.T) {
	cases := []struct {
		name, user, role string
		want             errs.Code
	}{
		{"a role", "ann", "host", ""},
		{"no user", "", "host", errs.InvalidField},
		{"a person's agent's id", "ann", "bob:web", errs.InvalidField},
		{"a system scope's name", "ann", "_shared", errs.InvalidField},
		{"too long", "ann", strings.Repeat("r", 129), errs.InvalidField},
	}
	for _, c := range cases {
		refused(t, c.name, MayFillRoleID(c.user, c.role, 128), c.want)
		if ok := RoleIDValid(c.role, 128); c.user != "" && ok != (c.want == "") {
			t.Errorf("%s: RoleIDValid = %v", c.name, ok)
		}
	}
}

func TestRoleToFill(t *testing.T) {
	roles := map[string]any{"host": map[string]any{}, "mine": map[string]any{"filled_by": "mine"},
		"taken": map[string]any{"filled_by": "someone"}, "odd": "not an object"}
	cases := []struct {
		name, role string
		roles      map[string]any
		want       errs.Code
		filledBy   string
	}{
		{"a vacant role", "host", roles, "", ""},
		{"a role its own agent fills", "mine", roles, "", "mine"},
		{"a role another agent fills", "taken", roles, errs.Forbidden, ""},
		{"no such role", "guest", roles, errs.NotFound, ""},
		{"a role that is no object", "odd", roles, errs.NotFound, ""},
		{"a room without roles", "host", nil, errs.NotFound, ""},
	}
	for _, c := range cases {
		_, filledBy, err := RoleToFill("r", c.role, c.roles)
		refused(t, c.name, err, c.want)
		if err == nil && filledBy != c.filledBy {
			t.Errorf("%s: filled by %q, want %q", c.name, filledBy, c.filledBy)
		}
	}
	_, _, err := RoleToFill("r", "guest", roles)
	if names, _ := errs.From(err).Details["roles"].([]string); !slices.Equal(names, []string{"host", "mine", "odd", "taken"}) {
		t.Errorf("the roles named: %v", errs.From(err).Details["roles"])
	}
}

func TestMayFillRole(t *testing.T) {
	ann, ben, host, other := "ann", "ben", "host", "other"
	cases := []struct {
		name     string
		filledBy string
		occ      RoleOccupant
		want     errs.Code
		takeover bool
	}{
		{"no agent yet", "", RoleOccupant{}, "", false},
		{"no agent but its scope holds state", "", RoleOccupant{ScopeUsed: true}, errs.ScopeInUse, false},
		{"one's own, still filled", "host", RoleOccupant{Exists: true, Owner: &ann, PrevRole: &host, InUse: true}, "", false},
		{"vacated by another user, idle", "", RoleOccupant{Exists: true, Owner: &ben, PrevRole: &host}, "", true},
		{"vacated by another user who still drives it", "", RoleOccupant{Exists: true, Owner: &ben, PrevRole: &host, InUse: true}, errs.Forbidden, false},
		{"filled by another user", "host", RoleOccupant{Exists: true, Owner: &ben, PrevRole: &host}, errs.Forbidden, false},
		{"made with a token", "", RoleOccupant{Exists: true, PrevRole: &host}, errs.Forbidden, false},
		{"a person's own agent", "", RoleOccupant{Exists: true, Owner: &ben, PrevRole: &other}, errs.Forbidden, false},
		{"a person's own agent without a role", "", RoleOccupant{Exists: true, Owner: &ann}, errs.Forbidden, false},
	}
	for _, c := range cases {
		err := MayFillRole("host", ann, c.filledBy, c.occ)
		refused(t, c.name, err, c.want)
		if err == nil && TakesOver(ann, c.occ) != c.takeover {
			t.Errorf("%s: takes over = %v, want %v", c.name, !c.takeover, c.takeover)
		}
	}
}
