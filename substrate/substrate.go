package substrate

import (
	"cmp"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/delta"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/internal/coalesce"
	"github.com/syncsubstrate/sync/substrate/internal/readmarks"
	"github.com/syncsubstrate/sync/substrate/internal/tokenmemory"
	"github.com/syncsubstrate/sync/substrate/internal/waitbatch"
	"github.com/syncsubstrate/sync/substrate/internal/workmeter"
)

// Limits bound what one client can make the server do. Every breach is a
// 4xx with a stable code, and nothing is written.
type Limits struct {
	// MaxValueBytes caps one state value as compact JSON (after a merge is
	// applied). Default 64 KiB.
	MaxValueBytes int
	// MaxValueDepth caps how deeply one value's arrays and objects nest
	// (a scalar is depth 0, [1] and {"a": 1} depth 1), for every value
	// the server stores: state written directly or by an action (an
	// expression's result too), messages, params, meta, loom documents;
	// and for what a view returns. Readers, pages and the model's text
	// walk values level by level, so depth, not only size, decides what
	// a value costs them. Default 64: PostgreSQL fixes no jsonb depth of
	// its own and stops only at its stack depth (between 10,000 and
	// 20,000 levels with the default max_stack_depth of 2 MB), far past
	// what a reader should walk; stores that fix one choose 100 (BSON)
	// or 250, and no room document comes near 64.
	MaxValueDepth int
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
	// MaxActions and MaxViews cap the live actions and views of one room
	// (builtins not counted). Default 256 and 128.
	MaxActions, MaxViews int
	// KeepLogEntries is how many of the newest entries of each of a room's
	// _messages and _audit logs stay in state; older ones move to
	// state_archive (RetainLogs, run by the janitor). Default 50,000.
	KeepLogEntries int
	// ViewCostPerRead caps the cel-go cost of evaluating all of a room's
	// views (and their enabled expressions) for one read; views past it
	// show an error instead of a value, and a registration that would
	// exceed it is refused. Default 1,000,000 (ten views at the
	// per-expression limit, thousands of simple ones).
	ViewCostPerRead int
	// EnabledCostPerRead caps the cel-go cost of evaluating the room's
	// entry-level enabled expressions (state entries written with
	// "enabled") for one read: for the reader's state and once more for
	// each registrar whose actions and views the read evaluates, all from
	// one budget. Each evaluation counts at least 100 (its fixed overhead),
	// so the bound also caps how many run, and counts whether its result
	// was memoised or not. Gates are afforded in scope and key order; an
	// entry whose gate the budget could not afford is hidden (fail
	// closed), and the context's entries_unevaluated counts those hidden
	// from the reader. A write that gives an entry a new enabled
	// expression and would take a read by the room token past the budget
	// is refused (409 enabled_budget_exceeded) and writes nothing.
	// Default 1,000,000 (ten evaluations at the per-expression cost limit,
	// 10,000 of simple gates; about 30 ms of CPU at most).
	EnabledCostPerRead int
	// ActionCostPerRead caps the cel-go cost of evaluating the room's
	// actions' enabled and if expressions for availability in one read
	// (each counting at least 100), in id order; actions past it are not
	// evaluated and read as unavailable (an invocation still evaluates its
	// own), and a registration that would take a read past it is refused
	// (409 action_budget_exceeded). Default 1,000,000.
	ActionCostPerRead int
	// RoomCostPerSecond is each room's budget of expression work: the
	// cel-go cost (at least 100 per evaluation) of everything its reads,
	// waits and invocations evaluate, refilled per second, with two
	// seconds' worth saved up at most. Spent, the room's requests are
	// refused with 429 room_busy and Retry-After until it refills;
	// memoised results cost nothing. Default 2,000,000 (some 100 ms of CPU
	// per second); negative turns it off.
	RoomCostPerSecond int
	// GateQuantum is how long the result of an entry-level enabled
	// expression that reads now (and not agents) is reused for the same
	// reader:
	// such a gate may show or hide its entry up to this late. Default 1 s;
	// negative evaluates them at every read.
	GateQuantum time.Duration
}

func (l *Limits) fill() {
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&l.MaxValueBytes, 64<<10)
	def(&l.MaxValueDepth, 64)
	def(&l.MaxKeyBytes, 256)
	def(&l.MaxScopeBytes, 128)
	def(&l.MaxBatchWrites, 100)
	def(&l.MaxKeysPerScope, 10_000)
	def(&l.MaxMetaBytes, 16<<10)
	def(&l.MaxReadEntries, 10_000)
	def(&l.MaxLogPage, 1000)
	def(&l.MaxGrants, 64)
	def(&l.MaxActions, 256)
	def(&l.MaxViews, 128)
	def(&l.ViewCostPerRead, 1_000_000)
	def(&l.EnabledCostPerRead, 1_000_000)
	def(&l.ActionCostPerRead, 1_000_000)
	def(&l.KeepLogEntries, 50_000)
	if l.RoomCostPerSecond == 0 {
		l.RoomCostPerSecond = 2_000_000
	}
	if l.GateQuantum == 0 {
		l.GateQuantum = time.Second
	}
}

