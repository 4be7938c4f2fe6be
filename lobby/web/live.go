// Live streams (/live/rooms/{id}): server-sent change notices, bounded
// per person or view token and per client address.

package web

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

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
	last, _ := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64)
	// send tells the page the room changed (a presence change keeps the
	// seq), or that it is gone.
	userID, username, _ := wb.opt.SignedIn(r)
	send := func() bool {
		// Access is read again at each change: a person who left the room,
		// or a view token rotated since, hears no more of it.
		var err error
		if viewToken != "" {
			_, err = wb.opt.Substrate.AuthenticateIn(ctx, roomID, viewToken)
		} else {
			p, _, err = wb.opt.Lobby.PersonPrincipal(ctx, userID, username, roomID)
		}
		if err != nil {
			fmt.Fprintf(w, "event: gone\ndata: {}\n\n")
			_ = rc.Flush()
			return false
		}
		room, err := wb.opt.Substrate.GetRoom(ctx, p, roomID)
		if err != nil {
			fmt.Fprintf(w, "event: gone\ndata: {}\n\n")
			_ = rc.Flush()
			return false
		}
		last = room.Seq
		fmt.Fprintf(w, "id: %d\nevent: change\ndata: {\"seq\": %d}\n\n", room.Seq, room.Seq)
		return rc.Flush() == nil
	}
	fmt.Fprintf(w, "retry: 2000\n\n")
	if r.Header.Get("Last-Event-ID") != "" {
		// A reconnect: tell the page at once if it missed a change.
		if room, err := wb.opt.Substrate.GetRoom(ctx, p, roomID); err != nil || room.Seq != last {
			if !send() {
				return
			}
		}
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
			if !send() {
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
