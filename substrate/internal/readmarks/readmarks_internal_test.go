package readmarks

import "testing"

// A read of the agents' rows that began before a write of read marks
// committed, and is overlaid after that write landed, sees neither the
// write nor the marks: the marks of the read before it must still hold.
// This is the order TestSalienceYouElided met under -race (an agent's
// read, its marks written while the next read was reading the rows):
// since_your_last_read then started at the read before last, and a read
// of an unchanged room named views and messages as changed. Played here
// step by step, the writer being the test.
func TestReadMarksOverlayKeepsMarksWrittenDuringTheRead(t *testing.T) {
	r := held()
	rows := func() agentRows {
		// What the agents' rows hold before the write commits.
		return agentRows{{ID: "a", LastContextSeq: 2, LastSeenSeq: 2, ContextReads: 2}, {ID: "b", LastContextSeq: 1, ContextReads: 1}}
	}
	r.Overlay("r", rows()) // read 3 reads the rows: reads 2, at seq 2
	r.add("r", "a", readMark{seq: 5, upTo: 4, reads: 1})
	batch := r.take() // the writer takes read 3's mark
	stale := rows()   // read 4 reads the rows before the write commits
	r.wrote(map[markKey]int64{{"r", "a"}: 3})
	r.land(batch, nil)
	r.Overlay("r", stale) // and lays the marks over after it landed
	a := stale[0]
	if a.LastContextSeq != 5 || a.LastSeenSeq != 4 || a.ContextReads != 3 {
		t.Fatalf("read 4 sees last_context_seq %d, last_seen_seq %d, context_reads %d; want 5, 4, 3 (read 3's marks)", a.LastContextSeq, a.LastSeenSeq, a.ContextReads)
	}
	if b := stale[1]; b.LastContextSeq != 1 || b.ContextReads != 1 {
		t.Fatalf("another agent's marks moved: %+v", b)
	}
	// A failed write queues the marks again; they are not counted twice.
	r.add("r", "a", readMark{seq: 6, upTo: 6, reads: 1})
	batch = r.take()
	r.land(batch, errTest)
	now := rows()
	now[0].LastContextSeq, now[0].LastSeenSeq, now[0].ContextReads = 5, 4, 3 // read 3's write is in
	r.Overlay("r", now)
	if a := now[0]; a.LastContextSeq != 6 || a.LastSeenSeq != 6 || a.ContextReads != 4 {
		t.Fatalf("after a failed write: last_context_seq %d, last_seen_seq %d, context_reads %d; want 6, 6, 4", a.LastContextSeq, a.LastSeenSeq, a.ContextReads)
	}
}

var errTest = testErr("write failed")

type testErr string

func (e testErr) Error() string { return string(e) }

// A read whose rows were read after a write of read marks committed, and
// overlaid before the writer heard back, finds the write's reads both in
// the rows and in flight: they must count once. Reported twice, the high
// water mark (seen) kept the overcount after the write landed, and the
// agent's context_reads in this process stayed a read too high until it
// was forgotten (salience decays by it). Played step by step, the writer
// being the test.
func TestReadMarksInFlightWriteCountsOnce(t *testing.T) {
	r := held()
	rows := func(reads int64) agentRows {
		return agentRows{{ID: "a", LastContextSeq: 2, LastSeenSeq: 2, ContextReads: reads}}
	}
	check := func(step string, agents agentRows, want int64) {
		t.Helper()
		r.Overlay("r", agents)
		if got := agents[0].ContextReads; got != want {
			t.Fatalf("%s: context_reads %d, want %d", step, got, want)
		}
	}
	check("before read 3", rows(2), 2)
	r.add("r", "a", readMark{seq: 3, upTo: 3, reads: 1}) // read 3's mark
	batch := r.take()
	check("rows read before the write's UPDATE", rows(2), 3)
	// The writer's UPDATE has run: the row holds 3 once it commits.
	r.wrote(map[markKey]int64{{"r", "a"}: 3})
	check("rows read before the write committed", rows(2), 3)
	check("rows read after the write committed, before it landed", rows(3), 3)
	r.land(batch, nil)
	check("rows read after it landed", rows(3), 3)
	check("rows read before it committed, overlaid after it landed", rows(2), 3)
	r.add("r", "a", readMark{seq: 4, upTo: 4, reads: 1}) // read 4's mark
	check("read 4 queued", rows(3), 4)
	check("read 4 queued, rows from before read 3's write", rows(2), 4)

	// An agent this process has not reported: nothing in seen holds its
	// count, the landed write must.
	r = held()
	r.add("r", "a", readMark{seq: 3, upTo: 3, reads: 1})
	batch = r.take()
	r.wrote(map[markKey]int64{{"r", "a"}: 3})
	r.land(batch, nil)
	check("an agent not reported before, rows from before the write", rows(2), 3)
	check("an agent not reported before, rows with the write", rows(3), 3)

	// A failed write is queued again and counted once, written or not.
	r.add("r", "a", readMark{seq: 5, upTo: 5, reads: 1})
	batch = r.take()
	r.wrote(map[markKey]int64{{"r", "a"}: 4})
	check("a write not committed yet", rows(3), 4)
	r.land(batch, errTest)
	check("a write that failed", rows(3), 4)
}

// The landed writes kept per agent are bounded; rows older than all of
// them count short (never over), and what this process reported holds.
func TestReadMarksLandedWritesAreBounded(t *testing.T) {
	r := held()
	k := markKey{"r", "a"}
	const writes = landedKeep + 6
	for i := int64(1); i <= writes; i++ {
		r.add("r", "a", readMark{seq: i, upTo: i, reads: 1})
		batch := r.take()
		r.wrote(map[markKey]int64{k: i})
		r.land(batch, nil)
	}
	if n := len(r.landed[k]); n != landedKeep {
		t.Fatalf("%d landed writes kept, want %d", n, landedKeep)
	}
	fresh := agentRows{{ID: "a"}} // rows from before every write
	r.Overlay("r", fresh)
	if got := fresh[0].ContextReads; got < landedKeep || got > writes {
		t.Fatalf("rows older than the writes kept: context_reads %d, want %d to %d (short, never over)", got, landedKeep, writes)
	}
	r.Overlay("r", agentRows{{ID: "a", ContextReads: writes}})
	again := agentRows{{ID: "a"}}
	r.Overlay("r", again)
	if got := again[0].ContextReads; got != writes {
		t.Fatalf("after %d reads were reported, rows older than the writes kept: context_reads %d", writes, got)
	}
}

// held is marks without a background writer: the test is the writer.
func held() *Marks {
	r := New(nil, "", nil)
	r.Hold()
	return r
}

// add is Add of a mark as the tests spell it.
func (r *Marks) add(room, agent string, m readMark) {
	r.Add(room, agent, Mark{Seq: m.seq, UpTo: m.upTo, Reads: m.reads})
}

// row is an agent's row as the core's presence holds it.
type row struct {
	ID                                        string
	LastContextSeq, LastSeenSeq, ContextReads int64
}

type agentRows []row

func (r agentRows) Len() int { return len(r) }

func (r agentRows) At(i int) (string, *int64, *int64, *int64) {
	return r[i].ID, &r[i].LastContextSeq, &r[i].LastSeenSeq, &r[i].ContextReads
}
