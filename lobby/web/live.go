// Live streams (/live/rooms/{id}): server-sent change notices, bounded
// per person or view token and per client address.

package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// live streams change notices for a room as server-sent events: an event
// "change" whose id is the room's seq after each commit or presence
// change. A browser reconnecting sends the last id it saw (Last-Event-ID)
// and is told at once if the room moved past it meanwhile.
func (wb *Web) live(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, _, _, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	key := viewToken
	if key == "" {
		key, _, _ = wb.opt.SignedIn(r)
	}
	// An IPv6 client holds (and picks addresses in) a whole /64: the
	// bound counts the /64, as the rate limits do.
	addr := "addr:" + httpmw.AddressKey(httpmw.ClientIP(r))
	if !wb.acquire(key, addr) {
		wb.errorPage(w, r, http.StatusTooManyRequests, "Too many live pages",
			fmt.Sprintf("At most %d pages per person (%d per address) can follow rooms live at once. Close some tabs and reload.", wb.opt.MaxStreams, wb.opt.MaxStreamsPerAddress), viewToken != "")
		return
	}
	defer wb.release(key, addr)
	ctx := r.Context()
	// The room's feed (livefeed.go) wakes the stream after each change
	// and shares its renders with the room's other streams.
	f, changes, err := wb.joinFeed(ctx, p, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	s := &liveStream{wb: wb, w: w, rc: http.NewResponseController(w), r: r, ctx: ctx, roomID: roomID, viewToken: viewToken,
		f: f, changes: changes, own: "stream " + strconv.FormatInt(wb.streamIDs.Add(1), 10)}
	defer func() { wb.leaveFeed(f, changes, []string{s.readAs, s.pageAs}) }()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on as they come
	if viewToken != "" {
		h.Set("Referrer-Policy", "no-referrer")
	}
	w.WriteHeader(http.StatusOK)
	s.shown, s.until = shownOf(r)
	s.userID, s.username, _ = wb.opt.SignedIn(r)
	s.run()
}

// liveStream is one live page's stream: what it sent last, under which
// of the feed's keys, for whom.
type liveStream struct {
	wb        *Web
	w         http.ResponseWriter
	rc        *http.ResponseController
	r         *http.Request
	ctx       context.Context
	roomID    string
	viewToken string
	// userID and username are the signed-in person's ("" for a view link).
	userID, username string
	f                *feed
	changes          chan struct{}
	// own names this stream's renders when its reader shares them with
	// no one (readKey "").
	own            string
	readAs, pageAs string // the keys of the stream's last render
	// shown is what the page shows: the seq it was rendered at (the
	// stream's ?seq=), or the last event it received (Last-Event-ID, on a
	// reconnect). Each event carries only what differs from the section
	// the stream last sent (or, at first, rendered): patches (diff.go).
	// A stream that does not say (an older page) takes the room as it is
	// now for what it shows.
	shown int64
	// until is when what the page shows next changes with no write, as
	// the read it rests on foresaw (zero: never): the page's (?until=, in
	// ms), or the last event's (its id, "<seq>-<until ms>"). A stream that
	// starts at the seq the page shows past that moment sends the section
	// all the same: a timer ran out between the page's read and now (the
	// page loading, a dropped connection).
	until time.Time
	// prev is the section as last sent, kept as HTML (a few tens of KB)
	// rather than parsed (several times that), and parsed again at the
	// next change: streams are many, changes few. Streams that last sent
	// the same section share the string.
	prev string
}

// shownOf reads what the page shows from the stream's request (see
// liveStream.shown and until).
func shownOf(r *http.Request) (shown int64, until time.Time) {
	shown = int64(-1)
	if v, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64); err == nil {
		shown = v
	}
	if v, err := strconv.ParseInt(r.URL.Query().Get("until"), 10, 64); err == nil && v > 0 {
		until = time.UnixMilli(v)
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		s, u, _ := strings.Cut(id, "-")
		if v, err := strconv.ParseInt(s, 10, 64); err == nil {
			shown, until = v, time.Time{}
			if v, err := strconv.ParseInt(u, 10, 64); err == nil && v > 0 {
				until = time.UnixMilli(v)
			}
		}
	}
	return shown, until
}

// run sends the first section, then one at each change the feed wakes
// the stream for, with a heartbeat in between, until the page goes away.
func (s *liveStream) run() {
	fmt.Fprintf(s.w, "retry: 2000\n\n")
	if !s.send(true) {
		return
	}
	s.wb.liveStarted.Add(1)
	_ = s.rc.Flush()
	beat := time.NewTicker(s.wb.opt.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wb.done:
			return
		case <-s.changes:
			ok := s.send(false)
			s.f.unsent.Add(-1)
			if !ok {
				return
			}
		case <-beat.C:
			fmt.Fprintf(s.w, ": keep-alive\n\n")
			if s.rc.Flush() != nil {
				return
			}
		}
	}
}

