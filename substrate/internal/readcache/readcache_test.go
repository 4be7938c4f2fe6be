package readcache

import (
	"strconv"
	"sync"
	"testing"
)

// A value is returned only for the key and the sequence number it was
// put under: a read at another seq (the room moved on, or the reader saw
// an older one) misses and reads the long way.
func TestGetMatchesKeyAndSeq(t *testing.T) {
	c := New[string](4)
	c.Put("room@1", 7, "at 7")
	if v, ok := c.Get("room@1", 7); !ok || v != "at 7" {
		t.Fatalf("Get(room@1, 7) = %q, %v; want the value put", v, ok)
	}
	for _, miss := range []struct {
		key string
		seq int64
	}{{"room@1", 6}, {"room@1", 8}, {"room@2", 7}} {
		if v, ok := c.Get(miss.key, miss.seq); ok {
			t.Errorf("Get(%s, %d) = %q; want a miss", miss.key, miss.seq, v)
		}
	}
}

// A slow writer putting an older version never replaces a newer one; a
// newer version replaces the older.
func TestPutKeepsTheNewest(t *testing.T) {
	c := New[string](4)
	c.Put("r", 9, "nine")
	c.Put("r", 8, "eight")
	if _, ok := c.Get("r", 8); ok {
		t.Fatal("an older put replaced the newer version")
	}
	if v, ok := c.Get("r", 9); !ok || v != "nine" {
		t.Fatalf("Get(r, 9) = %q, %v after an older put; want nine", v, ok)
	}
	c.Put("r", 10, "ten")
	if v, ok := c.Get("r", 10); !ok || v != "ten" {
		t.Fatalf("Get(r, 10) = %q, %v; want ten", v, ok)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d after three versions of one key; want 1", c.Len())
	}
}

// The cache never holds more keys than its bound, whatever is put.
func TestBounded(t *testing.T) {
	c := New[int](16)
	for i := range 1000 {
		c.Put("room"+strconv.Itoa(i), int64(i), i)
		if c.Len() > 16 {
			t.Fatalf("Len = %d after %d puts; want at most 16", c.Len(), i+1)
		}
	}
	if v, ok := c.Get("room999", 999); !ok || v != 999 {
		t.Fatalf("the last put is not held: %d, %v", v, ok)
	}
}

// Readers and writers of the same keys at once (run with -race).
func TestConcurrent(t *testing.T) {
	c := New[int64](8)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range int64(500) {
				key := "r" + strconv.Itoa(int(i)%10)
				c.Put(key, i, i*10+int64(w))
				if v, ok := c.Get(key, i); ok && v/10 != i {
					t.Errorf("Get(%s, %d) = %d: a value of another seq", key, i, v)
					return
				}
			}
		}()
	}
	wg.Wait()
}
