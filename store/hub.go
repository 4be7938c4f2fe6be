package store

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Hub fans room notifications out to in-process subscribers: one LISTEN
// connection per process, however many waiters. Every process on the same
// database hears every commit, so a waiter is woken whichever process
// served the write.
type Hub struct {
	db  *DB
	log *slog.Logger

	mu   sync.Mutex
	subs map[string]map[*Sub]struct{}
	// psubs are the subscribers of subs that take presence-only
	// notifications: those are the most frequent (an agent starting or
	// ending a wait, a heartbeat), and with ten thousand waits on state in
	// a room each one looked at all ten thousand to wake none.
	psubs   map[string]map[*Sub]struct{}
	running bool
	ready   chan struct{} // closed once LISTEN is in place
	cancel  context.CancelFunc
	done    chan struct{}

	received atomic.Int64 // notifications heard
}

// Received reports how many room notifications the hub has heard.
func (h *Hub) Received() int64 { return h.received.Load() }

// Sub is one subscription to a room's notifications.
type Sub struct {
	// C receives a value after each notification for the room (coalesced:
	// several commits may arrive as one wake-up) and after the listener
	// reconnects, when notifications may have been missed.
	C    chan struct{}
	room string
	hub  *Hub
	// presence: also woken by presence-only notifications (PresenceNote);
	// guarded by hub.mu.
	presence bool
}

// PresenceNote is the payload's second word for a change of presence only
// (an agent's status, waiting_on or heartbeat), which commits no room seq:
// "<room> presence". Subscribers that do not read presence skip it, so a
// thousand agents starting to wait do not wake each other a million times.
const PresenceNote = "presence"

// NewHub returns a hub; its listener starts with the first subscription.
func NewHub(db *DB, log *slog.Logger) *Hub {
	return &Hub{db: db, log: log, subs: map[string]map[*Sub]struct{}{}, psubs: map[string]map[*Sub]struct{}{}}
}

// Subscribe registers for room's notifications and returns once the
// listener is in place, so a change committed after Subscribe returns is
// never missed. With presence false, presence-only notifications are not
// delivered.
func (h *Hub) Subscribe(ctx context.Context, room string, presence bool) (*Sub, error) {
	s := &Sub{C: make(chan struct{}, 1), room: room, hub: h, presence: presence}
	h.mu.Lock()
	if h.subs[room] == nil {
		h.subs[room] = map[*Sub]struct{}{}
	}
	h.subs[room][s] = struct{}{}
	if presence {
		h.addPresence(s)
	}
	if !h.running {
		h.running = true
		h.ready = make(chan struct{})
		h.done = make(chan struct{})
		lctx, cancel := context.WithCancel(context.Background())
		h.cancel = cancel
		go h.listen(lctx, h.ready)
	}
	ready := h.ready
	h.mu.Unlock()
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.Close()
		return nil, ctx.Err()
	}
}

// WantPresence turns on delivery of presence-only notifications, for a
// subscriber that learns after subscribing that what it watches may read
// presence. A notification sent before the call may have been skipped: read
// again after calling it.
func (s *Sub) WantPresence() {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	if !s.presence {
		s.presence = true
		s.hub.addPresence(s)
	}
}

// addPresence indexes s among room's presence subscribers; h.mu is held.
func (h *Hub) addPresence(s *Sub) {
	if h.psubs[s.room] == nil {
		h.psubs[s.room] = map[*Sub]struct{}{}
	}
	h.psubs[s.room][s] = struct{}{}
}

// Presence reports whether presence-only notifications are delivered.
func (s *Sub) Presence() bool {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.presence
}

// Close ends the subscription.
func (s *Sub) Close() {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, all := range []map[string]map[*Sub]struct{}{h.subs, h.psubs} {
		if m := all[s.room]; m != nil {
			delete(m, s)
			if len(m) == 0 {
				delete(all, s.room)
			}
		}
	}
}

// Close stops the listener.
func (h *Hub) Close() {
	h.mu.Lock()
	running, cancel, done := h.running, h.cancel, h.done
	h.mu.Unlock()
	if running {
		cancel()
		<-done
	}
}

func (h *Hub) listen(ctx context.Context, ready chan struct{}) {
	defer close(h.done)
	backoff := 100 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, h.db.ConnConfig())
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+NotifyChannel)
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
			}
			if ctx.Err() == nil {
				h.log.Warn("notification listener cannot connect; retrying", "err", err, "in", backoff)
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if first {
			close(ready)
			first = false
		} else {
			h.wakeAll() // notifications may have been missed while away
		}
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				break
			}
			h.received.Add(1)
			room, what, _ := strings.Cut(n.Payload, " ")
			h.wake(room, what == PresenceNote)
		}
		conn.Close(context.Background())
	}
}

func (h *Hub) wake(room string, presenceOnly bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := h.subs[room]
	if presenceOnly {
		subs = h.psubs[room]
	}
	for s := range subs {
		select {
		case s.C <- struct{}{}:
		default:
		}
	}
}

func (h *Hub) wakeAll() {
	h.mu.Lock()
	rooms := make([]string, 0, len(h.subs))
	for r := range h.subs {
		rooms = append(rooms, r)
	}
	h.mu.Unlock()
	for _, r := range rooms {
		h.wake(r, false)
	}
}
