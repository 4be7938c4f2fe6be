// Sharing live renders. Every live stream of a room used to render the
// room's section and diff it on each change: N pages on one room cost N
// renders per write. Here a process holds one feed per followed room: one
// subscription to its changes, which it numbers (the epoch), with the
// moments its reads foresee it changing with no commit (a timer, now
// passing a moment: see foresee), and the renders of the current epoch,
// shared by the streams that read alike.
// Streams share a read of the room (readRoom) when they read with the
// same authority (readKey), and a rendered section and its diffs when
// everything else the section shows them is the same too (pageKey); what
// differs per reader (who reads, the messages directed to them, what they
// may do) is part of pageKey, so two readers who would see different
// sections never share one. Memory stays bounded: a feed keeps only the
// renders of its current epoch, only for keys an open stream last used,
// and goes with its last stream.

package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

// feed is one room's live streams in this process.
type feed struct {
	room  string
	n     int           // streams on it (and joining); guarded by Web.mu
	ready chan struct{} // closed once subscribed; err says if that failed
	err   error
	stop  func()
	quit  chan struct{}

	mu    sync.Mutex
	epoch uint64 // changes heard
	// wakes are the streams' wake channels, each with the readKey of the
	// stream's last render ("" before its first).
	wakes map[chan struct{}]string
	// reads and pages are the renders started at the current epoch, by
	// key; refs counts the streams whose last render used a key, so a key
	// no open stream uses is let go at once.
	reads map[string]*flight[*roomRead]
	pages map[string]*flight[*pageRender]
	refs  map[string]int
	// A room also changes with no commit (a timer, now passing a moment a
	// gate compares it with): each read foresees when for its authority
	// (foresee), due keeps the moment by readKey, and one timer per feed,
	// set for the earliest, makes it a change like a commit for the
	// streams that read with those keys: a private timer of the owner's
	// wakes no observer's page. changed is when the epoch last moved;
	// ended stops the timer for good.
	due     map[string]foreseen
	timer   *time.Timer
	changed time.Time
	ended   bool
	// unsent counts the wakes given to streams that they have not yet
	// answered (rendered, sent or found nothing to send): tests wait for
	// none before measuring what a change costs.
	unsent atomic.Int64
}

// foreseen is the moment a read with some key foresaw (see foresee), and
// the epoch the read began at or after.
type foreseen struct {
	at    time.Time
	epoch uint64
}

// timerFloor is the least time between two changes the clock makes a
// feed take: a room whose timers end a millisecond apart costs its
// readers a render per floor at most, not one per timer.
const timerFloor = 100 * time.Millisecond

// flight is one render, joined by every stream that asks for its key at
// its epoch meanwhile or after (see get).
type flight[T any] struct {
	epoch uint64
	start time.Time
	read  time.Time // when the reads it rests on began (set with val)
	done  chan struct{}
	val   T
	err   error
	// waiters and abandoned are guarded by feed.mu: a render every
	// waiter left before it ended is cancelled and joined no more.
	waiters   int
	abandoned bool
	cancel    context.CancelFunc
}

// pageRender is the room's section as the readers of one pageKey see it at
// one epoch, and its diffs from what their pages show, computed once per
// distinct previous section.
type pageRender struct {
	html  string
	seq   int64
	until time.Time      // as its read foresaw (roomRead.until)
	data  map[string]any // read-only: summarize reads its activity
	mu    sync.Mutex
	diffs map[string]*diffResult
}

// diffResult is what turns a previous section into pageRender's: ok false
// when only the whole section will do; patches marshalled once for all.
type diffResult struct {
	once    sync.Once
	patches json.RawMessage
	size    int // patchBytes
	none    bool
	ok      bool
	err     error
}

// joinFeed adds a stream to roomID's feed, subscribing to the room's
// changes (as p) if no stream follows it yet. wake receives a value after
// each change from then on.
func (wb *Web) joinFeed(ctx context.Context, p *substrate.Principal, roomID string) (f *feed, wake chan struct{}, err error) {
	for {
		wb.mu.Lock()
		f = wb.feeds[roomID]
		create := f == nil
		if create {
			f = &feed{room: roomID, ready: make(chan struct{}), quit: make(chan struct{}), wakes: map[chan struct{}]string{}, due: map[string]foreseen{},
				reads: map[string]*flight[*roomRead]{}, pages: map[string]*flight[*pageRender]{}, refs: map[string]int{}}
			wb.feeds[roomID] = f
		}
		f.n++
		wb.mu.Unlock()
		if create {
			changes, stop, err := wb.opt.Substrate.Watch(ctx, p, roomID)
			f.err, f.stop = err, stop
			if err != nil {
				wb.mu.Lock()
				if wb.feeds[roomID] == f {
					delete(wb.feeds, roomID) // the next stream subscribes anew
				}
				wb.mu.Unlock()
			} else {
				go f.run(changes)
			}
			close(f.ready)
		}
		select {
		case <-f.ready:
		case <-ctx.Done():
			wb.leaveFeed(f, nil, nil)
			return nil, nil, ctx.Err()
		}
		if f.err != nil {
			wb.leaveFeed(f, nil, nil)
			if create || ctx.Err() != nil {
				return nil, nil, f.err
			}
			continue // another stream's subscription failed (it went away): try ours
		}
		wake = make(chan struct{}, 1)
		f.mu.Lock()
		f.wakes[wake] = ""
		f.mu.Unlock()
		return f, wake, nil
	}
}