// send renders the section again for the reader (or takes the render
// of a stream that reads alike) and sends what changed; once the
// reader can no longer read the room it says so. false ends the stream.
func (s *liveStream) send(first bool) bool {
	// Each render reads with a context of its own, ended with it:
	// anything a read ties to its context's end is let go with the
	// render, not kept per update until the page closes, hours later.
	// The room's expression budget did so (issue 32's soak: 9,700
	// goroutines released at once when four pages closed after ten
	// minutes); substrate/work.go now ends each call's use itself, so
	// this is the stream's guard for whatever else might. A shared
	// render runs on a context of its own (livefeed.go: get).
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	pr, err := s.render(ctx, first)
	if err != nil {
		if ctx.Err() != nil {
			return false // the page went away meanwhile
		}
		if errs.From(err).Code == errs.Internal {
			s.wb.opt.Log.Error("live room page", "room", s.roomID, "err", err)
			return false // the browser reconnects
		}
		fmt.Fprintf(s.w, "event: gone\ndata: {}\n\n")
		_ = s.rc.Flush()
		return false
	}
	seq := pr.seq
	ev := liveEvent{Seq: seq}
	if pr.html == s.prev {
		return true // nothing the reader sees changed
	}
	if first {
		if s.shown < 0 || seq == s.shown && (s.until.IsZero() || time.Now().Before(s.until)) {
			s.prev, s.shown = pr.html, seq
			return true // the page shows this already
		}
		ev.HTML = pr.html
	} else if quiet, ok := s.changed(pr, &ev); !ok || quiet {
		return ok
	}
	s.prev = pr.html
	ev.Summary = summarize(pr.data, s.shown)
	s.shown = seq
	raw, _ := json.Marshal(ev)
	id := strconv.FormatInt(seq, 10)
	if !pr.until.IsZero() {
		id += "-" + strconv.FormatInt(pr.until.UnixMilli(), 10)
	}
	fmt.Fprintf(s.w, "id: %s\nevent: change\ndata: %s\n\n", id, raw)
	return s.rc.Flush() == nil
}

// changed puts into ev what differs between the section last sent and
// pr: patches when they are smaller than the section, else the section.
// quiet is true when nothing the reader sees changed (a write to what it
// may not read), ok false when the diff failed.
func (s *liveStream) changed(pr *pageRender, ev *liveEvent) (quiet, ok bool) {
	d := pr.diff(s.prev)
	switch {
	case d.err != nil:
		s.wb.opt.Log.Error("live room page", "room", s.roomID, "err", d.err)
		return false, false
	case d.ok && d.none:
		// Nothing the reader sees changed (a write to what it may
		// not read): say nothing.
		return true, true
	case d.ok && d.size < len(pr.html):
		ev.Patches = d.patches
	default:
		ev.HTML = pr.html
	}
	return false, true
}

// render is the section as the reader sees it now, shared with the
// streams that read alike.
func (s *liveStream) render(ctx context.Context, first bool) (*pageRender, error) {
	// A stream's first section is read after it joined the feed, as
	// before it shared: a render started earlier (at the same epoch)
	// may predate what the page shows.
	var notBefore time.Time
	if first {
		notBefore = time.Now()
	}
	// Access is read again at each change, per stream: a person who
	// left the room, or a view token rotated since, hears no more of
	// it, and the keys below are those of the reader's authority now.
	var p *substrate.Principal
	var err error
	who, access := "view link (read-only)", ""
	if s.viewToken != "" {
		p, err = s.wb.opt.Substrate.AuthenticateIn(ctx, s.roomID, s.viewToken)
	} else {
		p, access, err = s.wb.opt.Lobby.PersonPrincipal(ctx, s.userID, s.username, s.roomID)
		who = s.username + " (" + access + ")"
	}
	if err != nil {
		return nil, err
	}
	pageUser := ""
	if s.viewToken == "" {
		pageUser = s.userID
	}
	rk := readKey(p, access, s.viewToken)
	if rk == "" {
		rk = s.own
	}
	pk := pageKey(rk, who, pageUser, access, s.viewToken, tableQuery(s.r.URL.Query()).Encode())
	f := s.f
	f.retain(s.readAs, rk)
	f.readsAs(s.changes, rk)
	s.readAs = rk
	f.retain(s.pageAs, pk)
	s.pageAs = pk
	pr, _, err := get(ctx, f, f.pages, pk, notBefore, func(ctx context.Context) (*pageRender, time.Time, error) {
		rr, read, err := get(ctx, f, f.reads, rk, notBefore, func(ctx context.Context) (*roomRead, time.Time, error) {
			return s.read(ctx, p, rk)
		})
		if err != nil {
			return nil, read, err
		}
		data := rr.page(p.AgentID, pageUser, who, access, s.viewToken, s.r.URL.Query())
		var buf bytes.Buffer
		if err := s.wb.tmpl.ExecuteTemplate(&buf, "roommain.html", data); err != nil {
			return nil, read, fmt.Errorf("rendering the section: %w", err) // internal: logged, the browser reconnects
		}
		s.wb.liveRenders.Add(1)
		seq, _ := data["Seq"].(int64)
		return &pageRender{html: buf.String(), seq: seq, until: rr.until, data: data, diffs: map[string]*diffResult{}}, read, nil
	})
	return pr, err
}

