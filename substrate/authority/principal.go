package authority

import (
	"context"
	"slices"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Kind is what a credential is.
type Kind string

// Credential kinds.
const (
	// KindRoom is the room token: '*' authority over one room.
	KindRoom Kind = "room"
	// KindView is the view token: reads every scope of one room, writes none.
	KindView Kind = "view"
	// KindAgent is an agent token: its own scope plus its grants.
	KindAgent Kind = "agent"
	// KindObserver reads the room's communal scopes and writes nothing: a
	// user observing through MCP without embodying an agent.
	KindObserver Kind = "observer"
)

// Principal is an authenticated caller, scoped to one room.
type Principal struct {
	Kind    Kind
	RoomID  string
	AgentID string   // set for KindAgent
	Grants  []string // set for KindAgent; "*" means room authority
	// ReadsAll widens the caller's own reads (context, state reads, eval,
	// wait conditions) to every scope of the room, as a view token reads.
	// The lobby sets it on the agent of an owner with admin access, so
	// embodying never reads less than observing did. It is not authority:
	// it writes nothing, and actions and views never carry it (they read
	// with their registrar's authority, built from the registrar's id
	// alone; see DefinitionReader).
	ReadsAll bool
	// Ceiling, when set, limits which of an agent's stored grants the
	// principal may use, including those a mutation re-reads under the
	// room lock (WithGrants): the lobby caps a user's agent at what the
	// user's role and connection allow, and a role's bootstrap registers
	// with no grants.
	Ceiling func(grant string) bool
	// Person marks an agent driven by a signed-in person on the web pages
	// (lobby.PersonActor), not by a model: the loom counts its nodes as a
	// human's (seed 002). Only the lobby sets it; tokens never do.
	Person bool
	// readsAs is the agent a read-only principal made by ReadOnlyOf reads
	// for, or that registered a communal (_shared) definition read with
	// this principal (DefinitionReader): it keeps that agent's loom
	// permissions (those that read), never more.
	readsAs string
	// Words is the vocabulary of the surface the caller came through: the
	// substrate words the next steps it suggests (in _context, help and
	// hints) with it. Default errs.Plain.
	Words errs.Words
	// Refresh, when set, establishes the caller's authority again from
	// what its surface knows now (the lobby: the person's session, access
	// and embodiment). A call that outlives the moment it was
	// authenticated (a wait) calls it at each wake-up, and an error ends
	// the call: a person who left the room or lost it meanwhile hears
	// nothing more of it. Principals from tokens need none: their token is
	// looked up again (the core's recheck).
	Refresh func(ctx context.Context) (*Principal, error)
	// tokenHash is the hash of the token the principal was made from
	// (FromToken), which the core checks still holds; nil for principals
	// made without a token.
	tokenHash []byte
	// remembered marks a principal answered from a memory of token
	// lookups (Remembered); heartbeatAge is how old the agent's heartbeat
	// was when its token was looked up.
	remembered   bool
	heartbeatAge time.Duration
}

// Say words a step in the caller's vocabulary (errs.Plain for a nil p or
// one without Words).
func (p *Principal) Say(s errs.Step) string {
	if p == nil || p.Words == nil {
		return errs.Plain.Say(s)
	}
	return p.Words.Say(s)
}

// Admin reports room-token authority: the room token or a "*" grant.
func (p *Principal) Admin() bool {
	return p.Kind == KindRoom || (p.Kind == KindAgent && slices.Contains(p.Grants, "*"))
}

// ReadOnly reports a credential that may read but never write or invoke.
func (p *Principal) ReadOnly() bool { return p.Kind == KindView || p.Kind == KindObserver }

// Actor is how the principal is named in audit entries and as a writer.
func (p *Principal) Actor() string {
	switch p.Kind {
	case KindAgent:
		return p.AgentID
	case KindView:
		return "_view"
	case KindObserver:
		return "_observer"
	}
	return "_room"
}

// Key names the subject of per-credential budgets (rate limits): one for
// room authority (the room token and agents with "*"), one per view token,
// and one for all the other agents of a room, for reads and writes alike.
// The room token mints agent tokens freely, so a budget per agent token
// would be a budget its holder multiplies at will; and room authority is
// a subject apart, so that no agent (in an open room, anyone who joined)
// can exhaust the budget the room's owner acts with.
func (p *Principal) Key() string {
	switch {
	case p.Admin():
		return string(KindRoom) + ":" + p.RoomID + "/"
	case p.Kind == KindAgent:
		return string(p.Kind) + ":" + p.RoomID + "/*"
	}
	return string(p.Kind) + ":" + p.RoomID + "/" + p.AgentID
}

// ReadsAs is the agent a read-only principal made by ReadOnlyOf reads
// for ("" otherwise): a feature keeps that agent's read permissions.
func (p *Principal) ReadsAs() string { return p.readsAs }

// FromToken is the principal a bearer token claims to be, before the
// core finds it: the kind its prefix tells, carrying the token's hash (and
// no room: the lookup fills it in). ok is false for a string that is no
// sync token. Only a principal made here (or Remembered from one) carries
// a token hash, so only a caller holding the token makes one that the
// core checks against a stored token.
func FromToken(token string) (p *Principal, ok bool) {
	kind, ok := TokenKind(token)
	if !ok {
		return nil, false
	}
	return &Principal{Kind: kind, tokenHash: HashToken(token)}, true
}

// TokenHash is the hash of the token p was made from (FromToken); nil for
// principals made without a token (the lobby's, RoomPrincipal) and for a
// nil p.
func (p *Principal) TokenHash() []byte {
	if p == nil {
		return nil
	}
	return p.tokenHash
}

// TokenHashes is the hash of the token p was authenticated with, in the
// slot of the row that must still hold it: the room's token, its view
// token, or the agent's token. All are nil for principals made without a
// token (the lobby's, RoomPrincipal), and for a nil p.
func (p *Principal) TokenHashes() (room, view, agent []byte) {
	if p == nil {
		return nil, nil, nil
	}
	switch p.Kind {
	case KindRoom:
		return p.tokenHash, nil, nil
	case KindView:
		return nil, p.tokenHash, nil
	case KindAgent:
		return nil, nil, p.tokenHash
	}
	return nil, nil, nil
}

// Remembered is what a memory of token lookups keeps of p and answers
// with: who its token names (kind, room, agent, which never change for a
// token), a copy of its grants and its token's hash, marked FromMemory so
// the core verifies the token before acting on it; nothing a surface set
// and no bookkeeping.
func (p *Principal) Remembered() *Principal {
	return &Principal{Kind: p.Kind, RoomID: p.RoomID, AgentID: p.AgentID, Grants: slices.Clone(p.Grants),
		tokenHash: p.tokenHash, remembered: true}
}

// FromMemory reports a principal answered from a memory of token lookups
// (Remembered), whose token the core has not looked up this time.
func (p *Principal) FromMemory() bool { return p.remembered }

// HeartbeatAge is how old the agent's heartbeat was when the core looked
// its token up (0 once it recorded a new one): bookkeeping for how long a
// lookup may be remembered, deciding nothing p may do.
func (p *Principal) HeartbeatAge() time.Duration { return p.heartbeatAge }

// SetHeartbeatAge records how old the agent's heartbeat was at the lookup
// (HeartbeatAge).
func (p *Principal) SetHeartbeatAge(d time.Duration) { p.heartbeatAge = d }

// WithGrants is p with the grants its agent holds now (read again under
// the room lock), capped by p's Ceiling: a principal never uses a grant
// its surface withheld, however the agent's row changed.
func (p *Principal) WithGrants(grants []string) *Principal {
	fresh := *p
	fresh.Grants = grants
	if p.Ceiling != nil {
		fresh.Grants = slices.DeleteFunc(slices.Clone(grants), func(g string) bool { return !p.Ceiling(g) })
	}
	return &fresh
}

// RoomPrincipal is the room's own authority, for layers (the lobby) that
// have established a user's ownership by other means.
func RoomPrincipal(roomID string) *Principal { return &Principal{Kind: KindRoom, RoomID: roomID} }

// ObserverPrincipal reads a room's communal scopes only.
func ObserverPrincipal(roomID string) *Principal {
	return &Principal{Kind: KindObserver, RoomID: roomID}
}

// ViewPrincipal reads everything in a room and writes nothing.
func ViewPrincipal(roomID string) *Principal { return &Principal{Kind: KindView, RoomID: roomID} }

// ReadOnlyOf is p's authority to read with and nothing more: room
// authority reads as the view token does, an agent as an observer that
// keeps the agent's loom permissions (doc_read, loom_aware), so a page
// that reads the loom without moving the agent shows what → view would.
func ReadOnlyOf(p *Principal) *Principal {
	switch {
	case p.Admin():
		return ViewPrincipal(p.RoomID)
	case p.Kind == KindAgent:
		return &Principal{Kind: KindObserver, RoomID: p.RoomID, readsAs: p.AgentID, Words: p.Words}
	}
	return p
}