// leaveFeed takes a stream (its wake, and the keys it last rendered with)
// off its feed, and ends the feed with its last stream.
func (wb *Web) leaveFeed(f *feed, wake chan struct{}, keys []string) {
	f.mu.Lock()
	delete(f.wakes, wake)
	if len(wake) > 0 {
		f.unsent.Add(-1) // a wake the stream leaves unanswered
	}
	f.unref(keys...)
	f.mu.Unlock()
	wb.mu.Lock()
	f.n--
	last := f.n == 0
	if last && wb.feeds[f.room] == f {
		delete(wb.feeds, f.room)
	}
	wb.mu.Unlock()
	if last {
		f.end()
		<-f.ready
		if f.err == nil {
			close(f.quit)
			f.stop()
		}
	}
}

// run numbers the room's changes and wakes the streams.
func (f *feed) run(changes <-chan struct{}) {
	for {
		select {
		case <-f.quit:
			return
		case <-changes:
			f.mu.Lock()
			// Every stream reads again, and foresees anew.
			clear(f.due)
			f.change(nil)
			f.mu.Unlock()
		}
	}
}

// change starts a new epoch and wakes the streams (those reading with a
// key in only, when set); f.mu is held.
func (f *feed) change(only map[string]bool) {
	f.epoch++
	f.changed = time.Now()
	// Renders of an older epoch serve no stream from now on (those
	// waiting for one hold it).
	clear(f.reads)
	clear(f.pages)
	for w, key := range f.wakes {
		if only != nil && !only[key] {
			continue
		}
		select {
		case w <- struct{}{}:
			f.unsent.Add(1)
		default:
		}
	}
	f.arm()
}

// foresee notes that the room as read with key, by a read begun at epoch
// or after, changes at t with no commit (zero: never): then the streams
// reading with key are woken as for a commit, and render once per
// distinct view as they do for one. A read older than the one that last
// said is not heard (it may not have seen what was since written).
func (f *feed) foresee(key string, epoch uint64, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.due[key]; f.ended || ok && epoch < d.epoch || f.refs[key] == 0 {
		return
	}
	if t.IsZero() {
		delete(f.due, key)
	} else {
		f.due[key] = foreseen{t, epoch}
	}
	f.arm()
}

// current is the feed's epoch.
func (f *feed) current() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// arm sets the feed's timer for the earliest moment due (stopped when
// none is), no sooner than timerFloor after the last change; f.mu is
// held.
func (f *feed) arm() {
	var next time.Time
	for _, d := range f.due {
		if next.IsZero() || d.at.Before(next) {
			next = d.at
		}
	}
	switch {
	case f.ended:
	case next.IsZero():
		if f.timer != nil {
			f.timer.Stop()
		}
	default:
		d := max(time.Until(next), time.Until(f.changed.Add(timerFloor)), 0)
		if f.timer == nil {
			f.timer = time.AfterFunc(d, f.tick)
		} else {
			f.timer.Reset(d)
		}
	}
}

// tick is the feed's timer: the streams whose reads foresaw a moment now
// past are woken (a stale firing, for a moment since moved, finds none).
func (f *feed) tick() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended {
		return
	}
	now := time.Now()
	var only map[string]bool
	for key, d := range f.due {
		if !now.Before(d.at) {
			if only == nil {
				only = map[string]bool{}
			}
			only[key] = true
			delete(f.due, key)
		}
	}
	if only == nil {
		f.arm()
		return
	}
	f.change(only)
}

// readsAs records the key a stream (its wake channel) reads with.
func (f *feed) readsAs(wake chan struct{}, key string) {
	f.mu.Lock()
	if _, ok := f.wakes[wake]; ok {
		f.wakes[wake] = key
	}
	f.mu.Unlock()
}