// read reads the room as reader for the feed's renders under rk. The
// read says when the room as it read it changes next with no commit (a
// timer, a moment of now): the feed wakes its streams then.
func (s *liveStream) read(ctx context.Context, reader *substrate.Principal, rk string) (*roomRead, time.Time, error) {
	s.wb.liveReads.Add(1)
	epoch := s.f.current()
	ctx, fs := s.wb.opt.Substrate.Foresee(ctx)
	rr, err := s.wb.readRoom(ctx, reader, s.roomID, s.viewToken == "", msgPage{})
	if err == nil {
		rr.until = fs.Next()
		s.f.foresee(rk, epoch, rr.until)
	}
	return rr, time.Time{}, err
}

func patchBytes(ps []patch) int {
	n := 0
	for _, p := range ps {
		n += len(p.HTML) + len(p.ID) + 40
	}
	return n
}

// liveEvent is one live update: the room's seq, the patches that bring
// the page's main section to it, or (when patches would not be smaller,
// or the page is behind) the whole section as HTML, and a sentence for
// the page's live region saying what happened.
type liveEvent struct {
	Seq     int64           `json:"seq"`
	Patches json.RawMessage `json:"patches,omitempty"` // []patch, marshalled once per diff
	HTML    string          `json:"html,omitempty"`
	Summary string          `json:"summary,omitempty"`
}

// roomRead is what the room page's main section shows every reader
// with one authority: the room (roomData) and the recent activity and
// messages (activity.go). Live streams that read alike share one
// (livefeed.go): it is read-only.
type roomRead struct {
	// until is when the room as read next changes with no write, as the
	// read foresaw (zero: never, or not asked).
	until  time.Time
	data   map[string]any
	msgs   []messageRow      // ToYou unset: page marks them per reader
	owners map[string]string // an agent messages are directed to → the person who owns it ("" none)
}

// readRoom reads the room with the messages of page pg (live streams:
// the newest).
func (wb *Web) readRoom(ctx context.Context, p *substrate.Principal, roomID string, people bool, pg msgPage) (*roomRead, error) {
	data, err := wb.roomData(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	data["CanReplay"] = p.Admin()
	words, _ := data[wordsKey].(*roomWords)
	delete(data, wordsKey)
	rows, msgs, shown, owners, err := wb.activity(ctx, p, roomID, people, pg, words)
	if err != nil {
		return nil, err
	}
	data["Activity"], data["MessagesShown"] = rows, shown
	return &roomRead{data: data, msgs: msgs, owners: owners}, nil
}

// page is the section's data for one reader: who reads (who, with their
// access, or a view token), what they may do, and the messages directed
// to them (to their agent, agentID, or to any the person, userID, owns).
// q is the page's query: the tables show the pages it asks for.
func (rr *roomRead) page(agentID, userID, who, access, viewToken string, q url.Values) map[string]any {
	data := maps.Clone(rr.data)
	if groups, ok := data["Surfaces"].([]surfaceGroup); ok {
		data["Surfaces"] = pageTables(groups, q)
	}
	data["Who"], data["ViewToken"] = who, viewToken
	// Acting is for signed-in people who may: not view links, not
	// observers (the form's post says so if it is tried anyway).
	data["CanAct"] = viewToken == "" && canAct(access)
	data["CanRotate"] = viewToken == "" && access == "owner"
	data["MessageLog"] = toYou(rr.msgs, rr.owners, agentID, userID)
	return data
}

// mainData is what the room page's main section shows the reader (see
// roomRead). The page and its live stream both render from it.
func (wb *Web) mainData(ctx context.Context, r *http.Request, p *substrate.Principal, roomID, who, access, viewToken string) (map[string]any, error) {
	userID := ""
	if viewToken == "" {
		userID, _, _ = wb.opt.SignedIn(r)
	}
	// The page says when what it shows next changes with no write, so
	// that its live stream, starting later, knows if it did meanwhile.
	ctx, fs := wb.opt.Substrate.Foresee(ctx)
	rr, err := wb.readRoom(ctx, p, roomID, viewToken == "", msgPageOf(r.URL.Query()))
	if err != nil {
		return nil, err
	}
	data := rr.page(p.AgentID, userID, who, access, viewToken, r.URL.Query())
	if t := fs.Next(); !t.IsZero() {
		data["Until"] = t.UnixMilli()
	}
	return data, nil
}

func (wb *Web) acquire(key, addr string) bool {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.streams[key] >= wb.opt.MaxStreams || wb.streams[addr] >= wb.opt.MaxStreamsPerAddress {
		return false
	}
	wb.streams[key]++
	wb.streams[addr]++
	return true
}

func (wb *Web) release(keys ...string) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	for _, key := range keys {
		if wb.streams[key]--; wb.streams[key] <= 0 {
			delete(wb.streams, key)
		}
	}
}
