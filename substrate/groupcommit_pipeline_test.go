package substrate_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate"
)

// A group transaction evaluates its invocations one after the other
// without waiting for the database, each against the group's own view of
// the room, and sends their statements together. When PostgreSQL refuses
// a statement of one in the middle (here a trigger), that one fails
// alone, and the ones after it, evaluated on a view that had its writes,
// are evaluated again: their results, seqs, audit entries and the room
// show no trace of it. The room lock is held by the test while the
// invocations queue, so that (after the first, which leads and waits for
// the lock) they share the transaction's second round in a known order.
func TestGroupCommitRefusedMidGroupRedoesTheRest(t *testing.T) {
	r := newGCRoom(t, "gc-mid", refuseBoom,
		substrate.ActionDef{ID: "inc", Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}},
			Result: `{"n": state._shared.n, "b": has(state._shared.b)}`},
		boomAction)
	db, svc, ctx, room, pr := r.db, r.svc, r.ctx, r.id, r.pr
	r.invoke("inc", nil) // n = 1
	before := svc.Stats()

	order := []string{"inc", "inc", "boom", "inc", "inc"}
	got := r.queued(invocations(order...)...)
	if got[2].err == nil || !strings.Contains(got[2].err.Error(), "boom refused") {
		t.Fatalf("boom: %v, want PostgreSQL's refusal", got[2].err)
	}
	wantN := 2
	var seqs []int64
	for i, a := range got {
		if order[i] == "boom" {
			continue
		}
		if a.err != nil {
			t.Fatalf("invocation %d (%s): %v", i, order[i], a.err)
		}
		raw, _ := json.Marshal(a.res.Result)
		if want := fmt.Sprintf(`{"b":false,"n":%d}`, wantN); string(raw) != want {
			t.Errorf("invocation %d: result %s, want %s", i, raw, want)
		}
		wantN++
		seqs = append(seqs, a.res.Seq)
	}
	// Each inc takes two seqs (its message and its audit entry): the
	// refused one took none.
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+2 {
			t.Errorf("seqs %v: not consecutive invocations", seqs)
			break
		}
	}
	after := svc.Stats()
	if after.GroupLargest < 4 || after.GroupRedone == before.GroupRedone {
		t.Fatalf("the invocations did not share a pipelined transaction (largest %d, redone %d)", after.GroupLargest, after.GroupRedone-before.GroupRedone)
	}
	// The room as read (from this process's snapshot, which the group
	// published) and as stored.
	seq, raw := r.shared()
	if seq != seqs[len(seqs)-1] || raw != `{"n":5}` {
		t.Errorf("context at %d (want %d): _shared %s, want {\"n\":5}", seq, seqs[len(seqs)-1], raw)
	}
	var n, b, roomSeq, roomMsgs, msgs int64
	if err := db.QueryRow(ctx, `SELECT (SELECT value::text::int FROM state WHERE room_id = $1 AND scope = '_shared' AND key = 'n'),
		(SELECT count(*) FROM state WHERE room_id = $1 AND scope = '_shared' AND key = 'b'),
		seq, message_count, (SELECT count(*) FROM state WHERE room_id = $1 AND scope = '_messages')
		FROM rooms WHERE id = $1`, room).Scan(&n, &b, &roomSeq, &roomMsgs, &msgs); err != nil {
		t.Fatal(err)
	}
	if n != 5 || b != 0 {
		t.Errorf("stored: n = %d, %d b, want 5 and none", n, b)
	}
	// The room row, written once for the group, where its last
	// invocation left it.
	if roomSeq != seqs[len(seqs)-1] || roomMsgs != msgs {
		t.Errorf("room row: seq %d, message_count %d; want %d and %d", roomSeq, roomMsgs, seqs[len(seqs)-1], msgs)
	}
	// The audit entry of the invocation after the refused one records the
	// counter as the one before it left it.
	page, err := svc.AuditPage(ctx, pr, room, seqs[2]-1, seqs[2], 1)
	if err != nil || len(page) != 1 {
		t.Fatalf("audit at %d: %v %v", seqs[2], page, err)
	}
	var entry struct {
		PrevSeq int64 `json:"prev_seq"`
		Delta   []struct {
			Key           string
			Before, After any
		}
	}
	if err := json.Unmarshal(page[0].Value, &entry); err != nil || len(entry.Delta) == 0 || entry.Delta[0].Key != "n" ||
		fmt.Sprint(entry.Delta[0].Before, entry.Delta[0].After) != "3 4" || entry.PrevSeq != seqs[1] {
		t.Errorf("audit at %d: %s, want n from 3 to 4 after seq %d", seqs[2], page[0].Value, seqs[1])
	}
}

