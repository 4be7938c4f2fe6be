package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// usageRoom makes a room with agent a and action bump (which writes
// _shared.n), invoked once so that the row exists; it returns the room's
// and the agent's principals.
func usageRoom(t *testing.T, s *Service, room string) (admin, agent *Principal) {
	t.Helper()
	ctx := context.Background()
	r, err := s.CreateRoom(ctx, CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ = s.Authenticate(ctx, r.Token)
	j, err := s.Join(ctx, admin, room, JoinRequest{ID: "a", Name: "A"})
	if err != nil {
		t.Fatal(err)
	}
	if agent, err = s.Authenticate(ctx, j.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterAction(ctx, admin, room, ActionDef{ID: "bump", Writes: []WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Invoke(ctx, agent, room, "bump", nil); err != nil {
		t.Fatal(err)
	}
	return admin, agent
}

func readsAtUse(t *testing.T, db *store.DB, room, kind, id string) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT reads_at_use FROM vocabulary_usage WHERE room_id = $1 AND kind = $2 AND id = $3`, room, kind, id).Scan(&n); err != nil {
		t.Fatalf("vocabulary_usage of %s %s: %v", kind, id, err)
	}
	return n
}

// The room's context reads stored with a use (vocabulary_usage.
// reads_at_use, the clock salience decays an item by) count every read
// once. They were the sum of the agents' rows, read by the statement that
// records the use, plus the reads this process had queued or in flight
// when the mutation queued that statement: a write of those marks that
// committed in between was in both (the item then looked fresher than it
// was until its next use). Played step by step: the test is the writer
// of read marks, and holds the row the mutation writes before it records
// the use, so the marks are written and committed exactly then.
func TestReadsAtUseCountMarksWrittenMeanwhileOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Options
		// use records a use of action bump; lock is the row it writes
		// first.
		use  func(ctx context.Context, s *Service, admin, agent *Principal, room string) error
		lock string
	}{
		{"invoke, group commit", Options{}, func(ctx context.Context, s *Service, _, agent *Principal, room string) error {
			_, err := s.Invoke(ctx, agent, room, "bump", nil)
			return err
		}, `SELECT 1 FROM state WHERE room_id = $1 AND scope = '_shared' AND key = 'n' FOR UPDATE`},
		{"invoke, a transaction each", Options{NoGroupCommit: true}, func(ctx context.Context, s *Service, _, agent *Principal, room string) error {
			_, err := s.Invoke(ctx, agent, room, "bump", nil)
			return err
		}, `SELECT 1 FROM state WHERE room_id = $1 AND scope = '_shared' AND key = 'n' FOR UPDATE`},
		{"registration", Options{}, func(ctx context.Context, s *Service, admin, _ *Principal, room string) error {
			_, err := s.RegisterAction(ctx, admin, room, ActionDef{ID: "bump", Description: "again", Writes: []WriteTemplate{{Key: "n", Increment: json.RawMessage(`1`)}}})
			return err
		}, `SELECT 1 FROM state WHERE room_id = $1 AND scope = '_actions' AND key = 'bump' FOR UPDATE`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			url := pgtest.URL(t)
			db, err := store.Open(ctx, url, store.Options{MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)
			s := New(db, tc.opt)
			t.Cleanup(s.Close)
			// No background writer: the test writes the marks (and Close
			// finds the writer done).
			s.marks.Hold()
			const room = "usage-reads"
			admin, agent := usageRoom(t, s, room)
			read := func(n int) {
				for range n {
					if _, err := s.Context(ctx, agent, room, ContextRequest{Only: []string{"agents"}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			read(2)
			if err := s.marks.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			read(3) // queued, not written: the room has 5 reads

			blocker, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Close(ctx)
			btx, err := blocker.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer btx.Rollback(ctx)
			if _, err := btx.Exec(ctx, tc.lock, room); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- tc.use(ctx, s, admin, agent, room) }()
			// The mutation has queued its statements and waits for the row.
			pgtest.Eventually(t, 10*time.Second, func() bool {
				var waiting int
				if err := btx.QueryRow(ctx, pgtest.LockWaits()).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				return waiting > 0
			}, "the mutation to wait for the locked row")
			// Meanwhile the 3 queued reads are written and committed.
			if err := s.marks.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := btx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := readsAtUse(t, db, room, "action", "bump"); got != 5 {
				t.Fatalf("reads at use %d, want 5 (2 written before, 3 written while the use was being recorded)", got)
			}
		})
	}
}

// Many agents read a room over two connections while others invoke its
// actions and the writer writes the read marks (its answers slowed, so
// that reads and uses meet writes that committed and have not landed):
// every use records between the reads that finished before it began and
// those begun before it ended; and a use after the last read records
// them all.
func TestReadsAtUseExactUnderConcurrentReadsAndUses(t *testing.T) {
	db := pgtest.NewPool(t, 2)
	s := New(db, Options{})
	// Stays: a commit made slow on purpose, so that reads and uses overlap it.
	s.marks.Committed = func() { time.Sleep(3 * time.Millisecond) }
	t.Cleanup(s.Close)
	ctx := context.Background()
	const room, agents, readersPer, reads, users, uses = "usage-race", 4, 2, 20, 3, 12
	r, err := s.CreateRoom(ctx, CreateRoomRequest{ID: room})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := s.Authenticate(ctx, r.Token)
	var readers []*Principal
	for i := range agents {
		j, err := s.Join(ctx, admin, room, JoinRequest{ID: fmt.Sprintf("r%d", i), Name: "R"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := s.Authenticate(ctx, j.Token)
		readers = append(readers, p)
	}
	for i := range users {
		if _, err := s.RegisterAction(ctx, admin, room, ActionDef{ID: fmt.Sprintf("use%d", i), Writes: []WriteTemplate{{Key: fmt.Sprintf("n%d", i), Increment: json.RawMessage(`1`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	var begun, finished atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, agents*readersPer+users)
	for _, p := range readers {
		for range readersPer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range reads {
					begun.Add(1)
					if _, err := s.Context(ctx, p, room, ContextRequest{Only: []string{"agents"}}); err != nil {
						errc <- err
						return
					}
					finished.Add(1)
				}
			}()
		}
	}
	var checked atomic.Int64
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("use%d", i)
			for range uses {
				lo := finished.Load()
				if _, err := s.Invoke(ctx, admin, room, id, nil); err != nil {
					errc <- err
					return
				}
				hi := begun.Load()
				// Only this goroutine uses id: the row is this use's.
				var got int64
				if err := db.QueryRow(ctx, `SELECT reads_at_use FROM vocabulary_usage WHERE room_id = $1 AND kind = 'action' AND id = $2`, room, id).Scan(&got); err != nil {
					errc <- err
					return
				}
				if got < lo || got > hi {
					errc <- fmt.Errorf("a use of %s records %d reads; %d had finished before it began and %d begun before it ended", id, got, lo, hi)
					return
				}
				checked.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	const total = agents * readersPer * reads
	if _, err := s.Invoke(ctx, admin, room, "use0", nil); err != nil {
		t.Fatal(err)
	}
	if got := readsAtUse(t, db, room, "action", "use0"); got != total {
		t.Fatalf("a use after %d reads records %d", total, got)
	}
	t.Logf("%d reads, %d uses checked meanwhile", total, checked.Load())
}
