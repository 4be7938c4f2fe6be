package authority

import (
	"slices"
	"strconv"
	"strings"
)

// ReadsKey names everything of p that decides what its reads return, for a
// caller that lets principals with equal keys share one read (the live
// room pages render a change once per authority): its kind, room, agent,
// grants, whether it reads all scopes, whether a person drives it, and the
// agent a read-only principal reads for. Ceiling, Refresh and Words are
// functions or interfaces and are not in it: a caller that shares must key
// what set them (the lobby sets Ceiling from a person's access), or not
// share when they are set.
func (p *Principal) ReadsKey() string {
	grants := slices.Clone(p.Grants)
	slices.Sort(grants)
	return strings.Join([]string{
		string(p.Kind), strconv.Quote(p.RoomID), strconv.Quote(p.AgentID),
		strconv.Quote(strings.Join(grants, "\x00")),
		strconv.FormatBool(p.ReadsAll), strconv.FormatBool(p.Person), strconv.Quote(p.readsAs),
	}, " ")
}
