// The room page (/rooms/{id}, see IsPage): the room as its reader reads
// it, with the scrubber (?at=, scrubber.go) and the console (?eval=,
// console.go) when asked.

package web

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// IsPage reports whether a request for /rooms/{id} is a browser asking for
// the room page rather than a REST client asking for the room: a GET that
// accepts HTML and carries no bearer token. Everything else goes to the
// API unchanged.
func IsPage(r *http.Request) bool {
	if r.Method != http.MethodGet || r.Header.Get("Authorization") != "" {
		return false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/rooms/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// RoomPage serves /rooms/{id} to a browser (see IsPage).
func (wb *Web) RoomPage(w http.ResponseWriter, r *http.Request) {
	roomID := strings.TrimPrefix(r.URL.Path, "/rooms/")
	p, who, access, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	q := r.URL.Query()
	if at := q.Get("at"); at != "" {
		wb.pastPage(w, r, p, roomID, who, access, viewToken, at) // scrubber.go
		return
	}
	data, err := wb.mainData(r.Context(), r, p, roomID, who, access, viewToken) // live.go
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	wb.takeFlash(w, r, roomID, data)           // forms.go: what the last form did
	data["ShowInternals"] = q.Has("internals") // roommain.html: sent only when asked for
	// Full page loads only: the live refresh (part=main) would take the
	// token, or the marker a reload reads, from the page it refreshes.
	if userID, _, signed := wb.opt.SignedIn(r); signed && viewToken == "" && q.Get("part") != "main" {
		wb.takeNewToken(w, r, userID, roomID, data) // showonce.go: a rotated token, once
	}
	if src := q.Get("eval"); src != "" {
		if err := wb.console(r.Context(), p, roomID, src, data); err != nil {
			wb.fail(w, r, err)
			return
		}
	}
	name := "room"
	if r.URL.Query().Get("part") == "main" {
		name = "roommain" // the live refresh swaps the page's main section
	}
	wb.render(w, r, http.StatusOK, name, data, viewToken != "")
}

// reader resolves who reads the room: a view token (?view=, read-only, no
// account) or the signed-in person with their access. Otherwise it answers
// (sign-in redirect, or 404 for a room that is not theirs) and returns ok
// false.
func (wb *Web) reader(w http.ResponseWriter, r *http.Request, roomID string) (p *substrate.Principal, who, access, viewToken string, ok bool) {
	if tok := r.URL.Query().Get("view"); tok != "" {
		p, err := wb.opt.Substrate.AuthenticateIn(r.Context(), roomID, tok)
		if err != nil || p.Kind != substrate.KindView || p.RoomID != roomID {
			wb.errorPage(w, r, http.StatusNotFound, "No such room", "That link does not open a room. Ask whoever sent it for a new one.", true)
			return nil, "", "", "", false
		}
		return p, "view link (read-only)", "", tok, true
	}
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		http.Redirect(w, r, "/signin?next="+urlPath(r), http.StatusSeeOther)
		return nil, "", "", "", false
	}
	p, access, err := wb.opt.Lobby.PersonPrincipal(r.Context(), userID, username, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return nil, "", "", "", false
	}
	return p, username + " (" + access + ")", access, "", true
}

// canAct reports whether a room access lets a person act from the page.
func canAct(access string) bool {
	return access == "owner" || access == "collaborator" || access == "participant"
}

// roomData reads what the room page shows, with p's authority: the
// context (agents, actions, views, messages) and the state with versions.
func (wb *Web) roomData(ctx context.Context, p *substrate.Principal, roomID string) (map[string]any, error) {
	svc := wb.opt.Substrate
	room, err := svc.GetRoom(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	env, err := svc.Context(ctx, p, roomID, substrate.ContextRequest{Depth: "full", MessagesLimit: 50})
	if err != nil {
		return nil, err
	}
	st, err := svc.ReadState(ctx, p, roomID, substrate.ReadQuery{Disabled: true})
	if err != nil {
		return nil, err
	}
	views, err := svc.ListViews(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	feeds, err := wb.logFeeds(ctx, p, roomID, st.Entries)
	if err != nil {
		return nil, err
	}
	actions := actionsOf(env.Actions)
	for i, a := range actions {
		// Why not: the first false clause of a precondition that needs
		// no params, as the reader can evaluate it (an action reads with
		// its registrar's authority, which may see more).
		if !a.Available && a.If != "" && !strings.Contains(a.If, "params") {
			if res, err := svc.Eval(ctx, p, roomID, a.If, nil); err == nil && res.Unmet != nil {
				actions[i].Why = res.Unmet
			}
		}
	}
	var label string
	var meta map[string]any
	if json.Unmarshal(room.Meta, &meta) == nil {
		label, _ = meta["label"].(string)
	}
	agents := agentsOf(env.Agents)
	words := wordsOf(st.Entries, agents)
	// A view drawn as a surface is not shown again as JSON.
	surfaced := map[string]bool{}
	for _, v := range views {
		if len(v.Render) > 0 && string(v.Render) != "null" {
			surfaced[v.ID] = true
		}
	}
	surfaces := surfacesOf(views, actions, env.State)
	// The Actions section's forms offer the choices an action-form
	// surface gives its params.
	actionOptions := map[string]map[string][]option{}
	for _, g := range surfaces {
		for _, s := range g.Surfaces {
			if len(s.Actions) == 1 && s.ParamOptions != nil {
				actionOptions[s.Actions[0].ID] = s.ParamOptions
			}
		}
	}
	var raw []viewRow
	for _, v := range viewsOf(env.Views) {
		if !surfaced[v.ID] {
			raw = append(raw, v)
		}
	}
	return map[string]any{
		"Room": room, "Label": label, "Seq": st.Seq, "More": st.More,
		"Scopes": byScope(st.Entries), "Agents": agents, "Actions": actions,
		"Views": raw, "Messages": env.Messages, "Now": time.Now(),
		"Surfaces": surfaces, "Feeds": feeds, "ActionOptions": actionOptions,
		"Summary": summaryOf(agents, env.Messages, st.Entries, words),
		wordsKey:  words,
	}, nil
}

// wordsKey holds roomData's names (roomWords) for readRoom, which takes
// them out: the page's data is for templates.
const wordsKey = "\x00words"

// presentWithin is how recently an agent must have been heard from to
// count as present in the room's summary.
const presentWithin = 5 * time.Minute

// summary is the room page's header: who is here, what is unread, and
// the last change the reader can see.
type summary struct {
	Present        []agentRow
	Agents         int
	Messages       int64
	Unread         int64
	DirectedUnread int64
	// LastChange is the newest state entry the reader reads (a whole-room
	// read holds mutable entries; a log's newest lines show in Logs), and
	// Last what it was, in the room's words.
	LastChange *substrate.Entry
	Last       lastChange
	LastAgo    string
}

func summaryOf(agents []agentRow, msgs *substrate.Messages, entries []substrate.Entry, w *roomWords) summary {
	s := summary{Agents: len(agents)}
	for _, a := range agents {
		if a.present {
			s.Present = append(s.Present, a)
		}
	}
	tagNamesakes(s.Present)
	if msgs != nil {
		s.Messages, s.Unread, s.DirectedUnread = msgs.Count, msgs.Unread, msgs.DirectedUnread
	}
	for i := range entries {
		e := &entries[i]
		if e.Scope == "_actions" || e.Scope == "_views" || loom.IsScope(e.Scope) || substrate.MemoryOf(e.Scope, e.Key) != "" {
			continue
		}
		if s.LastChange == nil || e.UpdatedAt.After(s.LastChange.UpdatedAt) {
			s.LastChange = e
		}
	}
	if s.LastChange != nil {
		s.Last = describeEntry(s.LastChange, w)
		s.LastAgo = ago(s.LastChange.UpdatedAt)
	}
	return s
}

// feedSize is how many of a log's newest entries the room page shows.
const feedSize = 20

// logFeeds reads the newest entries of each readable scope's append log
// (a whole-room read holds mutable entries only), and for room authority
// the audit log: _messages has its own section. Scopes without a log read
// empty.
func (wb *Web) logFeeds(ctx context.Context, p *substrate.Principal, roomID string, mutable []substrate.Entry) ([]scope, error) {
	names := []string{substrate.ScopeShared}
	for _, e := range mutable {
		if !slices.Contains(names, e.Scope) && e.Scope != "_actions" && e.Scope != "_views" {
			names = append(names, e.Scope)
		}
	}
	if p.Admin() {
		names = append(names, substrate.ScopeAudit)
	}
	var out []scope
	for _, name := range names {
		st, err := wb.opt.Substrate.ReadState(ctx, p, roomID, substrate.ReadQuery{Scope: name, Limit: feedSize, Before: math.MaxInt64})
		if err != nil {
			if errs.From(err).Code == errs.Internal {
				return nil, err
			}
			continue
		}
		var logs, internal []substrate.Entry
		for _, e := range st.Entries {
			switch {
			case e.SortKey == nil:
			case loom.IsScope(name) || substrate.MemoryOf(name, e.Key) != "":
				internal = append(internal, e)
			default:
				logs = append(logs, e)
			}
		}
		if len(logs) > 0 {
			out = append(out, scope{Name: name, Entries: logs})
		}
		if len(internal) > 0 {
			out = append(out, scope{Name: name, Entries: internal, Internal: true})
		}
	}
	return out, nil
}

// scope is one scope's entries, sorted by key. Internal marks machinery
// (the loom's scopes, features' operational memory in agents' scopes such
// as their loom traces): the page folds it away under "Internals".
type scope struct {
	Name     string
	Entries  []substrate.Entry
	Internal bool
}

// ID is the scope's element id on the page.
func (s scope) ID() string {
	if s.Internal {
		return "internal-" + s.Name
	}
	return "scope-" + s.Name
}

// byScope groups the state by scope: _shared first, then the others by
// name, then the internal ones. Action and view definitions are left out:
// the page shows them as actions and views.
func byScope(entries []substrate.Entry) []scope {
	type k struct {
		name     string
		internal bool
	}
	m := map[k][]substrate.Entry{}
	for _, e := range entries {
		if e.Scope == "_actions" || e.Scope == "_views" {
			continue
		}
		// The system's own records (threads, acknowledgements, cooldowns)
		// go with the loom's and the agents' traces: the pages say them in
		// words (activity, threads), and they are much of a busy room.
		key := k{e.Scope, loom.IsScope(e.Scope) || substrate.IsSystemScope(e.Scope) || substrate.MemoryOf(e.Scope, e.Key) != ""}
		m[key] = append(m[key], e)
	}
	out := make([]scope, 0, len(m))
	for key, es := range m {
		sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
		out = append(out, scope{Name: key.name, Entries: es, Internal: key.internal})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Internal != b.Internal {
			return b.Internal
		}
		if (a.Name == substrate.ScopeShared) != (b.Name == substrate.ScopeShared) {
			return a.Name == substrate.ScopeShared
		}
		return a.Name < b.Name
	})
	return out
}

type agentRow struct {
	ID       string
	Presence map[string]any
	LastSeen string // relative: "12s ago"
	present  bool   // heard from within presentWithin
	// Tag tells the agent from another of the same name in a list (a
	// person's web agent and their model's agent are both named for the
	// person): the client its id names ("web", "claude-ai"), else its id.
	Tag string
}

// tagNamesakes sets Tag on each agent of rows whose name another shares.
func tagNamesakes(rows []agentRow) {
	n := map[string]int{}
	for _, a := range rows {
		n[a.Name()]++
	}
	for i, a := range rows {
		if n[a.Name()] < 2 {
			continue
		}
		rows[i].Tag = a.ID
		if client, ok := strings.CutPrefix(a.ID, a.Name()+":"); ok && client != "" {
			rows[i].Tag = client
		}
	}
}

// Name is the agent's name, or its id.
func (a agentRow) Name() string {
	if n, _ := a.Presence["name"].(string); n != "" {
		return n
	}
	return a.ID
}

func agentsOf(agents map[string]any) []agentRow {
	out := make([]agentRow, 0, len(agents))
	for id, a := range agents {
		m, _ := a.(map[string]any)
		row := agentRow{ID: id, Presence: m}
		if hb, ok := m["last_heartbeat"].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, hb); err == nil {
				row.LastSeen = ago(t)
				row.present = time.Since(t) < presentWithin && m["status"] != "done"
			}
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

type actionRow struct {
	ID string
	substrate.ActionView
	// Why is the first clause of the action's if that is false for the
	// reader, with what it read (when the reader can evaluate it).
	Why *expr.Explanation
}

func actionsOf(actions map[string]substrate.ActionView) []actionRow {
	out := make([]actionRow, 0, len(actions))
	for id, a := range actions {
		if a.Builtin {
			continue
		}
		out = append(out, actionRow{ID: id, ActionView: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

type viewRow struct {
	ID    string
	Value any
}

func viewsOf(views map[string]any) []viewRow {
	out := make([]viewRow, 0, len(views))
	for id, v := range views {
		out = append(out, viewRow{ID: id, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
