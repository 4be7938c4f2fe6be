// What changed in the room, for the room page: the recent activity from
// the audit (substrate/activity: only what the reader may know of)
// and the messages with their times, marked when directed (templates in
// assets/activity.html).

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/activity"
)

// activitySize is how many lines the feed shows.
const activitySize = 15

type activityRow struct {
	Seq     int64
	At      time.Time
	By      string // the actor's name (ByID when it has none)
	ByID    string
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

// messagePageSize is how many messages the room page lists at once.
const messagePageSize = 50

// msgPage is which messages the room page lists: the newest (zero), the
// page before a seq (?before=N: the "older" link) or after one (?after=N:
// "newer"). Only the newest page is live: the others are history.
type msgPage struct {
	Before, After int64
}

// msgPageOf reads ?before= or ?after= (a seq; anything else is the
// newest page).
func msgPageOf(q url.Values) msgPage {
	if v, err := strconv.ParseInt(q.Get("before"), 10, 64); err == nil && v > 0 {
		return msgPage{Before: v}
	}
	if v, err := strconv.ParseInt(q.Get("after"), 10, 64); err == nil && v > 0 {
		return msgPage{After: v}
	}
	return msgPage{}
}

// newest reports the page that follows the room as it goes.
func (pg msgPage) newest() bool { return pg == msgPage{} }

// messagesShown is where the listed messages sit in the log: the links
// to the pages around them.
type messagesShown struct {
	// Older is the seq to page back from (?before=), 0 when the list
	// starts at the room's first message; Newer the seq to page on from
	// (?after=), 0 when it ends at the newest.
	Older, Newer int64
	// Newest is true on the live page (no ?before=, ?after=).
	Newest bool
}

// activity reads the recent activity (in the words of w) and a page of
// the message log (ToYou unset: toYou marks them per reader), and, for
// people (owners true), who owns each agent a message is directed to.
func (wb *Web) activity(ctx context.Context, p *substrate.Principal, roomID string, people bool, pg msgPage, w *roomWords) (rows []activityRow, msgs []messageRow, shown messagesShown, owners map[string]string, err error) {
	// Twice the feed is read: a turn given up right after a loom command
	// of the same person is said with it (yieldsWith), not on a line of
	// its own.
	acts, err := activity.Recent(ctx, wb.opt.Substrate, p, roomID, 0, 2*activitySize)
	if err != nil {
		return nil, nil, shown, nil, err
	}
	rows = activityRows(acts, w)
	// The newest page reads the log from its end (issue 42: the list
	// read its first page, and a room past 50 messages froze on its
	// oldest); "newer" pages forward from a seq, "older" back from one.
	// The newest page reads the log from its end (issue 42: the list
	// read its first page, and a room past 50 messages froze on its
	// oldest).
	q := pg.query()
	st, err := wb.opt.Substrate.ReadState(ctx, p, roomID, q)
	if err != nil {
		return nil, nil, shown, nil, err
	}
	shown = pg.shown(q, st)
	owners = map[string]string{}
	for _, e := range st.Entries {
		if e.SortKey == nil {
			continue
		}
		row := messageRowOf(e)
		for _, to := range row.To {
			if _, ok := owners[to]; ok || !people || to == p.AgentID {
				continue
			}
			owner, exists, err := wb.opt.Substrate.AgentOwner(ctx, roomID, to)
			if err != nil {
				return nil, nil, shown, nil, err
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
	return rows, msgs, shown, owners, nil
}

// activityRows is the feed's rows, at most activitySize: a turn given up
// right after a loom command of the same person is said with it.
func activityRows(acts []activity.Activity, w *roomWords) []activityRow {
	rows := make([]activityRow, 0, activitySize)
	for i := 0; i < len(acts) && len(rows) < activitySize; i++ {
		a := acts[i]
		if i+1 < len(acts) && yieldsWith(a, acts[i+1]) {
			row := activityOf(acts[i+1], w)
			row.What += ", then gave up the turn"
			rows = append(rows, row)
			i++
			continue
		}
		rows = append(rows, activityOf(a, w))
	}
	return rows
}

// query is the read of the message log for the page: the newest page
// reads the log from its end, a "newer" page forward from a seq, an
// "older" one back from one.
func (pg msgPage) query() substrate.ReadQuery {
	q := substrate.ReadQuery{Scope: substrate.ScopeMessages, Limit: messagePageSize, Before: math.MaxInt64}
	switch {
	case pg.Before > 0:
		q.Before = pg.Before
	case !pg.newest():
		q.Before, q.After = 0, pg.After
	}
	return q
}

// shown is where the page read with q (st) sits in the log.
func (pg msgPage) shown(q substrate.ReadQuery, st *substrate.StateRead) (shown messagesShown) {
	shown.Newest = pg.newest()
	var first, last int64
	for _, e := range st.Entries {
		if e.SortKey != nil {
			if first == 0 {
				first = *e.SortKey
			}
			last = *e.SortKey
		}
	}
	// A page paged to from another has that one beside it, readable or
	// not.
	at := func(seq, otherwise int64) int64 {
		if seq > 0 {
			return seq
		}
		return otherwise
	}
	switch {
	case pg.Before > 0:
		shown.Newer = at(last, pg.Before-1)
	case pg.After > 0:
		shown.Older = at(first, pg.After+1)
	}
	if st.More && q.Before > 0 {
		shown.Older = first
	} else if st.More {
		shown.Newer = last
	}
	return shown
}

// messageRowOf is the message stored in e, with its recipients.
func messageRowOf(e substrate.Entry) messageRow {
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
	return row
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

// yieldsWith reports a loom yield right after another loom command of
// the same actor (the audit is newest first: before is older).
func yieldsWith(yield, before activity.Activity) bool {
	return yield.Kind == "loom" && yield.Command == "yield" && before.Kind == "loom" && before.Command != "yield" &&
		before.By == yield.By && before.Seq < yield.Seq
}

// activityOf is an audit entry as the feed shows it, in the room's
// words (describe.go; w nil: agents by id, internals in general words).
func activityOf(a activity.Activity, w *roomWords) activityRow {
	d := describe(a, w)
	return activityRow{Seq: a.Seq, At: a.TS, By: w.who(a.By), ByID: a.By, What: d.What, Keys: d.Keys, More: d.More, Refused: a.OK != nil && !*a.OK}
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