// Options configure a Service.
type Options struct {
	// Limits; zero fields take their defaults.
	Limits Limits
	// HeartbeatEvery is how stale an agent's last_heartbeat may get before an
	// authenticated call refreshes it; calls in between skip the write.
	// Default 2 s.
	HeartbeatEvery time.Duration
	// CEL configures the expression environment (cost limit, source
	// limit, deadline); zero fields take expr's defaults.
	CEL expr.Options
	// Wait bounds conditional waits.
	Wait WaitOptions
	// Features are the packages built on rooms this Service runs
	// (features.go): their reserved scopes and memory, read rules and
	// salience. cmd/syncd lists every feature of the repository
	// (loom.Feature(), salience.Feature()). Default none: no salience in
	// the envelope, and the reserved names of every feature left out
	// sealed (the loom's scopes read by nobody and written by nobody, an
	// agent's loom memory read by the agent and room authority only).
	Features []Feature
	// NoSalience turns adaptive salience off (for comparing its cost);
	// rooms turn it off with _shared._config.salience.off. Default false.
	NoSalience bool
	// NoGroupCommit gives every invocation a transaction of its own;
	// by default invocations that arrive for a room while its
	// transaction is open share the next one (mutation.go).
	NoGroupCommit bool
	// IdleAfter is how long an agent may go unseen (no authenticated call,
	// heartbeat or embodiment) before the lobby shows it as idle, with
	// idle_for_s. Default 5 minutes.
	IdleAfter time.Duration
	// AckOverdue is how long a message's request for acknowledgement
	// waits before it shows in the recipient's _attention as overdue.
	// Default 10 minutes.
	AckOverdue time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// WaitOptions bound GET /rooms/:id/wait.
type WaitOptions struct {
	// DefaultTimeout applies when the request names none. Default 25 s.
	DefaultTimeout time.Duration
	// MaxTimeout caps any requested timeout. Default and upper bound 45 s,
	// so an MCP client with a 60 s tool limit can simply call again.
	MaxTimeout time.Duration
	// Recheck is the safety-net re-evaluation period, for changes whose
	// notification was lost (timers and moments of now wake waits
	// themselves: clockFor in wait.go). Default 5 s.
	Recheck time.Duration
	// NowRecheck is how often a wait re-checks a condition that depends
	// on now in a way it cannot foresee (a function of now such as
	// now.getHours(), a comparison inside a comprehension), directly or
	// through a view or gate; waits comparing now with a moment wake at
	// that moment instead. Aligned on the wall clock. Default 1 s.
	NowRecheck time.Duration
}

// Service is the substrate over one database.
type Service struct {
	db     *store.DB
	lim    Limits
	hbEach time.Duration
	// idleAfter is Options.IdleAfter.
	idleAfter time.Duration
	log       *slog.Logger
	cel       *expr.Env
	snaps     *snapCache
	wait      WaitOptions
	hub       *store.Hub
	// marks queues context reads' marks for one background writer.
	marks *readmarks.Marks
	// waitq shares woken waits' round trips (package waitbatch).
	waitq *waitbatch.Batches
	// presence shares a room's presence read between its readers
	// (readpath.go), made on first use.
	presenceOnce sync.Once
	presence     *coalesce.Batcher[string, struct{}, roomPresence]
	// wired is what Options.Features add to the core.
	wired wiring
	// noSalience is Options.NoSalience.
	noSalience bool
	// ackOverdue is Options.AckOverdue.
	ackOverdue time.Duration
	// feat holds what features attached (Feature).
	feat features
	// viewEvals counts view evaluations (Stats).
	viewEvals atomic.Int64
	// waits counts waits open now (Stats).
	waits atomic.Int64
	// shownWaiting, when set (tests only), runs as soon as a wait has
	// shown its agent waiting: what another agent does on seeing that.
	shownWaiting func(roomID, agentID string)
	// waitSleeps, when set (tests only), is told how long each check of a
	// wait that did not hold lets it sleep.
	waitSleeps func(roomID string, next time.Duration)
	// searchJudged, when set (tests only), runs once a search has decided
	// what its reader may see and before it reads the text it shows: a
	// test rewrites an entry there as a concurrent writer would.
	searchJudged func(roomID string)
	// searchTimeout, when set (tests only), replaces searchrule.StatementTime.
	searchTimeout time.Duration
	// invocations counts Invoke's outcomes by "ok" or error code (Stats).
	invocations sync.Map // string → *atomic.Int64
	// workMeter is each room's expression budget (nil: off); roomBusy
	// counts its refusals (Stats).
	workMeter *workmeter.Meter
	roomBusy  atomic.Int64
	// searching counts each credential's searches running now
	// (searchSlot), under searchMu.
	searchMu  sync.Mutex
	searching map[string]int
	// group queues invocations per room for group commit (nil: off).
	group *groupCommit
	// tokens remembers invocations' token lookups (AuthenticateInvoke).
	tokens tokenmemory.Memory[*Principal]
}

// Stats are counters of the service's work since it started.
type Stats struct {
	// ViewEvaluations counts views evaluated; a view whose value depends
	// only on the room's state is evaluated once per state, whoever reads.
	ViewEvaluations int64
	// OpenWaits is the number of waits in progress now.
	OpenWaits int64
	// Notifications counts room notifications this process heard.
	Notifications int64
	// Invocations counts invocations (actions and builtins, on every
	// surface) by outcome: "ok" or the error code that refused them. The
	// codes are errs' fixed set, so the map stays small.
	Invocations map[string]int64
	// CELEvaluations counts expression evaluations; CELCost sums their
	// cel-go runtime cost (what the per-expression limit counts).
	CELEvaluations, CELCost uint64
	// RoomBusy counts requests refused because their room had spent its
	// expression budget (Limits.RoomCostPerSecond).
	RoomBusy int64
	// GroupBatches counts group transactions, GroupInvocations the
	// invocations they carried, GroupLargest the most one carried;
	// GroupRounds their rounds of reads under the lock, GroupRedone the
	// invocations evaluated again after PostgreSQL refused an earlier
	// one's statement.
	GroupBatches, GroupInvocations, GroupLargest, GroupRounds, GroupRedone int64
}

// Stats reports the counters now.
func (s *Service) Stats() Stats {
	st := Stats{ViewEvaluations: s.viewEvals.Load(), OpenWaits: s.waits.Load(), Notifications: s.hub.Received(),
		Invocations: map[string]int64{}}
	s.invocations.Range(func(k, v any) bool {
		st.Invocations[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	st.CELEvaluations, st.CELCost = s.cel.Stats()
	st.RoomBusy = s.roomBusy.Load()
	if g := s.group; g != nil {
		gs := g.Stats()
		st.GroupBatches, st.GroupInvocations, st.GroupLargest = gs.Batches, gs.Invocations, gs.Largest
		st.GroupRounds, st.GroupRedone = gs.Rounds, gs.Redone
	}
	return st
}

// countInvocation records an invocation's outcome for Stats.
func (s *Service) countInvocation(err error) {
	outcome := "ok"
	if err != nil {
		outcome = string(errs.From(err).Code)
	}
	c, ok := s.invocations.Load(outcome)
	if !ok {
		c, _ = s.invocations.LoadOrStore(outcome, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
}

// New returns a Service over db.
func New(db *store.DB, opt Options) *Service {
	opt.Limits.fill()
	if opt.HeartbeatEvery <= 0 {
		opt.HeartbeatEvery = 2 * time.Second
	}
	if opt.IdleAfter <= 0 {
		opt.IdleAfter = 5 * time.Minute
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	w := &opt.Wait
	if w.MaxTimeout <= 0 || w.MaxTimeout > 45*time.Second {
		w.MaxTimeout = 45 * time.Second
	}
	if w.DefaultTimeout <= 0 {
		w.DefaultTimeout = 25 * time.Second
	}
	w.DefaultTimeout = min(w.DefaultTimeout, w.MaxTimeout)
	if w.Recheck <= 0 {
		w.Recheck = 5 * time.Second
	}
	if w.NowRecheck <= 0 {
		w.NowRecheck = time.Second
	}
	var wm *workmeter.Meter
	if opt.Limits.RoomCostPerSecond > 0 {
		wm = workmeter.New(opt.Limits.RoomCostPerSecond)
	}
	s := &Service{db: db, lim: opt.Limits, hbEach: opt.HeartbeatEvery, idleAfter: opt.IdleAfter, log: opt.Logger, workMeter: wm,
		cel:   expr.MustNew(opt.CEL),
		snaps: newSnapCache(),
		wait:  *w,
		hub:   store.NewHub(db, opt.Logger),
		marks: readmarks.New(db, sqlMarkReads, opt.Logger),
		waitq: waitbatch.New(waitStatements(db)),

		wired:      wire(opt.Features),
		noSalience: opt.NoSalience,
		ackOverdue: cmp.Or(opt.AckOverdue, AckOverdue),
	}
	if !opt.NoGroupCommit {
		s.group = newGroupCommit(s)
	}
	return s
}

// Close writes the queued read marks and stops the service's
// notification listener.
func (s *Service) Close() {
	s.marks.Close()
	s.hub.Close()
}

// Limits returns the limits in force, for help texts and error messages.
func (s *Service) Limits() Limits { return s.lim }

// WaitTimeout is the timeout a wait asking for asked gets: the default
// when asked is zero or less, at most the maximum.
func (s *Service) WaitTimeout(asked time.Duration) time.Duration {
	t, _ := delta.Timeout(asked, s.wait.DefaultTimeout, s.wait.MaxTimeout)
	return t
}
