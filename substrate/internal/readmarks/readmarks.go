// Package readmarks takes a context read's marks off the request path:
// what it makes fast is a read, which queues what its agent saw and
// answers without writing. The rule the marks serve (what an agent has
// read: unread counts, salience, a wait's default delta) is the core's
// (context.go records a read's marks; readpath.go lays them over the
// agents' rows, and the core's SQL writes them). This package stores
// only what those reads reported, keyed by room and agent.
package readmarks

// Read marks off the request path. A context read records what its agent
// saw (last_context_seq, context_reads, last_seen_seq). Those marks are
// advice (unread counts, salience, a wait's default delta), so a read no
// longer writes them itself: it queues them here and answers; one
// background writer folds every mark queued meanwhile, across agents and
// rooms, into one UPDATE without waiting for the disk. Reads in this
// process see queued marks at once (overlay), so an agent's next read
// never counts as unread what its last read showed it; another process
// sees them once written (a few milliseconds), and a crash loses at most
// those in flight, which the next read repairs.
//
// The seqs are maxima: laying a mark over rows that already hold it
// changes nothing. The reads are a count, so the overlay must know
// whether the rows it lays marks over already hold a write of them. The
// writer's UPDATE returns each row's context_reads with the write in it
// (written), and commits only after this process knows it: context_reads
// only grows and the UPDATE holds the row until COMMIT, so a row read
// holds the write exactly when its count is at least written. An outcome
// of COMMIT the writer did not hear is asked of the server
// (pg_xact_status) before anything else is written: retried blindly, a
// write that did commit would count twice in the rows themselves.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncsubstrate/sync/store"
)

type markKey struct{ room, agent string }

// Every is the least time between two writes of read marks.
const Every = 10 * time.Millisecond

// Mark is what one read marks of its agent: the seq it read at (its row's
// last_context_seq), the newest message it showed (last_seen_seq) and
// the reads it counts (context_reads, one for a read).
type Mark struct{ Seq, UpTo, Reads int64 }

// readMark is what reads of one agent have marked and not yet written.
type readMark struct {
	seq, upTo, reads int64
	// written is, once the writer's UPDATE of an in-flight mark has run,
	// the row's context_reads with the mark in it; 0 before (the write
	// is then in no row: it commits only after written is known).
	written int64
}

// landedWrite is a write of read marks that committed: a row read before
// it committed holds fewer than written reads.
type landedWrite struct {
	written, reads int64
	at             time.Time
}

// landedKeep and landedFor bound the landed writes kept per agent: a
// read whose rows are older than all of them (64 writes, Every
// apart at least, or ten seconds) may count short, never over, and seen
// then holds what this process reported. An agent read without pause
// keeps 2 KiB.
const (
	landedKeep = 64
	landedFor  = 10 * time.Second
)

func (m *readMark) merge(o readMark) {
	m.seq, m.upTo, m.reads = max(m.seq, o.seq), max(m.upTo, o.upTo), m.reads+o.reads
}

// Marks holds the marks of this process's reads until one background
// writer has written them, and lays them over the rows reads find.
type Marks struct {
	db *store.DB
	// update is the core's statement that writes a batch of marks (see
	// New).
	update string
	log    *slog.Logger

	mu       sync.Mutex
	pending  map[markKey]readMark
	inflight map[markKey]readMark
	// seen is, per agent, the most this process has reported or queued
	// of its reads, last context seq and last seen seq: a read of the
	// agents' rows that began before a write of marks committed,
	// overlaid after it finished, saw neither the write nor the marks,
	// and counts went backwards (salience decayed, then recovered,
	// TestSalienceEvaporates; since_your_last_read went back a read,
	// TestSalienceYouElided).
	seen      map[markKey]seenMark
	seenSwept time.Time // under mu
	// landed is, per agent, the writes of its marks that committed lately
	// (oldest first): a read of rows from before one, overlaid after it
	// landed, adds its reads.
	landed map[markKey][]landedWrite
	// doubt is the transaction of the write in flight whose COMMIT was
	// sent and not answered ("" when none): the writer learns its
	// outcome before taking more marks.
	doubt string
	// Committed, when set (tests, before the first read), runs between a
	// write's COMMIT and its landing: a slow answer from the server, the
	// time in which reads find the write both in the rows and in flight.
	Committed func()
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
	started   bool // under mu
	closed    bool // under mu: marks after Close are written by their read
}

