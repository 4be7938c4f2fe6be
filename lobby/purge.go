package lobby

import (
	"context"
	"time"
)

// GrantChecker tells the lobby which OAuth grants can still be used: the
// authorization server, which owns the tokens, implements it.
type GrantChecker interface {
	// LiveGrants reports which of ids still have a usable access or
	// refresh token.
	LiveGrants(ctx context.Context, ids []string) (map[string]bool, error)
}

// sessionIdle is how long a session row goes unused before PurgeSessions
// asks whether its grant still lives: a session in use is never purged.
const sessionIdle = time.Hour

// PurgeSessions deletes MCP session rows whose grant has ended (revoked,
// or every token expired): the session lives exactly as long as its grant.
// It returns how many rows went.
func (l *Lobby) PurgeSessions(ctx context.Context, grants GrantChecker) (int, error) {
	purged := 0
	after := ""
	for {
		// Keyset pages, so a long list never holds a connection for long
		// and the grant check runs with none held.
		rows, err := l.db.Query(ctx, `SELECT grant_id FROM smcp_user_sessions
			WHERE updated_at < now() - make_interval(secs => $1) AND grant_id > $2 ORDER BY grant_id LIMIT 500`,
			sessionIdle.Seconds(), after)
		if err != nil {
			return purged, err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return purged, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return purged, err
		}
		live, err := grants.LiveGrants(ctx, ids)
		if err != nil {
			return purged, err
		}
		var dead []string
		for _, id := range ids {
			if !live[id] {
				dead = append(dead, id)
			}
		}
		if len(dead) > 0 {
			tag, err := l.db.Exec(ctx, `DELETE FROM smcp_user_sessions WHERE grant_id = ANY($1)
				AND updated_at < now() - make_interval(secs => $2)`, dead, sessionIdle.Seconds())
			if err != nil {
				return purged, err
			}
			purged += int(tag.RowsAffected())
		}
		after = ids[len(ids)-1]
	}
}
