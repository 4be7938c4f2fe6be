package substrate

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

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type markKey struct{ room, agent string }

// readMarksEvery is the least time between two writes of read marks.
const readMarksEvery = 10 * time.Millisecond

// readMark is what reads of one agent have marked and not yet written.
type readMark struct {
	seq, upTo, reads int64
}

func (m *readMark) merge(o readMark) {
	m.seq, m.upTo, m.reads = max(m.seq, o.seq), max(m.upTo, o.upTo), m.reads+o.reads
}

type readMarks struct {
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
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	once      sync.Once
	started   bool // under mu
	closed    bool // under mu: marks after Close are written by their read
}

func newReadMarks() *readMarks {
	return &readMarks{pending: map[markKey]readMark{}, seen: map[markKey]seenMark{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// add queues a read's mark and wakes the writer; false when the service
// is closed (the caller writes the mark itself).
func (s *Service) addReadMark(room, agent string, m readMark) bool {
	r := s.marks
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return false
	}
	if !r.started {
		r.started = true
		go s.runReadMarks()
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

// overlay applies the marks not yet written to presence read from the
// database.
func (r *readMarks) overlay(room string, agents []presence) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for i := range agents {
		a := &agents[i]
		k := markKey{room, a.ID}
		for _, m := range []map[markKey]readMark{r.inflight, r.pending} {
			if q, ok := m[k]; ok {
				// A write in flight may already be in what was read:
				// reads then count twice until it lands, which only
				// salience's decay sees; "read before or not" is exact.
				a.LastContextSeq, a.LastSeenSeq = max(a.LastContextSeq, q.seq), max(a.LastSeenSeq, q.upTo)
				a.ContextReads += q.reads
			}
		}
		seen := r.seen[k]
		seen.seq, seen.upTo, seen.reads, seen.at = max(seen.seq, a.LastContextSeq), max(seen.upTo, a.LastSeenSeq), max(seen.reads, a.ContextReads), now
		a.LastContextSeq, a.LastSeenSeq, a.ContextReads = seen.seq, seen.upTo, seen.reads
		r.seen[k] = seen
	}
	// What was seen a minute ago is long written: forgotten, so the map
	// holds only agents read lately.
	if now.Sub(r.seenSwept) > time.Minute {
		r.seenSwept = now
		for k, v := range r.seen {
			if now.Sub(v.at) > time.Minute {
				delete(r.seen, k)
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

// pendingReads is the room's context reads queued or in flight (the
// reads overlay adds to what the agents' rows hold).
func (r *readMarks) pendingReads(room string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, m := range []map[markKey]readMark{r.inflight, r.pending} {
		for k, q := range m {
			if k.room == room {
				n += q.reads
			}
		}
	}
	return n
}

const sqlMarkReads = `UPDATE agents AS a SET last_context_seq = greatest(a.last_context_seq, v.seq),
		context_reads = a.context_reads + v.reads, last_seen_seq = greatest(a.last_seen_seq, v.up_to)
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[]) AS v(room_id, id, seq, reads, up_to)
	WHERE a.room_id = v.room_id AND a.id = v.id`

// runReadMarks writes queued marks until stop, then writes what is left.
// Marks that arrive during a write, or within readMarksEvery after it,
// wait for the next one: under a stream of reads, one small write per
// interval rather than one per read. A failed write keeps its marks
// (merged with newer ones) and is retried after a pause, so a database
// that is down is not spun on.
func (s *Service) runReadMarks() {
	r := s.marks
	defer close(r.done)
	for {
		select {
		case <-r.kick:
		case <-r.stop:
			s.finalReadMarks()
			return
		}
		pause := readMarksEvery
		if err := s.flushReadMarks(context.Background()); err != nil {
			pause = 100 * time.Millisecond
		}
		select {
		case <-time.After(pause):
		case <-r.stop:
			s.finalReadMarks()
			return
		}
		r.mu.Lock()
		more := len(r.pending) > 0
		r.mu.Unlock()
		if more {
			select {
			case r.kick <- struct{}{}:
			default:
			}
		}
	}
}

// finalReadMarks writes what is queued when the service closes, giving a
// database that does not answer a few seconds, not the usual ten.
func (s *Service) finalReadMarks() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = s.flushReadMarks(ctx)
}

// take moves the queued marks in flight, for one write (nil: none).
func (r *readMarks) take() map[markKey]readMark {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return nil
	}
	batch := r.pending
	r.pending, r.inflight = map[markKey]readMark{}, batch
	return batch
}

// land ends the write of batch: written (err nil), or queued again.
func (r *readMarks) land(batch map[markKey]readMark, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight = nil
	if err != nil {
		for k, m := range batch {
			cur := r.pending[k]
			cur.merge(m)
			r.pending[k] = cur
		}
	}
}

// flushReadMarks writes every queued mark in one statement.
func (s *Service) flushReadMarks(ctx context.Context) error {
	r := s.marks
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit TO off")
	b.Queue(sqlMarkReads, rooms, ids, seqs, reads, upTo)
	b.Queue("COMMIT")
	err := s.db.WithConn(ctx, func(ctx context.Context, conn *pgxpool.Conn) error {
		return conn.SendBatch(ctx, &b).Close()
	})
	r.land(batch, err)
	if err != nil {
		s.log.Warn("writing read marks failed; kept for the next try", slog.Int("marks", n), slog.Any("err", err))
	}
	return err
}

// closeReadMarks writes what is queued and stops the writer.
func (s *Service) closeReadMarks() {
	r := s.marks
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
