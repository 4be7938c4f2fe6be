// Live streams (/live/rooms/{id}): server-sent change notices, bounded
// per person or view token and per client address.

package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
	changes, stop, err := wb.opt.Substrate.Watch(ctx, p, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	defer stop()
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on as they come
	if viewToken != "" {
		h.Set("Referrer-Policy", "no-referrer")
	}
	w.WriteHeader(http.StatusOK)
	// shown is what the page shows: the seq it was rendered at (the
	// stream's ?seq=), or the last event it received (Last-Event-ID, on a
	// reconnect). Each event carries only what differs from the section
	// the stream last sent (or, at first, rendered): patches (diff.go).
	// A stream that does not say (an older page) takes the room as it is
	// now for what it shows.
	shown := int64(-1)
	if v, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64); err == nil {
		shown = v
	}
	if v, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil {
		shown = v
	}
	userID, username, _ := wb.opt.SignedIn(r)
	// prev is the section as last sent, kept as HTML (a few tens of KB)
	// rather than parsed (several times that), and parsed again at the
	// next change: streams are many, changes few.
	var prev string
	// send renders the section again for the reader and sends what
	// changed; once the reader can no longer read the room it says so.
	send := func(first bool) bool {
		// Each render reads with a context of its own, ended with it:
		// anything a read ties to its context's end is let go with the
		// render, not kept per update until the page closes, hours later.
		// The room's expression budget did so (issue 32's soak: 9,700
		// goroutines released at once when four pages closed after ten
		// minutes); substrate/work.go now ends each call's use itself, so
		// this is the stream's guard for whatever else might.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// Access is read again at each change: a person who left the room,
		// or a view token rotated since, hears no more of it.
		var err error
		who, access := "view link (read-only)", ""
		if viewToken != "" {
			p, err = wb.opt.Substrate.AuthenticateIn(ctx, roomID, viewToken)
		} else {
			p, access, err = wb.opt.Lobby.PersonPrincipal(ctx, userID, username, roomID)
			who = username + " (" + access + ")"
		}
		var data map[string]any
		if err == nil {
			data, err = wb.mainData(ctx, r, p, roomID, who, access, viewToken)
		}
		if err != nil {
			if ctx.Err() != nil {
				return false // the page went away meanwhile
			}
			if errs.From(err).Code == errs.Internal {
				wb.opt.Log.Error("live room page", "room", roomID, "err", err)
				return false // the browser reconnects
			}
			fmt.Fprintf(w, "event: gone\ndata: {}\n\n")
			_ = rc.Flush()
			return false
		}
		var buf bytes.Buffer
		if err := wb.tmpl.ExecuteTemplate(&buf, "roommain.html", data); err != nil {
			wb.opt.Log.Error("live room page", "room", roomID, "err", err)
			return false
		}
		seq, _ := data["Seq"].(int64)
		ev := liveEvent{Seq: seq}
		if buf.String() == prev {
			return true // nothing the reader sees changed
		}
		var ps []patch
		ok := false
		if !first {
			old, err1 := parseMain(prev)
			nodes, err2 := parseMain(buf.String())
			if err := errors.Join(err1, err2); err != nil {
				wb.opt.Log.Error("live room page", "room", roomID, "err", err)
				return false
			}
			ps, ok = diffMain(old, nodes)
		}
		switch {
		case first:
			if seq == shown || shown < 0 {
				prev, shown = buf.String(), seq
				return true // the page shows this already
			}
			ev.HTML = buf.String()
		case ok && len(ps) == 0:
			// Nothing the reader sees changed (a write to what it may not
			// read): say nothing.
			return true
		case ok && patchBytes(ps) < buf.Len():
			ev.Patches = ps
		default:
			ev.HTML = buf.String()
		}
		prev = buf.String()
		ev.Summary = summarize(data, shown)
		shown = seq
		raw, _ := json.Marshal(ev)
		fmt.Fprintf(w, "id: %d\nevent: change\ndata: %s\n\n", seq, raw)
		return rc.Flush() == nil
	}
	fmt.Fprintf(w, "retry: 2000\n\n")
	if !send(true) {
		return
	}
	_ = rc.Flush()
	beat := time.NewTicker(wb.opt.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wb.done:
			return
		case <-changes:
			if !send(false) {
				return
			}
		case <-beat.C:
			fmt.Fprintf(w, ": keep-alive\n\n")
			if rc.Flush() != nil {
				return
			}
		}
	}
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
	Seq     int64   `json:"seq"`
	Patches []patch `json:"patches,omitempty"`
	HTML    string  `json:"html,omitempty"`
	Summary string  `json:"summary,omitempty"`
}

// mainData is what the room page's main section shows the reader: the
// room (roomData), who reads it and what they may do, and the recent
// activity and messages (activity.go). The page and its live stream both
// render from it.
func (wb *Web) mainData(ctx context.Context, r *http.Request, p *substrate.Principal, roomID, who, access, viewToken string) (map[string]any, error) {
	data, err := wb.roomData(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	data["Who"], data["ViewToken"] = who, viewToken
	data["CanReplay"] = p.Admin()
	// Acting is for signed-in people who may: not view links, not
	// observers (the form's post says so if it is tried anyway).
	data["CanAct"] = viewToken == "" && canAct(access)
	data["CanRotate"] = viewToken == "" && access == "owner"
	userID := ""
	if viewToken == "" {
		userID, _, _ = wb.opt.SignedIn(r)
	}
	if err := wb.activity(ctx, p, roomID, userID, data); err != nil {
		return nil, err
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
