package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Room is a room as clients see it. Tokens are never part of it.
type Room struct {
	ID        string          `json:"id"`
	CreatedAt time.Time       `json:"created_at"`
	Meta      json.RawMessage `json:"meta"`
	OpenJoin  bool            `json:"open_join"`
	Seq       int64           `json:"seq"`
}

// CreateRoomRequest is the body of POST /rooms.
type CreateRoomRequest struct {
	// ID is the room id; a random one when empty.
	ID string `json:"id,omitempty"`
	// Meta is a free JSON object (label, description, …).
	Meta json.RawMessage `json:"meta,omitempty"`
	// OpenJoin lets anyone join with a new agent id, no token needed.
	// Default false: joining needs the room token.
	OpenJoin bool `json:"open_join,omitempty"`
}

// CreatedRoom is a new room with its tokens, shown this once.
type CreatedRoom struct {
	Room
	Token     string `json:"token"`
	ViewToken string `json:"view_token"`
}

// CreateRoom makes a room and its room and view tokens. Creation is the
// room's first mutation (seq 1, audited).
func (s *Service) CreateRoom(ctx context.Context, req CreateRoomRequest) (*CreatedRoom, error) {
	if req.ID == "" {
		req.ID = authority.NewID("room-")
	}
	if err := authority.ValidName("room id", req.ID, s.lim.MaxScopeBytes, false); err != nil {
		return nil, err
	}
	meta, err := s.validMeta("meta", req.Meta)
	if err != nil {
		return nil, err
	}
	token, hash := authority.NewToken(RoomTokenPrefix)
	viewToken, viewHash := authority.NewToken(ViewTokenPrefix)
	out := &CreatedRoom{Token: token, ViewToken: viewToken}
	err = s.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		err := tx.QueryRow(ctx,
			`INSERT INTO rooms (id, meta, open_join, token_hash, view_token_hash, seq)
			 VALUES ($1, $2, $3, $4, $5, 1) RETURNING id, created_at, meta, open_join, seq`,
			req.ID, meta, req.OpenJoin, hash, viewHash).
			Scan(&out.ID, &out.CreatedAt, &out.Meta, &out.OpenJoin, &out.Seq)
		if store.IsUniqueViolation(err) {
			return errs.New(errs.RoomExists, "room %q already exists", req.ID).WithHint("choose another id, or omit id to get a random one")
		}
		if err != nil {
			return err
		}
		// Checked after the insert, in a statement of its own: a deletion
		// of the same id that committed while the insert waited for it is
		// seen here, so a retired id never comes back.
		var retired bool
		// Archived entries without a room are a room deleted before ids
		// were retired (DeleteRoom left its archive): that id is retired too.
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rooms_retired WHERE id = $1)
				OR EXISTS (SELECT 1 FROM state_archive WHERE room_id = $1)`, out.ID).Scan(&retired); err != nil {
			return err
		}
		if retired {
			return errs.New(errs.RoomExists, "room id %q belonged to a deleted room, and ids are never reused", req.ID).With("retired", true).
				WithHint("choose another id, or omit id to get a random one")
		}
		audit, _ := json.Marshal(map[string]any{"ts": out.CreatedAt.UTC().Format(time.RFC3339Nano), "kind": "room_create", "by": "_room", "seq": 1,
			"open_join": req.OpenJoin})
		_, err = tx.Exec(ctx, `INSERT INTO state (room_id, scope, key, sort_key, value, revision, writer, via, created_at, updated_at)
			VALUES ($1, '_audit', '1', 1, $2, 1, '_room', 'system', $3, $3)`, out.ID, audit, out.CreatedAt)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetRoom returns a room to any principal of it.
func (s *Service) GetRoom(ctx context.Context, p *Principal, roomID string) (*Room, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	r := &Room{}
	err := s.db.QueryRow(ctx, `SELECT id, created_at, meta, open_join, seq FROM rooms WHERE id = $1`, roomID).
		Scan(&r.ID, &r.CreatedAt, &r.Meta, &r.OpenJoin, &r.Seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
	}
	return r, err
}

// ListRooms returns the rooms p can see: a room or agent token sees its one
// room. (OAuth users list theirs through the lobby.)
func (s *Service) ListRooms(ctx context.Context, p *Principal) ([]Room, error) {
	r, err := s.GetRoom(ctx, p, p.RoomID)
	if err != nil {
		return nil, err
	}
	return []Room{*r}, nil
}

// validMeta checks an optional JSON object and returns it ("{}" if absent).
func (s *Service) validMeta(field string, raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return []byte("{}"), nil
	}
	if raw[0] != '{' {
		return nil, errs.New(errs.InvalidField, "%s must be a JSON object", field).WithHint(`send an object such as {"label": "…"}`)
	}
	if len(raw) > s.lim.MaxMetaBytes {
		return nil, errs.New(errs.ValueTooLarge, "%s is %d bytes, over the limit of %d", field, len(raw), s.lim.MaxMetaBytes).
			WithHint("keep %s small; put data in state instead", field)
	}
	if jsonDepth(raw, s.lim.MaxValueDepth) > s.lim.MaxValueDepth {
		return nil, s.tooDeep(field).With("field", field)
	}
	return raw, nil
}

// DeleteRoom removes a room and everything in it. Room authority only.
func (s *Service) DeleteRoom(ctx context.Context, p *Principal, roomID string) error {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return err
	}
	if !p.Admin() {
		return errs.New(errs.Forbidden, "deleting room %q needs the room token", roomID).WithHint("ask the room's owner")
	}
	err := s.db.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM rooms WHERE id = $1`, roomID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
		}
		// The archive has no foreign key (it is append-only and large):
		// its rows go with the room.
		if _, err := tx.Exec(ctx, `DELETE FROM state_archive WHERE room_id = $1`, roomID); err != nil {
			return err
		}
		// The id is retired: whatever still names the room outside it
		// (lobby memberships, a session's focus, consents, links) can
		// never reach another room created under the same id.
		_, err = tx.Exec(ctx, `INSERT INTO rooms_retired (id) VALUES ($1) ON CONFLICT DO NOTHING`, roomID)
		return err
	})
	if err != nil {
		return err
	}
	// Waiters learn that the room is gone.
	_ = s.db.Notify(ctx, roomID, "deleted")
	return nil
}

