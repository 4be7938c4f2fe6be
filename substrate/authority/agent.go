package authority

import (
	"slices"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// What makes an agent's id, name, role and status, and a token rotation's
// request, valid before any database work: the core's joins, embodiments,
// updates, heartbeats and rotations ask these first.

// ValidAgent checks an agent's id, name and role (defaulting the role to
// "agent"), for joins and embodiments alike.
func ValidAgent(id, name string, role *string, maxScopeBytes int) error {
	if err := ValidName("agent id", id, maxScopeBytes, false); err != nil {
		return err
	}
	if err := ValidText("name", name, 128, true); err != nil {
		return err
	}
	if *role == "" {
		*role = "agent"
	}
	return ValidText("role", *role, 64, true)
}

// ValidAgentText checks an update's name and role (nil: unchanged) as
// ValidAgent checks them.
func ValidAgentText(name, role *string) error {
	if name != nil {
		if err := ValidText("name", *name, 128, true); err != nil {
			return err
		}
	}
	if role != nil {
		return ValidText("role", *role, 64, true)
	}
	return nil
}

// ValidText refuses a display text (an agent's name or role) that is
// empty when required, over max bytes, or holds a control or bidi
// character: every page and context shows it to the room.
func ValidText(field, s string, max int, required bool) error {
	if s == "" && required {
		return errs.New(errs.InvalidField, "%s is required", field).WithHint("send a non-empty %s", field)
	}
	if len(s) > max {
		return errs.New(errs.InvalidField, "%s is %d bytes, over the limit of %d", field, len(s), max).WithHint("shorten %s", field)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || IsBidiControl(r) {
			return errs.New(errs.InvalidField, "%s contains control character %U", field, r).WithHint("use printable text")
		}
	}
	return nil
}

// SettableStatus are the agent statuses a client may set by heartbeat;
// "waiting" is set by wait.
var SettableStatus = []string{"active", "idle", "busy", "done"}

// ValidStatus refuses a heartbeat's status other than "" (unchanged) or
// one of SettableStatus.
func ValidStatus(status string) error {
	if status != "" && !slices.Contains(SettableStatus, status) {
		return errs.New(errs.InvalidField, "status %q is not one of %v", status, SettableStatus).WithHint("omit status or use one of %v", SettableStatus)
	}
	return nil
}

// RotatedPrefix is the prefix of the token a rotation of which ("room" or
// "view") issues, and whether it is the view token.
func RotatedPrefix(which string) (prefix string, view bool, err error) {
	switch which {
	case "room":
		return RoomTokenPrefix, false, nil
	case "view":
		return ViewTokenPrefix, true, nil
	}
	return "", false, errs.New(errs.InvalidField, "which is %q: rotate the \"room\" token or the \"view\" token", which).With("field", "which").
		WithHint(`send {"which": "room"} or {"which": "view"}`)
}
