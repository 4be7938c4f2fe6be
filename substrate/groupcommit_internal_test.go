package substrate

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// What an invocation of a group transaction is judged by is read under
// the lock after it arrived, as for an invocation in a transaction of its
// own:
//   - presence (a heartbeat's status) changes without the room lock: an
//     invocation that joins a running group after a status change was
//     committed sees it (the group reads presence again for each round);
//   - tokens and grants change only in mutations, under the room lock: a
//     re-join (which replaces the agent's token) issued during a group
//     waits for it, an invocation queued meanwhile is ordered before it
//     (and served), and one made after the re-join returned is refused
//     (nothing read by an earlier transaction is reused).
func TestGroupCommitRoundsReadWhatChangedMeanwhile(t *testing.T) {
	// Three connections: the group's, the heartbeat's and the re-join's,
	// which waits for the room lock while the group holds it.
	db := pgtest.NewPool(t, 3)
	svc := New(db, Options{})
	t.Cleanup(svc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const room = "gc-rounds"
	rm, err := svc.CreateRoom(ctx, CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := svc.Authenticate(ctx, rm.Token)
	join := func(id string) *Principal {
		t.Helper()
		j, err := svc.Join(ctx, pr, room, JoinRequest{ID: id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.Authenticate(ctx, j.Token)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	x, w := join("x"), join("w")
	if _, err := svc.RegisterAction(ctx, pr, room, ActionDef{ID: "look",
		Writes: []WriteTemplate{{Scope: "${self}", Key: "looked", Increment: json.RawMessage(`1`)}},
		Result: `agents.x.status`}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Heartbeat(ctx, x, room, "x", "idle"); err != nil {
		t.Fatal(err)
	}
	queued := func() int {
		_, n := svc.group.Queued(room)
		return n
	}
	type answer struct {
		res *InvokeResult
		err error
	}
	second := make(chan answer, 1)
	rejoined := make(chan error, 1)
	var rejoinStarted time.Time
	armed := true
	svc.group.RoundHook = func(roomID string, round int) {
		if roomID != room || round != 1 || !armed {
			return
		}
		armed = false
		// During the group's first round: x's status changes (committed
		// at once, no room lock), and w re-joins (waits for the lock).
		if _, err := svc.Heartbeat(ctx, x, room, "x", "busy"); err != nil {
			t.Error(err)
		}
		rejoinStarted = time.Now()
		go func() {
			_, err := svc.Join(ctx, pr, room, JoinRequest{ID: "w", Name: "w"})
			rejoined <- err
		}()
		time.Sleep(200 * time.Millisecond) // the re-join waits for the lock
		go func() {
			res, err := svc.Invoke(ctx, w, room, "look", nil)
			second <- answer{res, err}
		}()
		for queued() == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Cleanup(func() { svc.group.RoundHook = nil })

	first, err := svc.Invoke(ctx, x, room, "look", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Its round read presence before the heartbeat.
	if first.Result != "idle" {
		t.Errorf("first invocation saw x %v, want idle", first.Result)
	}
	a := <-second
	if a.err != nil {
		t.Fatalf("the invocation queued before the re-join committed: %v", a.err)
	}
	if a.res.Result != "busy" {
		t.Errorf("an invocation that arrived after x became busy saw x %v", a.res.Result)
	}
	if err := <-rejoined; err != nil {
		t.Fatal(err)
	}
	if time.Since(rejoinStarted) < 200*time.Millisecond {
		t.Fatal("the re-join did not wait for the group")
	}
	if s := svc.Stats(); s.GroupLargest < 2 || s.GroupRounds < 2 {
		t.Fatalf("the two invocations did not share a transaction in two rounds (largest %d, rounds %d)", s.GroupLargest, s.GroupRounds)
	}
	// The re-join is ordered after the group (its audit entry follows).
	page, err := svc.AuditPage(ctx, pr, room, a.res.Seq, a.res.Seq+10, 10)
	if err != nil || len(page) == 0 {
		t.Fatalf("audit after %d: %v %v", a.res.Seq, page, err)
	}
	var next struct {
		Kind   string
		Rejoin bool
	}
	if _ = json.Unmarshal(page[0].Value, &next); next.Kind != "agent_join" || !next.Rejoin {
		t.Errorf("audit after the group's last invocation: %s, want w's re-join", page[0].Value)
	}
	// w's old token: refused now that the re-join replaced it.
	_, err = svc.Invoke(ctx, w, room, "look", nil)
	if e := errs.From(err); err == nil || e.Code != errs.Unauthorized {
		t.Fatalf("invocation with w's replaced token: %v, want unauthorized", err)
	}
}

// The room row is written once per group, before the commit, where the
// group's last invocation left it. When PostgreSQL refuses an invocation
// in the commit's flush, the row's write sent with it did not run either:
// after the rest are evaluated again and another invocation joins (here
// one taking as many seqs as the refused one), the row is still written,
// though the group's seq is again where that unrun write would have put it.
func TestGroupCommitRoomRowAfterARefusedCommitFlush(t *testing.T) {
	db := pgtest.New(t)
	svc := New(db, Options{})
	t.Cleanup(svc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const room = "gc-row"
	rm, err := svc.CreateRoom(ctx, CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	pr, _ := svc.Authenticate(ctx, rm.Token)
	// One statement per Exec: Citus carries a trigger to the shards with
	// its statement's whole text.
	for _, q := range []string{`CREATE FUNCTION gc_row() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.value = '"boom"'::jsonb THEN RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$`,
		`CREATE TRIGGER gc_row BEFORE INSERT OR UPDATE ON state FOR EACH ROW EXECUTE FUNCTION gc_row()`} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []ActionDef{
		{ID: "inc", Writes: []WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}}},
		{ID: "boom", Writes: []WriteTemplate{{Key: "b", Value: json.RawMessage(`"boom"`)}}},
	} {
		if _, err := svc.RegisterAction(ctx, pr, room, a); err != nil {
			t.Fatal(err)
		}
	}
	queued := func() int {
		_, n := svc.group.Queued(room)
		return n
	}
	type answer struct {
		res *InvokeResult
		err error
	}
	invoke := func(action string) chan answer {
		c := make(chan answer, 1)
		go func() {
			res, err := svc.Invoke(ctx, pr, room, action, nil)
			c <- answer{res, err}
		}()
		return c
	}
	var late chan answer
	svc.group.RedoHook = func(roomID string) {
		if roomID == room && late == nil {
			late = invoke("inc")
			for queued() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	t.Cleanup(func() { svc.group.RedoHook = nil })

	// The test holds the room lock while three invocations queue: the
	// first leads, the other two share its second round.
	tctx, tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(tctx, `SELECT FROM rooms WHERE id = $1 FOR UPDATE`, room); err != nil {
		t.Fatal(err)
	}
	var answers []chan answer
	for i, action := range []string{"inc", "boom", "inc"} {
		answers = append(answers, invoke(action))
		pgtest.Eventually(t, 30*time.Second, func() bool { leading, queued := GroupQueue(svc, room); return leading && queued == i },
			"%s queued behind the leader", action)
	}
	if err := tx.Commit(tctx); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i, c := range append(answers, nil) {
		if c == nil {
			c = late
		}
		a := <-c
		switch {
		case i == 1 && a.err == nil:
			t.Fatal("boom was applied")
		case i != 1 && a.err != nil:
			t.Fatalf("invocation %d: %v", i, a.err)
		case i != 1:
			last = max(last, a.res.Seq)
		}
	}
	if svc.Stats().GroupRedone == 0 || late == nil {
		t.Fatal("no invocation was evaluated again")
	}
	var roomSeq, entries int64
	if err := db.QueryRow(ctx, `SELECT seq, (SELECT count(*) FROM state WHERE room_id = $1 AND sort_key IS NOT NULL) FROM rooms WHERE id = $1`, room).
		Scan(&roomSeq, &entries); err != nil {
		t.Fatal(err)
	}
	if roomSeq != last || entries != last {
		t.Fatalf("room row at seq %d, %d sequence entries, last invocation at %d", roomSeq, entries, last)
	}
	// And the next mutation carries on from there.
	if res, err := svc.Invoke(ctx, pr, room, "inc", nil); err != nil || res.Seq != last+2 {
		t.Fatalf("next invocation: %v at %v, want seq %d", err, res, last+2)
	}
}
