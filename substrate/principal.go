package substrate

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

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
	// alone; see roomCtx.stateAs).
	ReadsAll bool
	// Ceiling, when set, limits which of an agent's stored grants the
	// principal may use, including those a mutation re-reads under the
	// room lock: the lobby caps a user's agent at what the user's role and
	// connection allow, and a role's bootstrap registers with no grants.
	Ceiling func(grant string) bool
	// Person marks an agent driven by a signed-in person on the web pages
	// (lobby.PersonActor), not by a model: the loom counts its nodes as a
	// human's (seed 002). Only the lobby sets it; tokens never do.
	Person bool
	// readsAs is the agent a read-only principal made by ReadOnlyOf reads
	// for, or that registered a communal (_shared) definition read with
	// this principal (roomCtx.stateAs): it keeps that agent's loom
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
	// looked up again (Service.recheck).
	Refresh func(ctx context.Context) (*Principal, error)
	// tokenHash is the hash of the token the principal was authenticated
	// with (AuthenticateIn), for recheck.
	tokenHash []byte
	// remembered marks a principal AuthenticateInvoke answered from
	// memory; heartbeatAge is how old the agent's heartbeat was when it
	// was looked up.
	remembered   bool
	heartbeatAge time.Duration
}

// say words a step in the caller's vocabulary.
func (p *Principal) say(s errs.Step) string {
	return words(p).Say(s)
}

// Say words a step in the caller's vocabulary, for features' hints (a
// nil principal, or one without words, says it plainly).
func (p *Principal) Say(s errs.Step) string { return p.say(s) }

func words(p *Principal) errs.Words {
	if p == nil || p.Words == nil {
		return errs.Plain
	}
	return p.Words
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

// Authenticate resolves a bearer token to its principal, in whichever room
// it belongs to. It searches every room, so in a sharded deployment (see
// the README, "Scaling out") it reaches every shard: requests that name
// their room use AuthenticateIn.
func (s *Service) Authenticate(ctx context.Context, token string) (*Principal, error) {
	return s.AuthenticateIn(ctx, "", token)
}

// AuthenticateIn resolves a bearer token presented to room roomID ("" when
// the request names no room), looking in that room only: with the room as
// the shard key, the lookup reaches one shard. A token of another room is
// still resolved, on this failure path only, so the caller can say whose
// it is (requireRoom's 403) rather than call it unknown. An agent's call
// also counts as its heartbeat (refreshed at most every HeartbeatEvery).
func (s *Service) AuthenticateIn(ctx context.Context, roomID, token string) (*Principal, error) {
	kind, ok := tokenKind(token)
	if !ok {
		return nil, errs.New(errs.Unauthorized, "the bearer token is not a sync token").
			WithHint("send Authorization: Bearer room_…, view_… or as_… as returned when the room was created or the agent joined")
	}
	h := hashToken(token)
	p := &Principal{Kind: kind, tokenHash: h}
	var err error
	var stale bool
	switch {
	case roomID == "":
		err = pgx.ErrNoRows
	case kind == KindRoom:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND token_hash = $2`, roomID, h).Scan(&p.RoomID)
	case kind == KindView:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND view_token_hash = $2`, roomID, h).Scan(&p.RoomID)
	default:
		var age float64
		err = s.db.QueryRow(ctx,
			`SELECT room_id, id, grants, coalesce(extract(epoch FROM now() - last_heartbeat)::float8, 1e9)
			   FROM agents WHERE room_id = $1 AND token_hash = $2`, roomID, h).
			Scan(&p.RoomID, &p.AgentID, &p.Grants, &age)
		stale = age > s.hbEach.Seconds()
		p.heartbeatAge = time.Duration(age * float64(time.Second))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.findToken(ctx, p, h, &stale)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.Unauthorized, "the bearer token is unknown or was rotated").
			WithHint("use the token returned by the latest room creation or agent join; re-join the agent with the room token to get a new one")
	}
	if err != nil {
		return nil, err
	}
	if stale {
		s.touch(ctx, p.RoomID, p.AgentID)
		p.heartbeatAge = 0
	}
	return p, nil
}

