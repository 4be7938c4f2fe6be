package web

import (
	"fmt"
	"html"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/search"
)

// The search pages (issue 31): a room's (/web/rooms/{room}/search, with
// the person's authority in the room or a view link's) and the lobby's
// across the person's rooms (/web/search). Both are GET forms over the
// one search operation, so a page finds exactly what the person could
// read in the room, and nothing else.

func (wb *Web) searchRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /web/rooms/{room}/search", wb.roomSearch)
	mux.HandleFunc("GET /web/search", wb.lobbySearch)
	mux.HandleFunc("GET /web/rooms/{room}/threads", wb.threadsPage)
}

// pageHit is a hit as the page shows it.
type pageHit struct {
	Room, Where, Link, Meta string
	Snippet                 template.HTML
}

// marked is a snippet with its «matches» marked up, the rest escaped.
func marked(s string) template.HTML {
	s = html.EscapeString(s)
	s = strings.ReplaceAll(s, "«", "<mark>")
	s = strings.ReplaceAll(s, "»", "</mark>")
	// An unbalanced mark (a « in the text itself) is closed.
	if n := strings.Count(s, "<mark>") - strings.Count(s, "</mark>"); n > 0 {
		s += strings.Repeat("</mark>", n)
	}
	return template.HTML(s)
}

// pageHitOf places a hit in its room for the page.
func pageHitOf(room, viewToken string, h search.Hit) pageHit {
	base := "/rooms/" + url.PathEscape(room)
	q := ""
	if viewToken != "" {
		q = "?view=" + url.QueryEscape(viewToken)
	}
	ph := pageHit{Room: room, Snippet: marked(h.Snippet)}
	switch h.Kind {
	case "message":
		ph.Where = "message " + strconv.FormatInt(h.Seq, 10) + " from " + h.From
		ph.Link = base + q + "#h-messages"
		if h.Thread != 0 {
			ph.Link = "/web/rooms/" + url.PathEscape(room) + "/threads" + q + "#thread-" + strconv.FormatInt(h.Thread, 10)
			ph.Where += ", thread " + strconv.FormatInt(h.Thread, 10)
		}
	case "view":
		ph.Where = "view " + h.Key
		ph.Link = base + q + "#h-views"
	default:
		ph.Where = h.Scope + " / " + h.Key
		ph.Link = base + q + "#scope-" + h.Scope
	}
	if !h.At.IsZero() {
		ph.Meta = ago(h.At)
	}
	return ph
}

func (wb *Web) roomSearch(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, who, _, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	data := map[string]any{"RoomID": roomID, "Who": who, "ViewToken": viewToken, "Query": r.URL.Query().Get("q"), "Scope": r.URL.Query().Get("scope")}
	if strings.TrimSpace(r.URL.Query().Get("q")) != "" {
		req, err := search.ParseRequest(r.URL.Query().Get)
		if err != nil {
			wb.fail(w, r, err)
			return
		}
		if viewToken == "" {
			// The person's searches: theirs alone count against the cap.
			req.Caller, _, _ = wb.opt.SignedIn(r)
		}
		res, err := search.Room(r.Context(), wb.opt.Substrate, p, roomID, req)
		if err != nil {
			wb.fail(w, r, err)
			return
		}
		hits := make([]pageHit, 0, len(res.Hits))
		for _, h := range res.Hits {
			hits = append(hits, pageHitOf(roomID, viewToken, h))
		}
		data["Searched"], data["Hits"] = true, hits
		if res.Next != nil {
			next := r.URL.Query()
			next.Set("offset", strconv.Itoa(*res.Next))
			data["Next"] = "?" + next.Encode()
		}
	}
	wb.render(w, r, http.StatusOK, "search", data, viewToken != "")
}

func (wb *Web) lobbySearch(w http.ResponseWriter, r *http.Request) {
	userID, username, signed := wb.opt.SignedIn(r)
	if !signed {
		http.Redirect(w, r, "/signin?next="+urlPath(r), http.StatusSeeOther)
		return
	}
	data := map[string]any{"Who": username, "Query": r.URL.Query().Get("q"), "Scope": r.URL.Query().Get("scope")}
	if strings.TrimSpace(r.URL.Query().Get("q")) != "" {
		req, err := search.ParseRequest(r.URL.Query().Get)
		if err != nil {
			wb.fail(w, r, err)
			return
		}
		res, err := wb.opt.Lobby.SearchPerson(r.Context(), userID, username, req, pageWords)
		if err != nil {
			wb.fail(w, r, err)
			return
		}
		hits := make([]pageHit, 0, len(res.Hits))
		for _, h := range res.Hits {
			hits = append(hits, pageHitOf(h.Room, "", h))
		}
		data["Searched"], data["Hits"], data["More"] = true, hits, moreLinks(res, r.URL.Query())
	}
	wb.render(w, r, http.StatusOK, "search", data, false)
}

// moreLinks are the rooms with more hits, each linked to its own search.
func moreLinks(res *lobby.RoomsSearch, q url.Values) []pageHit {
	var out []pageHit
	rooms := make([]string, 0, len(res.More))
	for room := range res.MoreIn {
		rooms = append(rooms, room)
	}
	sort.Strings(rooms)
	for _, room := range rooms {
		v := url.Values{"q": {q.Get("q")}}
		if s := q.Get("scope"); s != "" {
			v.Set("scope", s)
		}
		out = append(out, pageHit{Room: room, Link: "/web/rooms/" + url.PathEscape(room) + "/search?" + v.Encode()})
	}
	return out
}

// pageWords word a step as the page that takes it, where there is one.
var pageWords errs.Words = pageWordsT{}

type pageWordsT struct{}

func (pageWordsT) Say(s errs.Step) string {
	if s.Op == errs.OpSearch {
		v := url.Values{}
		for k, a := range s.Args {
			v.Set(k, fmt.Sprint(a))
		}
		return "/web/rooms/" + url.PathEscape(s.Room) + "/search?" + v.Encode()
	}
	return errs.Plain.Say(s)
}
