package buildcache

import (
	"fmt"
	"testing"
)

// Authorities are free to make: the builds kept for one state stop at
// MaxAuthorities, and at copies the size of the state (or MinEntries).
func TestBuildsStayWithinTheirBounds(t *testing.T) {
	var b Builds[int]
	for i := range MaxAuthorities + 10 {
		b.Keep(fmt.Sprint("a", i), i, 0, 0)
	}
	if _, ok := b.Get(fmt.Sprint("a", MaxAuthorities)); ok {
		t.Fatal("a build past MaxAuthorities was kept")
	}
	if v, ok := b.Get("a3"); !ok || v != 3 {
		t.Fatalf("a3: %v %v", v, ok)
	}
	if b.Keep("a3", 99, 0, 0) {
		t.Fatal("a second build under one key replaced the first")
	}

	var c Builds[string]
	const size = 10_000
	if !c.Keep("x", "x", size-1, size) || c.Keep("y", "y", 2, size) {
		t.Fatal("the copies kept went past the state's size")
	}
	if !c.Keep("z", "z", 1, size) {
		t.Fatal("a build within the state's size was refused")
	}
	var d Builds[string]
	if !d.Keep("small", "s", MinEntries, 5) || d.Keep("more", "m", 1, 5) {
		t.Fatal("a small state's builds are not bounded by MinEntries")
	}
}

// Copied counts what a build holds beyond the state: maps the state owns
// are free, a map two states share counts once.
func TestCopiedCountsMapsOfTheirOwnOnce(t *testing.T) {
	own := map[string]map[string]any{"_shared": {"a": 1, "b": 2}}
	mine := map[string]any{"k": 1, "l": 2, "m": 3}
	reader := map[string]any{"_shared": map[string]any(own["_shared"]), "_self": mine}
	registrar := map[string]any{"_self": mine, "_other": map[string]any{"z": 1}}
	if n := Copied(own, reader, registrar); n != 4 {
		t.Fatalf("copied %d entries, want 4 (3 of the shared self map, 1 of _other)", n)
	}
}

// The gate results share one bound; when timed results are full, those of
// a quantum that is over go first.
func TestGatesDropQuantaThatAreOver(t *testing.T) {
	var g Gates[int, bool]
	fresh := func(n int) map[int]bool {
		m := map[int]bool{}
		for i := range n {
			m[i] = true
		}
		return m
	}
	g.KeepResults("pure", fresh(MinEntries-10), 0)
	g.KeepTimed("old", 1, fresh(10), 0)
	if g.Timed("old", 1) == nil || g.Timed("old", 2) != nil {
		t.Fatal("timed results are not kept per quantum")
	}
	g.KeepTimed("new", 2, fresh(10), 0)
	if g.Timed("new", 2) == nil {
		t.Fatal("quantum 2's results were refused while quantum 1's were kept")
	}
	if g.Timed("old", 1) != nil {
		t.Fatal("the results of a quantum that is over were kept past the bound")
	}
	g.KeepResults("pure2", fresh(100), 0)
	if g.Results("pure2") != nil {
		t.Fatal("results past the bound were kept")
	}
	if len(g.Results("pure")) != MinEntries-10 {
		t.Fatal("the first results were lost")
	}
}