// AuthenticateInvoke is AuthenticateIn for an invocation of the room's
// action actionID, answered from memory when the same token was looked up
// for the same room a moment ago (issue 32: the lookup was a round trip of
// every invocation). That is safe for an invocation only: it verifies the
// token again under the room lock, before it reads or writes anything
// (mutateOn: the room's token hashes and the agent's row with its grants),
// and nothing before the lock reads the room; a refusal Invoke gives
// before the lock looks the token up first (deadRemembered). The builtin
// help and the underscore builtins, which may read before any lock, and
// read-only credentials, which invoke nothing, are always looked up. A
// remembered agent token is looked up again when its heartbeat is
// due, so the heartbeat (and its check of the token) is as without memory.
func (s *Service) AuthenticateInvoke(ctx context.Context, roomID, actionID, token string) (*Principal, error) {
	if _, builtin := builtinDescriptions[actionID]; builtin || roomID == "" {
		return s.AuthenticateIn(ctx, roomID, token)
	}
	kind, ok := tokenKind(token)
	if !ok {
		return s.AuthenticateIn(ctx, roomID, token)
	}
	h := hashToken(token)
	if p := s.tokens.get(roomID, h, time.Now()); p != nil {
		return p, nil
	}
	p, err := s.AuthenticateIn(ctx, roomID, token)
	if err != nil || p.RoomID != roomID || p.Kind != kind || p.ReadOnly() {
		// A read-only credential invokes nothing of the room's: it is
		// refused before the lock (Invoke), which is no place for a
		// remembered answer, so it is looked up each time.
		return p, err
	}
	// Remembered until the heartbeat is due (agents), or as long (the
	// room's token), whichever way the principal was found.
	s.tokens.put(roomID, h, p, time.Now().Add(s.hbEach-p.heartbeatAge))
	return p, nil
}

// forgetToken drops p's token from memory (AuthenticateInvoke): an
// invocation found it dead under the room lock.
func (s *Service) forgetToken(p *Principal) {
	if p != nil && p.remembered {
		s.tokens.forget(p.RoomID, p.tokenHash)
	}
}

// deadRemembered looks a remembered principal's token up again before
// Invoke refuses it for something else ahead of the room lock (params
// that are not an object, the room's budget spent): only the lock checks
// a remembered token, and a dead one must hear that it is dead, not how to
// fix a call it can no longer make. It returns the refusal of a token
// rotated or revoked (or of a deleted room), and forgets the token; nil
// when the token still holds, for principals not remembered, and when the
// lookup itself fails (the caller's own refusal stands).
func (s *Service) deadRemembered(ctx context.Context, p *Principal) error {
	if p == nil || !p.remembered {
		return nil
	}
	_, err := s.recheck(ctx, p)
	if errs.Is(err, errs.Unauthorized) || errs.Is(err, errs.RoomNotFound) {
		s.forgetToken(p)
		return err
	}
	return nil
}

// tokenMemory is AuthenticateInvoke's memory of recent lookups, per room
// and token hash. It holds who a token named (its kind, room and agent,
// which never change for a token: a rotation or re-join makes a new one)
// and, for rate budgets only, the grants it had; the invocation re-reads
// the grants under the lock.
type tokenMemory struct {
	mu sync.Mutex
	m  map[memoryKey]tokenEntry
}

type memoryKey struct {
	room string
	hash [32]byte
}

type tokenEntry struct {
	p     Principal
	until time.Time
}

// maxRememberedTokens bounds the memory; when full, it starts afresh.
const maxRememberedTokens = 8192

func (t *tokenMemory) get(room string, h []byte, now time.Time) *Principal {
	k := memoryKey{room: room, hash: [32]byte(h)}
	t.mu.Lock()
	e, ok := t.m[k]
	if ok && !now.Before(e.until) {
		delete(t.m, k)
		ok = false
	}
	t.mu.Unlock()
	if !ok {
		return nil
	}
	p := e.p
	p.Grants = slices.Clone(e.p.Grants)
	p.tokenHash = h
	p.remembered = true
	return &p
}

