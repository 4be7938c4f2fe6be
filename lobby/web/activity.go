// What changed in the room, for the room page: the recent activity from
// the audit (substrate.RecentActivity: only what the reader may know of)
// and the messages with their times, marked when directed (templates in
// assets/activity.html).

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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

// activity reads the recent activity and the message log (ToYou unset:
// toYou marks them per reader), and, for people (owners true), who owns
// each agent a message is directed to.
func (wb *Web) activity(ctx context.Context, p *substrate.Principal, roomID string, people bool) (rows []activityRow, msgs []messageRow, owners map[string]string, err error) {
	acts, err := wb.opt.Substrate.RecentActivity(ctx, p, roomID, 0, activitySize)
	if err != nil {
		return nil, nil, nil, err
	}
	rows = make([]activityRow, 0, len(acts))
	for _, a := range acts {
		rows = append(rows, activityOf(a))
	}
	st, err := wb.opt.Substrate.ReadState(ctx, p, roomID, substrate.ReadQuery{Scope: substrate.ScopeMessages, Limit: 50})
	if err != nil {
		return nil, nil, nil, err
	}
	owners = map[string]string{}
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
			if _, ok := owners[to]; ok || !people || to == p.AgentID {
				continue
			}
			owner, exists, err := wb.opt.Substrate.AgentOwner(ctx, roomID, to)
			if err != nil {
				return nil, nil, nil, err
			}
			if !exists {
				owner = ""
			}
			owners[to] = owner
		}
		if row.Kind == "" {
			row.Kind = "chat"
		}
		msgs = append(msgs, row)
	}
	return rows, msgs, owners, nil
}

// toYou is the message log as one reader sees it: a message directed to
// the reader's own agent (agentID), or to an agent the person (userID)
// owns, is marked as to them. msgs is shared between readers: a marked
// log is a copy.
func toYou(msgs []messageRow, owners map[string]string, agentID, userID string) []messageRow {
	out := slices.Clone(msgs)
	for i := range out {
		for _, to := range out[i].To {
			if (to == agentID && to != "") || (userID != "" && owners[to] == userID) {
				out[i].ToYou = true
				break
			}
		}
	}
	return out
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