// New returns the marks of a service over db. update writes a batch of
// marks: its parameters are the rooms, agents, seqs, reads and up-to
// seqs as arrays (text[], text[], bigint[], bigint[], bigint[]), and it
// returns each updated row's room, agent and context_reads with the
// write in it; the seqs are maxima and the reads are added. log takes
// the writer's failures.
func New(db *store.DB, update string, log *slog.Logger) *Marks {
	return &Marks{db: db, update: update, log: log, pending: map[markKey]readMark{}, seen: map[markKey]seenMark{}, landed: map[markKey][]landedWrite{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Add queues a read's mark and wakes the writer; false when the marks
// are closed (the caller writes the mark itself).
func (r *Marks) Add(room, agent string, mark Mark) bool {
	m := readMark{seq: mark.Seq, upTo: mark.UpTo, reads: mark.Reads}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	if !r.started {
		r.started = true
		go r.run()
	}
	k := markKey{room, agent}
	cur := r.pending[k]
	cur.merge(m)
	r.pending[k] = cur
	// The high-water marks take this read's marks now, not at the next
	// overlay: once written, the marks leave pending and inflight, and a
	// read whose rows were read before the write committed would find
	// them nowhere (since_your_last_read started at the read before
	// last: TestSalienceYouElided, 3 runs in 45 under -race and load).
	// The reads count on what was reported; an agent not reported lately
	// gets its seqs only (its count is the rows' then).
	seen, ok := r.seen[k]
	seen.seq, seen.upTo, seen.at = max(seen.seq, m.seq), max(seen.upTo, m.upTo), time.Now()
	if ok {
		seen.reads += m.reads
	}
	r.seen[k] = seen
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return true
}

// Rows are agents' rows of one room as a read found them, which Overlay
// lays this process's marks over.
type Rows interface {
	Len() int
	// At is row i: its agent, and its last_context_seq, last_seen_seq and
	// context_reads, which Overlay raises.
	At(i int) (agent string, lastContextSeq, lastSeenSeq, contextReads *int64)
}

// Overlay applies the marks not yet written to agents' rows read from the
// database. An agent's reads are its row's plus those of this process
// the row does not hold: queued, in flight and not yet in the row
// (written above the row's count), or landed after the row was read.
func (r *Marks) Overlay(room string, agents Rows) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for i := range agents.Len() {
		id, lastContext, lastSeen, reads := agents.At(i)
		k := markKey{room, id}
		rows := *reads
		for _, w := range r.landed[k] {
			if w.written > rows {
				*reads += w.reads
			}
		}
		if q, ok := r.inflight[k]; ok {
			*lastContext, *lastSeen = max(*lastContext, q.seq), max(*lastSeen, q.upTo)
			if q.written == 0 || q.written > rows {
				*reads += q.reads
			}
		}
		if q, ok := r.pending[k]; ok {
			*lastContext, *lastSeen = max(*lastContext, q.seq), max(*lastSeen, q.upTo)
			*reads += q.reads
		}
		// The count above is exact, or short when the rows are older
		// than the landed writes kept; seen, never above the truth
		// either, keeps what this process reported and queued since (and
		// the reads of other processes a newer read saw).
		seen := r.seen[k]
		seen.seq, seen.upTo, seen.reads, seen.at = max(seen.seq, *lastContext), max(seen.upTo, *lastSeen), max(seen.reads, *reads), now
		*lastContext, *lastSeen, *reads = seen.seq, seen.upTo, seen.reads
		r.seen[k] = seen
	}
	// What was seen a minute ago is long written: forgotten, so the maps
	// hold only agents read lately.
	if now.Sub(r.seenSwept) > time.Minute {
		r.seenSwept = now
		for k, v := range r.seen {
			if now.Sub(v.at) > time.Minute {
				delete(r.seen, k)
			}
		}
		for k, ws := range r.landed {
			if now.Sub(ws[len(ws)-1].at) > time.Minute {
				delete(r.landed, k)
			}
		}
	}
}

// seenMark is the most a process reported (or queued) of an agent's
// marks, and when.
type seenMark struct {
	seq, upTo, reads int64
	at               time.Time
}

// run writes queued marks until stop, then writes what is left.
// Marks that arrive during a write, or within Every after it,
// wait for the next one: under a stream of reads, one small write per
// interval rather than one per read. A failed write keeps its marks
// (merged with newer ones) and is retried after a pause, so a database
// that is down is not spun on.
func (r *Marks) run() {
	defer close(r.done)
	for {
		select {
		case <-r.kick:
		case <-r.stop:
			r.final()
			return
		}
		pause := Every
		if err := r.Flush(context.Background()); err != nil {
			pause = 100 * time.Millisecond
		}
		select {
		case <-time.After(pause):
		case <-r.stop:
			r.final()
			return
		}
		r.mu.Lock()
		more := len(r.pending) > 0 || r.doubt != ""
		r.mu.Unlock()
		if more {
			select {
			case r.kick <- struct{}{}:
			default:
			}
		}
	}
}

// final writes what is queued when the service closes, giving a
// database that does not answer a few seconds, not the usual ten.
func (r *Marks) final() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = r.Flush(ctx)
}

// take moves the queued marks in flight, for one write (nil: none, or a
// write whose outcome is not known yet is still in flight).
func (r *Marks) take() map[markKey]readMark {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 || r.inflight != nil {
		return nil
	}
	batch := r.pending
	r.pending, r.inflight = map[markKey]readMark{}, batch
	return batch
}

// wrote records what the write in flight's UPDATE returned: each row's
// context_reads with the write in it. It must be called before COMMIT is
// sent: a row read then holds the write exactly when it holds as many.
func (r *Marks) wrote(written map[markKey]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range written {
		if m, ok := r.inflight[k]; ok {
			m.written = n
			r.inflight[k] = m
		}
	}
}

// land ends the write of batch: committed (err nil), or not (queued
// again).
func (r *Marks) land(batch map[markKey]readMark, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight, r.doubt = nil, ""
	if err != nil {
		for k, m := range batch {
			cur := r.pending[k]
			cur.merge(m)
			r.pending[k] = cur
		}
		return
	}
	// batch is the in-flight map wrote filled in. A mark without written
	// updated no row (the agent is gone): nothing to keep.
	now := time.Now()
	for k, m := range batch {
		if m.written == 0 {
			continue
		}
		ws := r.landed[k]
		for len(ws) > 0 && (len(ws) >= landedKeep || now.Sub(ws[0].at) > landedFor) {
			ws = ws[1:]
		}
		r.landed[k] = append(ws, landedWrite{written: m.written, reads: m.reads, at: now})
	}
}

// errReadMarksInDoubt: a write's COMMIT went unanswered and the server
// has not told its outcome yet; nothing more is written until it does.
var errReadMarksInDoubt = errors.New("the outcome of a write of read marks is not known yet")

// errReadMarksRolledBack: the server ended a write of read marks without
// committing it.
var errReadMarksRolledBack = errors.New("a write of read marks was rolled back")

// Flush writes every queued mark in one transaction: the UPDATE (its
// rows' new counts recorded with wrote), then COMMIT. A write whose
// COMMIT went unanswered is settled first. The background writer calls
// it; a test that holds the writer (Hold) calls it itself.
func (r *Marks) Flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.settle(ctx); err != nil {
		return err
	}
	batch := r.take()
	if batch == nil {
		return nil
	}
	n := len(batch)
	rooms, ids := make([]string, 0, n), make([]string, 0, n)
	seqs, reads, upTo := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	for k, m := range batch {
		rooms, ids = append(rooms, k.room), append(ids, k.agent)
		seqs, reads, upTo = append(seqs, m.seq), append(reads, m.reads), append(upTo, m.upTo)
	}
	var xact string
	var commitErr error
	err := r.db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		var b pgx.Batch
		b.Queue("BEGIN")
		b.Queue("SET LOCAL synchronous_commit TO off")
		b.Queue(r.update, rooms, ids, seqs, reads, upTo)
		b.Queue("SELECT pg_current_xact_id()::text")
		br := conn.SendBatch(ctx, &b)
		written, err := scanMarkReads(br, &xact)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			// COMMIT was not sent: the transaction ends with the
			// connection (the pool drops one left in a transaction).
			return err
		}
		r.wrote(written)
		tag, err := conn.Exec(ctx, "COMMIT")
		if err != nil {
			// Whether the server committed is not known (an error it
			// sent may have been its last word after committing): it
			// is asked, below.
			commitErr = err
			return nil
		}
		if tag.String() != "COMMIT" {
			return errReadMarksRolledBack
		}
		if r.Committed != nil {
			r.Committed()
		}
		return nil
	})
	if err == nil && commitErr != nil {
		r.mu.Lock()
		r.doubt = xact
		r.mu.Unlock()
		r.log.Warn("the outcome of a write of read marks is unknown; asking the server", slog.Int("marks", n), slog.Any("err", commitErr))
		return r.settle(ctx)
	}
	r.land(batch, err)
	if err != nil {
		r.log.Warn("writing read marks failed; kept for the next try", slog.Int("marks", n), slog.Any("err", err))
	}
	return err
}

