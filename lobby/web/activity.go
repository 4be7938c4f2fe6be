// What changed in the room, for the room page: the recent activity from
// the audit (substrate.RecentActivity: only what the reader may know of)
// and the messages with their times, marked when directed (templates in
// assets/activity.html).

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

// activitySize is how many audit entries the feed shows.
const activitySize = 15

type activityRow struct {
	Seq     int64
	At      time.Time
	By      string
	What    string   // in words: "invoked claim", "wrote", "joined"
	Keys    []string // scope.key, at most a few
	More    int      // keys beyond those
	Refused bool
}

// messageRow is one message as the page lists it.
type messageRow struct {
	Seq    int64
	At     time.Time
	From   string
	Kind   string
	Body   string
	To     []string
	ToYou  bool // directed to the reader's own agent
	Action string
}

// activity adds the recent activity (Activity) and the message log
// (MessageLog) to the page's data; a message directed to one of the
// person's (userID's) own agents is marked as to them.
func (wb *Web) activity(ctx context.Context, p *substrate.Principal, roomID, userID string, data map[string]any) error {
	acts, err := wb.opt.Substrate.RecentActivity(ctx, p, roomID, 0, activitySize)
	if err != nil {
		return err
	}
	rows := make([]activityRow, 0, len(acts))
	for _, a := range acts {
		rows = append(rows, activityOf(a))
	}
	data["Activity"] = rows
	st, err := wb.opt.Substrate.ReadState(ctx, p, roomID, substrate.ReadQuery{Scope: substrate.ScopeMessages, Limit: 50})
	if err != nil {
		return err
	}
	var msgs []messageRow
	owners := map[string]bool{}
	mine := func(agent string) (bool, error) {
		if agent == p.AgentID && agent != "" {
			return true, nil
		}
		if userID == "" {
			return false, nil
		}
		if v, ok := owners[agent]; ok {
			return v, nil
		}
		owner, exists, err := wb.opt.Substrate.AgentOwner(ctx, roomID, agent)
		owners[agent] = err == nil && exists && owner == userID
		return owners[agent], err
	}
	for _, e := range st.Entries {
		if e.SortKey == nil {
			continue
		}
		var m struct {
			Kind string `json:"kind"`
			Body any    `json:"body"`
			To   any    `json:"to"`
		}
		_ = json.Unmarshal(e.Value, &m)
		row := messageRow{Seq: *e.SortKey, At: e.UpdatedAt, From: e.Writer, Kind: m.Kind, Body: textOf(m.Body)}
		switch to := m.To.(type) {
		case string:
			row.To = []string{to}
		case []any:
			for _, x := range to {
				if s, ok := x.(string); ok {
					row.To = append(row.To, s)
				}
			}
		}
		for _, to := range row.To {
			if row.ToYou, err = mine(to); err != nil || row.ToYou {
				break
			}
		}
		if err != nil {
			return err
		}
		if row.Kind == "" {
			row.Kind = "chat"
		}
		msgs = append(msgs, row)
	}
	data["MessageLog"] = msgs
	return nil
}

func activityOf(a substrate.Activity) activityRow {
	r := activityRow{Seq: a.Seq, At: a.TS, By: a.By, Refused: a.OK != nil && !*a.OK}
	switch a.Kind {
	case "invoke":
		switch a.Action {
		case "_send_message":
			r.What = "sent a message"
		case "_state_write", "":
			r.What = "wrote"
		default:
			r.What = "invoked " + a.Action
		}
		if r.Refused {
			r.What = "tried " + strings.TrimPrefix(r.What, "invoked ")
			if a.Error != "" {
				r.What += " (refused: " + strings.ReplaceAll(a.Error, "_", " ") + ")"
			} else {
				r.What += " (refused)"
			}
		}
	case "state_write":
		r.What = "wrote"
	case "agent_join":
		r.What = "joined"
	case "agent_update", "agent_embody":
		r.What = "updated an agent"
	case "register_action":
		r.What = "registered an action"
	case "register_view":
		r.What = "registered a view"
	case "room_create":
		r.What = "created the room"
	case "token_rotate":
		r.What = "rotated a token"
	default:
		r.What = strings.ReplaceAll(a.Kind, "_", " ")
	}
	for i, k := range a.Keys {
		if i == 4 {
			r.More = len(a.Keys) - i
			break
		}
		r.Keys = append(r.Keys, k.Scope+"."+k.Key)
	}
	return r
}

// summarize says in a sentence what happened after seq since, for the
// page's live region: who did what to which keys, newest last.
func summarize(data map[string]any, since int64) string {
	rows, _ := data["Activity"].([]activityRow)
	var parts []string
	for i := len(rows) - 1; i >= 0; i-- {
		r := rows[i]
		if r.Seq <= since {
			continue
		}
		s := r.By + " " + r.What
		if len(r.Keys) > 0 {
			s += " " + strings.Join(r.Keys, ", ")
			if r.More > 0 {
				s += fmt.Sprintf(" and %d more", r.More)
			}
		}
		parts = append(parts, s)
	}
	switch {
	case len(parts) == 0:
		return "Updated."
	case len(parts) > 3:
		return fmt.Sprintf("%d changes; latest: %s.", len(parts), parts[len(parts)-1])
	}
	return strings.Join(parts, "; ") + "."
}