// RotatedToken is a room's new room or view token, shown this once.
type RotatedToken struct {
	Room  string `json:"room"`
	Which string `json:"which"` // room or view
	Token string `json:"token"`
	// TokenAgentsWithRoomAuthority (rotating the room token) are the
	// agents joined with a token that hold "*": the rotation leaves their
	// tokens working, and whoever held a leaked room token could have made
	// them. Review them (GET /agents, the _audit log's agent_join), then
	// narrow their grants or re-join them to rotate their tokens.
	TokenAgentsWithRoomAuthority []string `json:"token_agents_with_room_authority,omitempty"`
}

// RotateToken replaces a room's room token or view token (which) with a
// new one and returns it; the old one is refused from then on, including
// by waits and live pages already open with it (they check their
// credential again at each change, and the rotation is one: audited as
// token_rotate, without the token). Room authority only.
func (s *Service) RotateToken(ctx context.Context, p *Principal, roomID, which string) (*RotatedToken, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	prefix, column := RoomTokenPrefix, "token_hash"
	switch which {
	case "room":
	case "view":
		prefix, column = ViewTokenPrefix, "view_token_hash"
	default:
		return nil, errs.New(errs.InvalidField, "which is %q: rotate the \"room\" token or the \"view\" token", which).With("field", "which").
			WithHint(`send {"which": "room"} or {"which": "view"}`)
	}
	if !p.Admin() {
		return nil, errs.New(errs.Forbidden, "rotating room %q's tokens needs room authority", roomID).
			WithHint("ask the room token holder or an owner of the room")
	}
	token, hash := authority.NewToken(prefix)
	out := &RotatedToken{Room: roomID, Which: which, Token: token}
	_, err := s.mutate(ctx, p, roomID, func(m *mutation) error {
		if !m.p.Admin() {
			// The grants read again under the lock: a "*" taken away
			// meanwhile no longer rotates.
			return errs.New(errs.Forbidden, "rotating room %q's tokens needs room authority", roomID).
				WithHint("ask the room token holder or an owner of the room")
		}
		if _, err := m.tx.Exec(ctx, `UPDATE rooms SET `+column+` = $2 WHERE id = $1`, roomID, hash); err != nil {
			return err
		}
		if which == "room" {
			rows, err := m.tx.Query(ctx, `SELECT id FROM agents WHERE room_id = $1 AND user_id IS NULL AND '*' = ANY(grants) ORDER BY id`, roomID)
			if err != nil {
				return err
			}
			if out.TokenAgentsWithRoomAuthority, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
		}
		m.audit = map[string]any{"kind": "token_rotate", "which": which}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