func (t *tokenMemory) put(room string, h []byte, p *Principal, until time.Time) {
	if !time.Now().Before(until) {
		return
	}
	e := tokenEntry{p: Principal{Kind: p.Kind, RoomID: p.RoomID, AgentID: p.AgentID, Grants: slices.Clone(p.Grants)}, until: until}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil || len(t.m) >= maxRememberedTokens {
		t.m = map[memoryKey]tokenEntry{}
	}
	t.m[memoryKey{room: room, hash: [32]byte(h)}] = e
}

func (t *tokenMemory) forget(room string, h []byte) {
	if len(h) != 32 {
		return
	}
	t.mu.Lock()
	delete(t.m, memoryKey{room: room, hash: [32]byte(h)})
	t.mu.Unlock()
}

// findToken looks for a token's hash in every room: for requests that
// name no room, and for a token presented to a room it does not belong to.
// These are the substrate's only statements on room-owned tables that do
// not name a room (store's TestStatementsNameTheirRoom allows them here).
func (s *Service) findToken(ctx context.Context, p *Principal, h []byte, stale *bool) error {
	switch p.Kind {
	case KindRoom:
		return s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE token_hash = $1`, h).Scan(&p.RoomID)
	case KindView:
		return s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE view_token_hash = $1`, h).Scan(&p.RoomID)
	}
	return s.db.QueryRow(ctx,
		`SELECT room_id, id, grants, last_heartbeat < now() - make_interval(secs => $2)
		   FROM agents WHERE token_hash = $1`, h, s.hbEach.Seconds()).
		Scan(&p.RoomID, &p.AgentID, &p.Grants, stale)
}

// tokenHashes is the hash of the token p was authenticated with, in the
// slot of the row that must still hold it: the room's token, its view
// token, or the agent's token. All are nil for principals made without a
// token (the lobby's, RoomPrincipal), and for a nil p.
func (p *Principal) tokenHashes() (room, view, agent []byte) {
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

// errRotatedMeanwhile refuses a change whose token was rotated (or its
// agent re-joined) between its authentication and the room lock.
func errRotatedMeanwhile() error {
	return errs.New(errs.Unauthorized, "the bearer token was rotated while the call waited for the room").
		WithHint("use the room's current token; an agent re-joins with the room token to get a new one")
}

// recheck establishes p's authority again for a call that outlived its
// authentication (a wait, at each wake-up): a token rotated or revoked
// since is errs.Unauthorized, a room deleted since errs.RoomNotFound, and a
// surface's principal is asked again (Principal.Refresh), which says why it
// no longer holds (the lobby: room_not_in_scope). An agent's grants are
// read again too: a narrowing counts at once.
func (s *Service) recheck(ctx context.Context, p *Principal) (*Principal, error) {
	switch {
	case p.Refresh != nil:
		np, err := p.Refresh(ctx)
		if err != nil {
			return nil, err
		}
		if np.Words == nil {
			np.Words = p.Words
		}
		return np, nil
	case p.tokenHash == nil:
		return p, nil // the system's own principals (RoomPrincipal, …)
	}
	np := *p
	var err error
	switch p.Kind {
	case KindRoom:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND token_hash = $2`, p.RoomID, p.tokenHash).Scan(&np.RoomID)
	case KindView:
		err = s.db.QueryRow(ctx, `SELECT id FROM rooms WHERE id = $1 AND view_token_hash = $2`, p.RoomID, p.tokenHash).Scan(&np.RoomID)
	default:
		err = s.db.QueryRow(ctx, `SELECT grants FROM agents WHERE room_id = $1 AND id = $2 AND token_hash = $3`, p.RoomID, p.AgentID, p.tokenHash).Scan(&np.Grants)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms WHERE id = $1)`, p.RoomID).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			return nil, errs.New(errs.RoomNotFound, "room %q was deleted", p.RoomID).WithHint("nothing to wait for: the room is gone")
		}
		return nil, errs.New(errs.Unauthorized, "the bearer token was rotated or revoked while the call ran").
			WithHint("use the room's current token; an agent re-joins with the room token to get a new one")
	}
	if err != nil {
		return nil, err
	}
	return &np, nil
}

