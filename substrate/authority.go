package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The authority rules are package authority's (issue 45): what a
// credential is, which scopes it reads and writes, the one read rule.
// The core keeps the lookups (authenticate.go) and re-exports the names
// here, so that callers keep saying substrate.Principal.

// Credentials and read rules (package authority).
type (
	Kind      = authority.Kind
	Principal = authority.Principal
	RowFunc   = authority.RowFunc
	ReadRule  = authority.ReadRule
	Reader    = authority.Reader
)

// Credential kinds, scope names and token prefixes (package authority).
const (
	KindRoom     = authority.KindRoom
	KindView     = authority.KindView
	KindAgent    = authority.KindAgent
	KindObserver = authority.KindObserver

	ScopeShared   = authority.ScopeShared
	ScopeMessages = authority.ScopeMessages
	ScopeAudit    = authority.ScopeAudit
	ScopeSelf     = authority.ScopeSelf

	RoomTokenPrefix  = authority.RoomTokenPrefix
	ViewTokenPrefix  = authority.ViewTokenPrefix
	AgentTokenPrefix = authority.AgentTokenPrefix
)

// RoomPrincipal is the room's own authority (authority.RoomPrincipal).
func RoomPrincipal(roomID string) *Principal { return authority.RoomPrincipal(roomID) }

// ObserverPrincipal reads a room's communal scopes only
// (authority.ObserverPrincipal).
func ObserverPrincipal(roomID string) *Principal { return authority.ObserverPrincipal(roomID) }

// ViewPrincipal reads everything in a room and writes nothing
// (authority.ViewPrincipal).
func ViewPrincipal(roomID string) *Principal { return authority.ViewPrincipal(roomID) }

// ReadOnlyOf is p's authority to read with and nothing more
// (authority.ReadOnlyOf).
func ReadOnlyOf(p *Principal) *Principal { return authority.ReadOnlyOf(p) }

func words(p *Principal) errs.Words {
	if p == nil || p.Words == nil {
		return errs.Plain
	}
	return p.Words
}

var systemScopes = []string{ScopeAudit, "_agents", "_actions", "_views", "_cooldowns", ScopeThreads, ScopeAcks}

// isSystemScope reports scopes only the system writes: the reserved ones
// and features' (reservedScopes: the loom's _loom, _loom.*, whether or not
// the Service runs the loom), which their operations keep consistent.
func isSystemScope(scope string) bool {
	return slices.Contains(systemScopes, scope) || featureScope(scope)
}

// IsSystemScope reports scopes only the system writes (the reserved ones
// and features'), whose keys are its records, not the room's vocabulary:
// pages say what they are rather than name them.
func IsSystemScope(scope string) bool { return isSystemScope(scope) }

// checkWrite returns nil when p may write scope directly
// (authority.CheckWrite, told which scopes are the system's).
func checkWrite(p *Principal, scope string) error {
	return authority.CheckWrite(p, scope, isSystemScope(scope))
}

// snapRows reads entries from a snapshot (every mutable row, timers not
// applied: a rule's records carry no timers).
func snapRows(snap *snapshot) RowFunc {
	return func(scope, key string) (json.RawMessage, bool, error) {
		r, ok := snap.scopes[scope][key]
		if !ok {
			return nil, false, nil
		}
		return r.Value, true, nil
	}
}

// dbRows reads entries on q.
func dbRows(ctx context.Context, q querier, roomID string) RowFunc {
	return func(scope, key string) (json.RawMessage, bool, error) {
		var v json.RawMessage
		err := q.QueryRow(ctx, `SELECT value FROM state WHERE room_id = $1 AND scope = $2 AND key = $3 AND sort_key IS NULL`+liveSQL,
			roomID, scope, key).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		return v, err == nil, err
	}
}

// visibilityIn loads p's visibility in roomID on q.
func (s *Service) visibilityIn(ctx context.Context, q querier, p *Principal, roomID string) (*authority.Visibility, error) {
	return authority.VisibilityOf(s.wired.rules, p, dbRows(ctx, q, roomID))
}
