// Package substrate is the domain of sync: rooms, agents, scoped versioned
// state and (later) actions, views, CEL and wait. It knows nothing of OAuth,
// users or MCP; callers present a Principal that an adapter authenticated.
//
// Every room mutation is one PostgreSQL transaction that locks the room row,
// takes its sequence numbers from rooms.seq, applies its writes, appends an
// _audit entry and queues a notification delivered on commit.
package substrate

import (
	"log/slog"
	"time"

	"github.com/syncsubstrate/sync/store"
)

// Limits bound what one client can make the server do. Every breach is a
// 4xx with a stable code, and nothing is written.
type Limits struct {
	// MaxValueBytes caps one state value as compact JSON (after a merge is
	// applied). Default 64 KiB.
	MaxValueBytes int
	// MaxKeyBytes caps a state key. Default 256.
	MaxKeyBytes int
	// MaxScopeBytes caps a scope name, a room id and an agent id. Default 128.
	MaxScopeBytes int
	// MaxBatchWrites caps the writes of one batch. Default 100.
	MaxBatchWrites int
	// MaxKeysPerScope caps the mutable keys of one scope; append logs are not
	// counted. Default 10,000 (seed 001: rooms are bounded).
	MaxKeysPerScope int
	// MaxMetaBytes caps room and agent meta objects. Default 16 KiB.
	MaxMetaBytes int
	// MaxReadEntries caps the entries of a whole-room state read. Default
	// 10,000.
	MaxReadEntries int
	// MaxLogPage caps the append entries of one scope read; logs are paged
	// with after/limit. Default 1,000.
	MaxLogPage int
	// MaxGrants caps the scope grants of one agent. Default 64.
	MaxGrants int
}

func (l *Limits) fill() {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&l.MaxValueBytes, 64<<10)
	def(&l.MaxKeyBytes, 256)
	def(&l.MaxScopeBytes, 128)
	def(&l.MaxBatchWrites, 100)
	def(&l.MaxKeysPerScope, 10_000)
	def(&l.MaxMetaBytes, 16<<10)
	def(&l.MaxReadEntries, 10_000)
	def(&l.MaxLogPage, 1000)
	def(&l.MaxGrants, 64)
}

// Options configure a Service.
type Options struct {
	// Limits; zero fields take their defaults.
	Limits Limits
	// HeartbeatEvery is how stale an agent's last_heartbeat may get before an
	// authenticated call refreshes it; calls in between skip the write.
	// Default 2 s.
	HeartbeatEvery time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Service is the substrate over one database.
type Service struct {
	db     *store.DB
	lim    Limits
	hbEach time.Duration
	log    *slog.Logger
}

// New returns a Service over db.
func New(db *store.DB, opt Options) *Service {
	opt.Limits.fill()
	if opt.HeartbeatEvery <= 0 {
		opt.HeartbeatEvery = 2 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	return &Service{db: db, lim: opt.Limits, hbEach: opt.HeartbeatEvery, log: opt.Logger}
}

// Limits returns the limits in force, for help texts and error messages.
func (s *Service) Limits() Limits { return s.lim }