// touch records a heartbeat. It is best effort: a failed heartbeat must not
// fail the call it rides on.
func (s *Service) touch(ctx context.Context, roomID, agentID string) {
	if _, err := s.db.Exec(ctx, `UPDATE agents SET last_heartbeat = now() WHERE room_id = $1 AND id = $2`, roomID, agentID); err != nil {
		s.log.Warn("heartbeat update failed", "room", roomID, "agent", agentID, "err", err)
	}
}

// requireRoom checks that p may address roomID at all.
func (s *Service) requireRoom(ctx context.Context, p *Principal, roomID string) error {
	if p == nil {
		return errs.New(errs.Unauthorized, "this request needs a bearer token").
			WithHint("send Authorization: Bearer <room_, view_ or as_ token of room %q>", roomID)
	}
	if p.RoomID == roomID {
		return nil
	}
	var exists bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms WHERE id = $1)`, roomID).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		return errs.New(errs.RoomNotFound, "room %q does not exist", roomID).WithHint("check the room id, or create the room").
			WithNext(errs.Step{Op: errs.OpCreateRoom, Args: map[string]any{"room": roomID}})
	}
	return errs.New(errs.Forbidden, "the token belongs to room %q, not %q", p.RoomID, roomID).
		WithHint("use a token issued for room %q", roomID)
}

// AgentPrincipal is the authority of an existing agent, for layers (the
// lobby) that established by other means that the caller embodies it. It
// counts as the agent's heartbeat.
func (s *Service) AgentPrincipal(ctx context.Context, roomID, agentID string) (*Principal, error) {
	return s.agentPrincipal(ctx, roomID, agentID, nil)
}

// EmbodiedPrincipal is AgentPrincipal for a user's embodiment: the agent
// must still be that user's. When another user has since taken it over (a
// vacated role filled again, see EmbodyRole) it is errs.Forbidden with
// reason "taken_over": the old session no longer drives it.
func (s *Service) EmbodiedPrincipal(ctx context.Context, roomID, agentID, userID string) (*Principal, error) {
	return s.agentPrincipal(ctx, roomID, agentID, &userID)
}

func (s *Service) agentPrincipal(ctx context.Context, roomID, agentID string, userID *string) (*Principal, error) {
	p := &Principal{Kind: KindAgent, RoomID: roomID, AgentID: agentID}
	var stale bool
	var owner *string
	err := s.db.QueryRow(ctx, `SELECT grants, last_heartbeat < now() - make_interval(secs => $3), user_id FROM agents WHERE room_id = $1 AND id = $2`,
		roomID, agentID, s.hbEach.Seconds()).Scan(&p.Grants, &stale, &owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.AgentNotFound, "agent %q is not in room %q", agentID, roomID).WithHint("embody an agent again")
	}
	if err != nil {
		return nil, err
	}
	if userID != nil && (owner == nil || *owner != *userID) {
		return nil, errs.New(errs.Forbidden, "agent %q in %q is now driven by someone else: its role was filled again after you left it", agentID, roomID).
			With("room", roomID).With("agent", agentID).With("reason", "taken_over").
			WithHint("step out with sync_disembody (it leaves the agent alone), then embody again; sync_lobby shows who holds which role")
	}
	if stale {
		s.touch(ctx, roomID, agentID)
	}
	return p, nil
}

// ObserverPrincipal reads a room's communal scopes only.
func ObserverPrincipal(roomID string) *Principal {
	return &Principal{Kind: KindObserver, RoomID: roomID}
}

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

// ViewPrincipal reads everything in a room and writes nothing.
func ViewPrincipal(roomID string) *Principal { return &Principal{Kind: KindView, RoomID: roomID} }
