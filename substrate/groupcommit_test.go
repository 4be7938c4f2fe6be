package substrate_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Many agents invoke on one room through a pool of 2 connections, so
// invocations share group transactions; some fail in every way an
// invocation can (a precondition false, a bad param, a version conflict,
// and a statement PostgreSQL refuses after the invocation's other writes
// were sent). Each failure takes only itself: every success is applied,
// with its own seq, result and audit entry, the counter counts exactly
// the successes in seq order, and the room's sequence has no gap.
func TestGroupCommitFailuresTakeOnlyThemselves(t *testing.T) {
	// PostgreSQL itself refuses the write of "boom": the failure comes
	// from the pipeline, after the invocation's increment went out.
	r := newGCRoom(t, "gc-room", refuseBoom,
		substrate.ActionDef{ID: "inc", Params: map[string]substrate.ParamSpec{"v": {Type: "integer", Required: true}}, If: `params.v != 13`,
			Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}, {Key: "last", Value: json.RawMessage(`"${params.v}"`)}},
			Result: `state._shared.n`},
		substrate.ActionDef{ID: "stale", Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1000`), IfVersion: json.RawMessage(`1`)}}},
		boomAction)
	db, svc, ctx, room, pr := r.db, r.svc, r.ctx, r.id, r.pr
	// n exists before the run, so "stale" (if_version 1) always conflicts
	// once the first inc has written it.
	r.invoke("inc", json.RawMessage(`{"v": 0}`))
	const workers, each = 16, 12
	type call struct {
		agent, action string
		v             int
		seq           int64
		result        any
		code, msg     string
		fail          bool
	}
	calls := make([][]call, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		p := r.join(fmt.Sprintf("w%d", w))
		wg.Add(1)
		go func(w int, p *substrate.Principal) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				c := call{agent: p.Actor(), action: "inc", v: w*100 + i + 1}
				params := fmt.Sprintf(`{"v": %d}`, c.v)
				switch (w + i) % 6 {
				case 1:
					c.v, params = 13, `{"v": 13}` // precondition false
				case 2:
					params = `{"v": "x"}` // not an integer
				case 3:
					c.action, params = "stale", `{}`
				case 4:
					c.action, params = "boom", `{}`
				}
				c.fail = params != fmt.Sprintf(`{"v": %d}`, c.v) || c.v == 13
				res, err := svc.Invoke(ctx, p, room, c.action, json.RawMessage(params))
				if err != nil {
					c.code, c.msg = string(errs.From(err).Code), err.Error()
				} else {
					c.seq, c.result = res.Seq, res.Result
				}
				calls[w] = append(calls[w], c)
			}
		}(w, p)
	}
	wg.Wait()

	var ok []call
	for _, cs := range calls {
		for _, c := range cs {
			if (c.code == "") == c.fail {
				t.Errorf("%s %s v=%d: succeeded %v (%s: %s), want %v", c.agent, c.action, c.v, c.code == "", c.code, c.msg, !c.fail)
			}
			if c.code == "" {
				ok = append(ok, c)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].seq < ok[j].seq })
	for i, c := range ok {
		if i > 0 && c.seq == ok[i-1].seq {
			t.Fatalf("two invocations answered with seq %d", c.seq)
		}
		// The counter after each success counts the successes up to it
		// (the run's first inc made it 1): nothing a failure wrote stayed.
		if got := fmt.Sprint(c.result); got != fmt.Sprint(i+2) {
			t.Errorf("%s v=%d at seq %d: result %s, want %d", c.agent, c.v, c.seq, got, i+2)
		}
	}
	st, err := svc.ReadState(ctx, pr, room, substrate.ReadQuery{Scope: "_shared", Key: "n"})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(st)
	var n struct {
		Entries []struct {
			Value json.RawMessage `json:"value"`
		} `json:"entries"`
		Value json.RawMessage `json:"value"`
	}
	_ = json.Unmarshal(raw, &n)
	got := string(n.Value)
	if got == "" && len(n.Entries) > 0 {
		got = string(n.Entries[0].Value)
	}
	if got != fmt.Sprint(len(ok)+1) {
		t.Errorf("n = %s, want %d (%s)", got, len(ok)+1, raw)
	}
	// Every seq of the room is one audit entry or one append entry; each
	// success's own entry names its agent, action and param.
	var roomSeq int64
	if err := db.QueryRow(ctx, `SELECT seq FROM rooms WHERE id = $1`, room).Scan(&roomSeq); err != nil {
		t.Fatal(err)
	}
	var keys, distinct, lo, hi int64
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT sort_key), min(sort_key), max(sort_key) FROM state
		WHERE room_id = $1 AND sort_key IS NOT NULL`, room).Scan(&keys, &distinct, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if keys != roomSeq || distinct != roomSeq || lo != 1 || hi != roomSeq {
		t.Errorf("room seq %d, sequence entries %d (distinct %d) over %d..%d: not gap-free", roomSeq, keys, distinct, lo, hi)
	}
	for _, c := range ok {
		page, err := svc.AuditPage(ctx, pr, room, c.seq-1, c.seq, 1)
		if err != nil || len(page) != 1 || page[0].Seq != c.seq {
			t.Fatalf("audit at %d: %v %v", c.seq, page, err)
		}
		var a struct {
			Agent, Action string
			OK            bool
			Params        map[string]any
		}
		_ = json.Unmarshal(page[0].Value, &a)
		if a.Agent != c.agent || a.Action != "inc" || !a.OK || fmt.Sprint(a.Params["v"]) != fmt.Sprint(c.v) {
			t.Errorf("audit at %d: %s, want %s inc v=%d", c.seq, page[0].Value, c.agent, c.v)
		}
	}
	s := svc.Stats()
	t.Logf("%d ok of %d; %d group transactions carried %d invocations, the largest %d", len(ok), workers*each, s.GroupBatches, s.GroupInvocations, s.GroupLargest)
	if s.GroupLargest < 2 {
		t.Errorf("no invocations shared a transaction (largest batch %d): the test did not exercise group commit", s.GroupLargest)
	}
}

