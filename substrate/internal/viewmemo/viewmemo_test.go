package viewmemo

import (
	"fmt"
	"sync"
	"testing"
)

// key is as the core's: the view, the evaluation that made it, and the
// message count it saw.
type key struct {
	view   string
	public bool
	count  int64
}

// A value is returned only under the key it was kept under: not for
// another view, another evaluation, or another message count.
func TestMemoAnswersOnlyForItsKey(t *testing.T) {
	var m Memo[key, string]
	kept := key{"summary", false, 3}
	if !m.Keep(kept, "at 3", 1, 0) {
		t.Fatal("a value within the bounds was not kept")
	}
	for _, other := range []key{{"summary", false, 4}, {"summary", true, 3}, {"other", false, 3}, {"summary", false, -1}} {
		if v, ok := m.Get(other); ok {
			t.Fatalf("%+v answered with %q, kept under %+v", other, v, kept)
		}
	}
	if v, ok := m.Get(kept); !ok || v != "at 3" {
		t.Fatalf("the value kept was lost: %q, %v", v, ok)
	}
	// The first value kept stays: a second Keep under the same key does
	// not replace what readers already share.
	if m.Keep(kept, "again", 1, 0) {
		t.Fatal("a second value was kept under a key already held")
	}
	if v, _ := m.Get(kept); v != "at 3" {
		t.Fatalf("the value kept was replaced by %q", v)
	}
}

// The memo never holds more values than MaxEntries, nor more nodes than
// the state's size allows; a value refused is not returned later.
func TestMemoStaysWithinItsBounds(t *testing.T) {
	var m Memo[key, int]
	for i := range MaxEntries + 10 {
		m.Keep(key{"v", false, int64(i)}, i, 1, 0)
	}
	if len(m.m) != MaxEntries {
		t.Fatalf("the memo holds %d values, its bound is %d", len(m.m), MaxEntries)
	}
	if _, ok := m.Get(key{"v", false, MaxEntries}); ok {
		t.Fatal("a value past the bound was returned")
	}

	var big Memo[key, int]
	const size = MinNodes * 2 // a state larger than the floor
	if !big.Keep(key{"a", false, -1}, 1, size-10, size) {
		t.Fatal("a value within the state's size was not kept")
	}
	if big.Keep(key{"b", false, -1}, 2, 11, size) {
		t.Fatal("a value taking the memo past the state's size was kept")
	}
	if _, ok := big.Get(key{"b", false, -1}); ok {
		t.Fatal("a value refused was returned")
	}
	if !big.Keep(key{"c", false, -1}, 3, 10, size) {
		t.Fatal("a value that fits was refused")
	}
	if big.nodes != size {
		t.Fatalf("the memo counts %d nodes, %d were kept", big.nodes, size)
	}

	// However small the state, MinNodes may be kept, and no more.
	var small Memo[key, int]
	if !small.Keep(key{"a", false, -1}, 1, MinNodes, 1) || small.Keep(key{"b", false, -1}, 1, 1, 1) {
		t.Fatal("a small state's memo is not bounded by MinNodes")
	}
}

// Readers keep and read concurrently; the bounds hold across them.
func TestMemoConcurrent(t *testing.T) {
	var m Memo[key, int]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				k := key{fmt.Sprint(g), false, int64(i)}
				m.Keep(k, i, 3, 0)
				if v, ok := m.Get(k); ok && v != i {
					t.Errorf("%+v answered %d", k, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(m.m) > MaxEntries || m.nodes > allowed(0) {
		t.Fatalf("past the bounds: %d values, %d nodes", len(m.m), m.nodes)
	}
}

func TestNodesCountsWhatACopyHolds(t *testing.T) {
	v := []any{int64(1), map[string]any{"a": "x", "b": []any{true, false}}}
	// the list, 1, the map, "x", the inner list, true, false
	if n := Nodes(v); n != 7 {
		t.Fatalf("Nodes = %d, want 7", n)
	}
}