// end stops the feed's timer for good (its last stream left).
func (f *feed) end() {
	f.mu.Lock()
	f.ended = true
	if f.timer != nil {
		f.timer.Stop()
	}
	f.mu.Unlock()
}

// unref drops keys a stream no longer renders with; f.mu is held.
func (f *feed) unref(keys ...string) {
	for _, k := range keys {
		if k == "" {
			continue
		}
		if f.refs[k]--; f.refs[k] <= 0 {
			delete(f.refs, k)
			delete(f.reads, k)
			delete(f.pages, k)
			delete(f.due, k)
		}
	}
}

// retain records that a stream now renders with key instead of old.
func (f *feed) retain(old, key string) {
	if old == key {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refs[key]++
	f.unref(old)
}

// get returns the render for key in m that started at the feed's current
// epoch and read the room not before notBefore, joining one under way or
// done, or starts one (compute, on a context of its own: the render goes on
// while any stream waits for it, whichever left). compute returns when the
// reads its value rests on began (zero: when it began itself); get returns
// that too.
func get[T any](ctx context.Context, f *feed, m map[string]*flight[T], key string, notBefore time.Time, compute func(context.Context) (T, time.Time, error)) (T, time.Time, error) {
	for {
		f.mu.Lock()
		fl := m[key]
		if fl == nil || fl.epoch != f.epoch || fl.abandoned || fl.start.Before(notBefore) || (fl.isDone() && fl.read.Before(notBefore)) {
			// The render's own context keeps the values of the stream that
			// started it, not its end.
			rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			fl = &flight[T]{epoch: f.epoch, start: time.Now(), done: make(chan struct{}), cancel: cancel}
			m[key] = fl
			go func() {
				defer cancel()
				fl.val, fl.read, fl.err = compute(rctx)
				if fl.read.IsZero() {
					fl.read = fl.start
				}
				close(fl.done)
			}()
		}
		fl.waiters++
		f.mu.Unlock()
		select {
		case <-fl.done:
			f.mu.Lock()
			fl.waiters--
			f.mu.Unlock()
			if fl.read.Before(notBefore) {
				// It rests on a read begun before this stream's first
				// section may be read: another render, after it.
				continue
			}
			return fl.val, fl.read, fl.err
		case <-ctx.Done():
			f.mu.Lock()
			if fl.waiters--; fl.waiters == 0 && !fl.isDone() {
				fl.abandoned = true
				fl.cancel()
				if m[key] == fl {
					delete(m, key)
				}
			}
			f.mu.Unlock()
			var zero T
			return zero, time.Time{}, ctx.Err()
		}
	}
}

func (fl *flight[T]) isDone() bool {
	select {
	case <-fl.done:
		return true
	default:
		return false
	}
}

// readKey names the authority a stream reads the room with: streams with
// the same key share a read (readRoom). The principal's ReadsKey holds
// what decides its reads but its Ceiling, which the lobby sets from the
// person's access: access is in the key. A principal carrying what the key
// cannot name (Refresh, Words) shares with no one ("").
func readKey(p *substrate.Principal, access, viewToken string) string {
	if p.Refresh != nil || p.Words != nil {
		return ""
	}
	mode := "person"
	if viewToken != "" {
		mode = "view" // reads no owners of agents (activity)
	}
	return mode + " " + strconv.Quote(access) + " " + p.ReadsKey()
}

// pageKey names everything the section shows one reader beyond the room
// as read with readKey: who they are (the header), the person whose
// agents' messages are marked "to you", what they may do (access, in
// readKey too), the view token the section's links carry, and the pages
// of the tables they asked for (tableQuery, encoded).
func pageKey(readKey, who, userID, access, viewToken, tables string) string {
	return fmt.Sprintf("%s\x00%q %q %q %q %q", readKey, who, userID, access, viewToken, tables)
}

// diff returns what turns prev into the section (computed once per prev).
func (pr *pageRender) diff(prev string) *diffResult {
	pr.mu.Lock()
	d := pr.diffs[prev]
	if d == nil {
		d = &diffResult{}
		pr.diffs[prev] = d
	}
	pr.mu.Unlock()
	d.once.Do(func() {
		if prev == pr.html {
			d.none, d.ok = true, true
			return
		}
		old, err1 := parseMainKept(prev)
		nodes, err2 := parseMainKept(pr.html)
		if d.err = errors.Join(err1, err2); d.err != nil {
			return
		}
		ps, ok := diffMain(old, nodes)
		switch {
		case ok && len(ps) == 0:
			d.none, d.ok = true, true
		case ok:
			d.ok, d.size = true, patchBytes(ps)
			d.patches, d.err = json.Marshal(ps)
		}
	})
	return d
}