// A group transaction whose COMMIT fails fails every invocation in it,
// and nothing it applied is seen afterwards: not in the database, and not
// in this process's snapshot of the room, which reads are served from
// (the group's snapshot is published only after its commit). The room
// lock is held by the test while three invocations queue, so they share
// one transaction; a deferred constraint trigger refuses its commit.
func TestGroupCommitFailedCommitPublishesNothing(t *testing.T) {
	r := newGCRoom(t, "gc-doom", refuseDoomAtCommit,
		substrate.ActionDef{ID: "inc", Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}}},
		substrate.ActionDef{ID: "doom", Writes: []substrate.WriteTemplate{{Key: "d", Value: json.RawMessage(`"doom"`)}}})
	svc, ctx, room, pr := r.svc, r.ctx, r.id, r.pr
	r.invoke("inc", nil)
	seq0, _ := r.shared() // the snapshot at seq0 is now cached

	// The test holds the room lock (from the pool's second connection,
	// released before the invocations need it) while they queue.
	release := r.lockRoom()
	errc := make(chan error, 3)
	go func() { _, err := svc.Invoke(ctx, pr, room, "inc", nil); errc <- err }()
	r.untilQueued(0) // the leader waits for the lock
	go func() { _, err := svc.Invoke(ctx, pr, room, "doom", nil); errc <- err }()
	go func() { _, err := svc.Invoke(ctx, pr, room, "inc", nil); errc <- err }()
	r.untilQueued(2) // both queued behind it
	release()
	for range 3 {
		if err := <-errc; err == nil {
			t.Error("an invocation of the failed group transaction was answered as applied")
		}
	}
	if s := svc.Stats(); s.GroupLargest < 3 {
		t.Fatalf("the three invocations did not share a transaction (largest %d)", s.GroupLargest)
	}
	seq, raw := r.shared()
	if seq != seq0 || strings.Contains(raw, "doom") {
		t.Fatalf("after the failed commit: seq %d (want %d), _shared %s", seq, seq0, raw)
	}
	// The failed group would have reached seq0+6; six writes (one seq
	// each, not invocations: they do not advance a cached snapshot) reach
	// it again, and a read there must be what they committed.
	for i := 1; i <= 6; i++ {
		if _, err := svc.WriteState(ctx, pr, room, []substrate.Write{{Scope: "_shared", Key: "w", Value: json.RawMessage(fmt.Sprint(i))}}, false); err != nil {
			t.Fatal(err)
		}
	}
	seq, raw = r.shared()
	if seq != seq0+6 || strings.Contains(raw, "doom") || !strings.Contains(raw, `"w":6`) || !strings.Contains(raw, `"n":1`) {
		t.Fatalf("at seq %d (want %d): _shared %s, want n = 1, w = 6 and no d", seq, seq0+6, raw)
	}
}