// scanMarkReads reads the UPDATE's rows (the rows' new counts) and the
// transaction's id.
func scanMarkReads(br pgx.BatchResults, xact *string) (map[markKey]int64, error) {
	for range 2 { // BEGIN, SET LOCAL
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	written := map[markKey]int64{}
	for rows.Next() {
		var k markKey
		var n int64
		if err := rows.Scan(&k.room, &k.agent, &n); err != nil {
			rows.Close()
			return nil, err
		}
		written[k] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return written, br.QueryRow().Scan(xact)
}

// settle asks the server the outcome of the write in flight
// whose COMMIT went unanswered, and lands it accordingly. Until it is
// known the write stays in flight and this process writes no other
// marks, which would lift the rows past written: a row holds the write
// exactly when it holds written reads, unless another process wrote the
// agent's marks after this write was rolled back (then the count is
// short, never over, until the write is settled and queued again).
func (r *Marks) settle(ctx context.Context) error {
	r.mu.Lock()
	xact, batch := r.doubt, r.inflight
	r.mu.Unlock()
	if xact == "" {
		return nil
	}
	var status *string
	if err := r.db.QueryRow(ctx, `SELECT pg_xact_status($1::xid8)`, xact).Scan(&status); err != nil {
		return err
	}
	switch {
	case status == nil:
		// Too old to be known (not within the minutes a server keeps):
		// counted as written, as a crash would lose it.
		r.log.Warn("the outcome of a write of read marks is lost; counted as written", slog.String("xact", xact))
		r.land(batch, nil)
	case *status == "committed":
		r.land(batch, nil)
	case *status == "aborted":
		r.land(batch, errReadMarksRolledBack)
	default: // in progress: the server has not yet seen the connection go
		return errReadMarksInDoubt
	}
	return nil
}

// Close writes what is queued and stops the writer; marks added after it
// are refused (Add is false).
func (r *Marks) Close() {
	r.mu.Lock()
	started := r.started
	r.closed = true
	r.mu.Unlock()
	if !started {
		return
	}
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// Hold keeps the background writer from starting, for a test that plays
// the writer (Flush); Close then finds it done. Called before any read.
func (r *Marks) Hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started {
		r.started = true
		close(r.done)
	}
}
