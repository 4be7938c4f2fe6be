// Package authority is the core's authority rules, apart from the SQL that
// finds a credential (issue 45): what a credential is (Principal, its
// kinds and tokens), which scopes it reads and writes (scope.go), the one
// read rule every path asks (visibility.go) and what of a principal
// decides what its reads return (readskey.go), who may do what to a room
// and its agents, embodiments and role fills included (room.go), what
// makes an agent's id, name and status valid (agent.go), and what a
// reader may know of the audit log (auditlog.go). Every function here is a
// pure function of its arguments: looking a token up in the rooms and
// agents tables, and re-reading an agent's grants under the room lock,
// stay in the core (package substrate), which re-exports these names.
//
// It imports neither the core nor a feature, so a rule here cannot depend
// on how a read is made fast or on what a feature would like.
//
// The rest of this comment is the map of the core's operations (package
// substrate): what each guarantees and the authority it checks with the
// rules above, and what the features the core runs have a say over.
//
// # Operations and the authority each checks
//
// "Room principal" means any principal of the room (room, view, agent,
// observer token); "room authority" the room token or an agent holding
// the "*" grant; read-only principals (view, observer) never write.
//
// Each check below is a pure function of substrate/authority, named
// for what it decides, which the core calls with the facts it looked up
// (the room exists, the agent is a person's, its scope holds state):
// authority/room.go (Address, MayJoin, MayChangeAgent, MayRename,
// Grants, MayHeartbeat, Embodies, MayDeleteRoom, MayRotate, MayInvoke,
// ActionMayWrite, ViewRegistrar, ViewDeleter, MayRedefine, MayUndefine;
// the lobby's embodiments: EmbodiedBy, MayEmbody, RoleIDValid,
// MayFillRoleID, RoleToFill, MayFillRole, TakesOver), authority/agent.go
// (an agent's id, name, role and status, a rotation's token:
// ValidAgent, ValidText, ValidStatus, RotatedPrefix),
// authority/auditlog.go (ReadsAuditLog; what a reader may know of an
// audit entry: AuditSeenOf, AuditNarrowed; a page's bounds),
// authority/definitions.go (Registrar, MayReplace, DefinitionReader,
// Bootstrapper), authority/scope.go (CanRead, CheckWrite) and the one
// read rule (authority/visibility.go). What a refusal of an invocation
// says, the builtins' definitions and a role's bootstrap entries are
// substrate/defs' (refusal.go, builtins.go, bootstrap.go), and so are a
// room's and an agent's records and requests as the surfaces and the
// lobby see them (room.go). The core's files hold the SQL: rooms.go
// (rooms and agents), authority.go (finding
// and re-checking a credential), actions.go (registration, a role's
// bootstrap), invoke.go (an invocation and its refusals), builtins.go
// (the underscore builtins and help).
//
// Rooms and principals:
//   - CreateRoom: no principal (the adapter decides who may create; the
//     caller receives the room and view tokens); creation is the room's
//     first audited mutation.
//   - GetRoom, ListRooms: a room principal. DeleteRoom: room authority.
//   - Authenticate, AuthenticateIn: a token to its Principal (AuthenticateIn
//     looks it up in the addressed room's shard; a token of another room
//     is then refused by the operation). AgentPrincipal, EmbodiedPrincipal:
//     for the lobby, which established the embodiment itself;
//     EmbodiedPrincipal refuses an agent since taken over.
//   - RequireRoom: p may address the room and it exists.
//
// Agents:
//   - Join: room authority, or anyone in an open-join room; re-joining
//     needs room authority or the agent's own token.
//   - ListAgents: a room principal. UpdateAgent: room authority.
//   - Heartbeat: the agent itself or room authority (presence, not a
//     mutation: no seq, no audit).
//
// State (the one write path and the one read rule):
//   - WriteState: all writes or none, as one mutation; a scope is written
//     by its agent, holders of a grant for it, or room authority; system
//     and feature scopes never directly.
//   - ReadState: one consistent snapshot, filtered by the scope rule
//     (private scopes to their agent and grant holders, _audit to room
//     authority), features' read rules and enabled gates evaluated as p.
//   - Watch: change signals for a room principal (a live page's feed).
//
// Actions and views:
//   - RegisterAction, RegisterView: an agent in its own scope, room
//     authority in any. DeleteAction, DeleteView: the registrar, the
//     scope's agent or room authority. ListActions, GetAction, ListViews,
//     GetView: a room principal (availability evaluated as p).
//   - Invoke: an action's if, cooldown and params checked as p; its
//     writes are the action's authority, applied as one mutation; a
//     refusal is audited and changes nothing.
//
// Reading the room as a model does:
//   - SearchRows (search.go): full-text search's rows with p's read
//     authority: the candidates PostgreSQL ranks (state.search_tsv, GIN)
//     are kept only when p's context read would show them (the one read
//     rule, gates, timers), and the views p's context evaluated; the
//     search itself (request, paging, views matched) is substrate/search.
//     Search's own rules (its request and rows, the scope rule the
//     statement narrows by, its cost, AtOnce per credential, its
//     languages) are substrate/searchrule's; search.go holds the
//     statements. ConfigureSearch: the search language.
//   - Threads and acknowledgements (records.go): _send_message's
//     reply_to, subject and ack, the builtin _ack, and the system scopes
//     _threads and _acks they keep in the same mutation (the rules of
//     their params and records are substrate/envelope's).
//   - Context: the envelope (ARCHITECTURE §7) with p's read authority and
//     result budgets. Wait: blocks until a CEL condition holds as p, then
//     returns the context. Eval: an expression with exactly p's read
//     authority. Help, SystemHelp: help content (the system texts are
//     substrate/help's; a room's _help entries override them).
//
// For features (bounded by construction, SQL kept here):
//   - ReadRoom: a repeatable-read transaction of one room; MutateRoom: one
//     mutation (room locked, an agent's grants re-read under the lock,
//     writes through the write path with their audit delta). Both check
//     that p addresses the room, and no more: the feature decides what p
//     may do, with its read rule through RoomTx.Rows.
//   - RoomTx.Get, GetMany: live entries by exact key. List: live entries
//     by key prefix (exact, not by collation), mutable in key order or
//     append newest first, at most MaxKeysPerRead. Chain: a walk along
//     links stored in entries (a tree's parents or first children) in one
//     round trip, at most MaxKeysPerRead steps. HasAgent.
//   - RoomTx.Apply, Audit: queued writes (Op) through the write path, and
//     the mutation's audit record. Apply checks names, keys and value
//     sizes as WriteState does and refuses the core's reserved scopes
//     (_audit, _agents, _actions, _views, _cooldowns); scope authority is
//     the feature's.
//   - AuditPage: pages of the _audit log (archive included), room
//     authority of that room only. AdmitKeyLog: admits p to one key's
//     versions exactly when p may read the key now (scope rule, read
//     rules, enabled gate) and returns a KeyLog that reads that key's
//     versions and nothing else. AuditSeenBy: what a reader may know of
//     the newest audit entries (every entry for room authority; for others
//     only the keys they may read now). AuditOfKind: one kind's entries,
//     archive included, room authority only (substrate/activity's feed and
//     past agents are built on these two).
//   - Read (salience's view of one context read, read-only; the type is
//     substrate/salienceport's, filled by context.go): the reader's
//     room at the read's seq (Action, ShownActions, ActionEnabled,
//     ViewDefs, Views, Revision, Keys, EachShown: what the reader was
//     shown), Usage (the vocabulary's usage, read once per snapshot),
//     RecentLog (the newest 500 entries of each log up to the seq, the
//     messages among them those the reader sees; LogKey names them), Memo
//     (a value computed once per snapshot), Expand. Its checks are the
//     read's: it exists only inside a context read p was admitted to.
//     Keys, Config and RecentLog's audit rows are the room's, not
//     narrowed to p: salience narrows what it says to what p was shown.
//
// For the lobby (lobbyops.go), whose callers have authenticated the
// user and decide which rooms it may see (no principal is checked):
//   - RoomHeads: many rooms' seq, message count, creation, label and
//     last activity, in one statement. Presences: their agents as
//     stored, with how long each is unseen and whether it is gated, in
//     one statement; IdleAfter says when presence lapses to idle.
//   - RoomView: one room read-only at its head's seq (the snapshot
//     cache): Live values by scope (gated entries left out), Revision,
//     PublicView (an ungated live view, reading no gated view, evaluated
//     alone as the room principal on the room's budget, once per state),
//     and Reader (the one read rule's scopes for p). RoleIDValid: the
//     ids a role may take, as EmbodyRole checks them.
//   - AgentOwner; Embody, EmbodyRole, SetIdle (mutations, with the
//     checks each documents: authority/room.go's embodiment rules,
//     asked with the rows read under the room lock).
//
// Maintenance: PurgeExpired, RetainLogs, RunJanitor (the process's own
// housekeeping, no principal).
//
// # The core and its features
//
// This package is the only code that reads or writes room rows (rooms,
// agents, state, state_archive, vocabulary_usage); layout_test.go fails
// when SQL over them appears anywhere else but the store. Features built
// on rooms are packages of their own that reach rooms only through the
// operations below: substrate/loom (seed 002), substrate/trajectory
// (trajectory export, a key's history, replay), substrate/salience
// (adaptive salience, seed 000 §VII). Imports point one way
// (feature → core); where the core must ask a feature something, the
// feature answers through the Feature it exports, which a Service runs
// only when its Options.Features list it (features.go; cmd/syncd lists
// them all). Nothing registers itself from an init:
//
//   - Feature.ReadRule: what a reader sees of the feature's scopes and
//     keys (the loom: _loom* by loom_aware and doc_read, a model's
//     thinking and trace to the thinker and room authority). Every read
//     path (the context and its CEL, GET /state, a key's history, the
//     room page, waits) asks the same rule, so a scope is visible through
//     every surface exactly when its feature says so. A _shared
//     definition reads as its registrant would (Principal.ReadsAs);
//     Reader.Key lets registrants a rule sees alike share one evaluation.
//   - Feature.Scopes: a scope family only the feature writes (through
//     MutateRoom), from the names the core reserves (reservedScopes),
//     optionally kept out of the room's snapshot.
//   - Feature.Memory: keys of an agent's own scope that are its private
//     operational memory (reservedMemory): the audit records their
//     size, never their text.
//   - A reserved name no wired feature claims is sealed (sealRule): a
//     Service without the loom reads its scopes to nobody, writes them
//     for nobody, and shows an agent's loom memory to that agent and
//     room authority only, never as ordinary rows.
//   - Service.Feature: per-service state (the loom's options).
//   - Feature.Salience: what a context read asks adaptive salience
//     (substrate/salienceport): whether the reader's first read goes at full,
//     to annotate the envelope (_attention, the _vocabulary_health view,
//     the actions' stale and low-salience marks), which budget-cut
//     sections changed since the reader's last read, and the health
//     view GET /views lists; and the room's usage decay the write path
//     records a use with. Salience reads the room only through Read
//     (salienceport.Read), which context.go fills with what the reader
//     may see and nothing else, so the read rule stays here. Without
//     it (Options.NoSalience, or a Service whose features do not list
//     it) the envelope carries no salience.
//
// The lobby's agent operations (lobbyops.go) stay here: Embody,
// EmbodyRole and SetIdle are core agent operations that write agents
// (ownership, grants, presence) and _shared.roles through the write path,
// and AgentOwner reads one agents row. What the lobby shows of a room
// (substrate/roomview: counts, values, roles open and filled, presence
// lapse) is a feature above the core, shaped over three reads:
// RoomHeads, Presences and RoomView.
package authority