// An invocation that needs a read the group's snapshot lacks (here a key
// that does not exist yet) first sends what is queued before it. When
// that shows an earlier invocation's statement refused, the reading one
// is evaluated again, once: its writes, seqs and audit entry appear once.
func TestGroupCommitOwnReadAfterARefusal(t *testing.T) {
	r := newGCRoom(t, "gc-own-read", refuseBoom,
		substrate.ActionDef{ID: "inc", Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}}},
		substrate.ActionDef{ID: "boom", Writes: []substrate.WriteTemplate{{Key: "b", Value: json.RawMessage(`"boom"`)}}},
		substrate.ActionDef{ID: "fresh", Params: map[string]substrate.ParamSpec{"k": {Type: "string", Required: true}},
			Writes: []substrate.WriteTemplate{{Key: "${params.k}", Increment: json.RawMessage(`1`)}}})
	db, svc, ctx, room := r.db, r.svc, r.ctx, r.id
	r.invoke("inc", nil)
	answers := r.queued(gcCall{"inc", json.RawMessage(`{}`)}, gcCall{"boom", json.RawMessage(`{}`)}, gcCall{"fresh", json.RawMessage(`{"k": "x1"}`)})
	first, boom, fresh := answers[0], answers[1], answers[2]
	if first.err != nil || fresh.err != nil || boom.err == nil {
		t.Fatalf("inc: %v, boom: %v, fresh: %v", first.err, boom.err, fresh.err)
	}
	if fresh.res.Seq != first.res.Seq+2 {
		t.Errorf("fresh at seq %d, want %d (right after inc)", fresh.res.Seq, first.res.Seq+2)
	}
	var x1, roomSeq, entries int64
	if err := db.QueryRow(ctx, `SELECT (SELECT value::text::int FROM state WHERE room_id = $1 AND scope = '_shared' AND key = 'x1'),
		seq, (SELECT count(*) FROM state WHERE room_id = $1 AND sort_key IS NOT NULL) FROM rooms WHERE id = $1`, room).Scan(&x1, &roomSeq, &entries); err != nil {
		t.Fatal(err)
	}
	if x1 != 1 || roomSeq != fresh.res.Seq || entries != roomSeq {
		t.Errorf("x1 = %d (want 1), room seq %d (want %d), %d sequence entries", x1, roomSeq, fresh.res.Seq, entries)
	}
	if s := svc.Stats(); s.GroupRedone == 0 || s.GroupLargest < 3 {
		t.Fatalf("not exercised: redone %d, largest %d", s.GroupRedone, s.GroupLargest)
	}
}

// An invocation refused on its own (here its precondition) after one
// whose statement PostgreSQL then refuses was judged on a view that had
// the refused writes: it is judged again without them. The precondition
// holds without boom's increment, so check succeeds.
func TestGroupCommitRefusalJudgedAgain(t *testing.T) {
	r := newGCRoom(t, "gc-judged", refuseBoom,
		substrate.ActionDef{ID: "inc", Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}, {Key: "b", Value: json.RawMessage(`"ok"`)}}},
		boomAction,
		substrate.ActionDef{ID: "check", If: `state._shared.n < 1000`, Writes: []substrate.WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}}})
	r.invoke("inc", nil) // n and b exist: no invocation reads on its own
	answers := r.queued(invocations("inc", "boom", "check")...)
	first, boom, check := answers[0], answers[1], answers[2]
	if first.err != nil || boom.err == nil || !strings.Contains(boom.err.Error(), "boom refused") {
		t.Fatalf("inc: %v, boom: %v", first.err, boom.err)
	}
	if check.err != nil {
		t.Fatalf("check was judged on boom's refused writes: %v", check.err)
	}
	if check.res.Seq != first.res.Seq+2 {
		t.Errorf("check at seq %d, want %d", check.res.Seq, first.res.Seq+2)
	}
	if s := r.svc.Stats(); s.GroupRedone == 0 || s.GroupLargest < 3 {
		t.Fatalf("not exercised: redone %d, largest %d", s.GroupRedone, s.GroupLargest)
	}
}
