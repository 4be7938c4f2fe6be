// Package substrate is the core of sync's domain: rooms, agents, scoped
// versioned state, the write path, actions and views, invocation, wait,
// timers, the context envelope and authority. It knows nothing of OAuth
// or MCP: callers present a Principal that an adapter authenticated.
//
// Every room mutation is one PostgreSQL transaction that locks the room
// row, takes its sequence numbers from rooms.seq, applies its writes,
// appends an _audit entry (with the state delta it made) and queues a
// notification delivered on commit; the invocations of a busy room share
// one (group commit: mutation.go over substrate/internal/groupcommit),
// each a savepoint of it with its own sequence numbers, audit entry and
// outcome, answered after the one commit.
//
// The map of the layout, this package's files by what they decide and the
// machinery beneath them, is the README's "How it works". The rules live
// in the packages beneath the core, each with its own package comment:
// substrate/authority (who may do what, and the map of every operation
// here with the authority it checks), substrate/write (the write path's
// rules), substrate/defs (actions, views and their definitions),
// substrate/delta (what a wait and a delta see), substrate/searchrule
// (search's rules) and substrate/envelope (the context's envelope).
package substrate
