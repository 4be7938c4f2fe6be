package rest_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// Adaptive salience (seed 000): what the substrate says deserves a
// reader's attention, per read and per agent, from metadata only.

func attention(r resp) map[string]any {
	at, _ := path(r.body, "_context", "_attention").(map[string]any)
	return at
}

func strs(v any) []string {
	var out []string
	for _, x := range asList(v) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

// salienceConfig sets the room's salience thresholds.
func salienceConfig(e *env, rm room, cfg map[string]any) {
	e.t.Helper()
	e.do("PUT", "/rooms/"+rm.id+"/state", rm.token, map[string]any{"scope": "_shared", "key": "_config", "value": map[string]any{"salience": cfg}}).must(e.t, 200)
}

// A view whose expression fails is its registrar's to fix: the registrar
// gets it listed, with the error, even when it asked for state only;
// another agent is not pointed at it (it is counted, by registrar, in
// _vocabulary_health) and the room is not rated degenerating for it. A
// broken view of the room's own is everyone's, and rates the room.
func TestSalienceBrokenViewSurfacesForItsRegistrar(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("broken", nil)
	a := e.join(rm, "a")
	b := e.join(rm, "b")
	e.do("PUT", "/rooms/broken/views", a, map[string]any{"id": "total", "scope": "a", "expr": "state._shared.missing + 1"}).must(t, 201)

	mine := attention(e.ctx(rm, a, "only=state"))
	if !slices.Contains(strs(mine["broken_views"]), "total") {
		t.Fatalf("broken view not listed for its registrar: %v", mine)
	}
	yours, _ := mine["your_broken_views"].(map[string]any)
	if yours["total"] == nil || path(yours, "total", "_error") == nil {
		t.Fatalf("the registrar's broken view is not promoted with its error: %v", mine)
	}
	if f, _ := mine["finding"].(string); !strings.Contains(f, "your views fail") {
		t.Fatalf("the registrar's finding is not its broken view: %v", mine)
	}
	theirs := attention(e.ctx(rm, b, "only=state"))
	if theirs["broken_views"] != nil || theirs["your_broken_views"] != nil || theirs["finding"] != nil || theirs["vocabulary_health"] == "degenerating" {
		t.Fatalf("another agent is pointed at a's broken view: %v", theirs)
	}
	h, _ := path(e.ctx(rm, b, "only=views").body, "views", "_vocabulary_health").(map[string]any)
	if h["assessment"] == "degenerating" || !slices.Contains(strs(path(h, "broken_views_by", "a")), "total") || h["broken_views"] != float64(1) {
		t.Fatalf("one agent's broken view in _vocabulary_health: %v", h)
	}

	e.do("PUT", "/rooms/broken/views", rm.token, map[string]any{"id": "board", "expr": "state._shared.board.size()"}).must(t, 201)
	theirs = attention(e.ctx(rm, b, "only=state"))
	if !slices.Contains(strs(theirs["broken_views"]), "board") || theirs["vocabulary_health"] != "degenerating" {
		t.Fatalf("the room's own broken view is not everyone's: %v", theirs)
	}
	help := e.do("GET", "/rooms/broken/help?key=vocabulary_review", a, nil).must(t, 200)
	if help.str("source") != "system" {
		t.Fatalf("no vocabulary_review help: %s", help.raw)
	}
}

// An agent's first context read is at depth full, once, and says so.
func TestSalienceFirstReadEnrichedOnce(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("first", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/first/actions", rm.token, map[string]any{"id": "go", "writes": []any{map[string]any{"key": "k", "value": 1}}}).must(t, 201)
	first := e.ctx(rm, a, "")
	if path(first.body, "_context", "depth") != "full" || path(first.body, "_context", "note") == nil || path(first.body, "actions", "go", "writes") == nil {
		t.Fatalf("first read not enriched: %v", first.body["_context"])
	}
	for i := range 3 {
		again := e.ctx(rm, a, "")
		if path(again.body, "_context", "depth") != "lean" || path(again.body, "_context", "note") != nil {
			t.Fatalf("read %d enriched again: %v", i+2, again.body["_context"])
		}
	}
	if path(e.ctx(rm, rm.token, "").body, "_context", "depth") != "lean" {
		t.Fatalf("a token (no agent) read enriched")
	}
}

// since_your_last_read is each agent's own: agents reading concurrently
// each get the change since their own previous read.
func TestSalienceSinceYourLastReadPerAgent(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("since", nil)
	e.do("PUT", "/rooms/since/actions", rm.token, map[string]any{"id": "bump", "params": map[string]any{"k": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "${params.k}", "increment": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/since/views", rm.token, map[string]any{"id": "x_view", "scope": "_shared", "expr": "state._shared.?x.orValue(0)"}).must(t, 201)
	agents := []string{"a", "b", "c", "d"}
	tok := map[string]string{}
	for _, id := range agents {
		tok[id] = e.join(rm, id)
		e.ctx(rm, tok[id], "") // the first (enriched) read
	}
	last := map[string]int64{}
	var mu sync.Mutex
	readAll := func() map[string]map[string]any {
		out := map[string]map[string]any{}
		var wg sync.WaitGroup
		for _, id := range agents {
			wg.Go(func() {
				r := e.do("GET", "/rooms/since/context?only=state", tok[id], nil)
				mu.Lock()
				defer mu.Unlock()
				if r.status != 200 {
					t.Errorf("%s: %d %s", id, r.status, r.raw)
					return
				}
				out[id], _ = attention(r)["since_your_last_read"].(map[string]any)
				last[id] = int64(path(r.body, "_context", "seq").(float64))
			})
		}
		wg.Wait()
		return out
	}
	readAll()
	// a and b read again after one change; all read after two more.
	e.invoke(rm, tok["c"], "bump", map[string]any{"k": "x"}).must(t, 200)
	for _, id := range []string{"a", "b"} {
		r := e.ctx(rm, tok[id], "only=state")
		s, _ := attention(r)["since_your_last_read"].(map[string]any)
		if s["state_changes"] != float64(1) || !slices.Contains(strs(s["actions_invoked"]), "bump") || !slices.Contains(strs(s["views_changed"]), "x_view") {
			t.Fatalf("%s after one change: %v", id, s)
		}
		last[id] = int64(path(r.body, "_context", "seq").(float64))
	}
	before := map[string]int64{}
	for id, s := range last {
		before[id] = s
	}
	e.invoke(rm, tok["d"], "bump", map[string]any{"k": "y"}).must(t, 200)
	e.invoke(rm, tok["d"], "bump", map[string]any{"k": "z"}).must(t, 200)
	got := readAll()
	for _, id := range agents {
		s := got[id]
		if s["from_seq"] != float64(before[id]) {
			t.Errorf("%s: from_seq %v, want its own last read %d", id, s["from_seq"], before[id])
		}
		want := float64(2) // y and z
		if id == "c" || id == "d" {
			want = 3 // x too: they had not read since
		}
		if s["state_changes"] != want {
			t.Errorf("%s: state_changes %v, want %v (%v)", id, s["state_changes"], want, s)
		}
	}
}

// What a read leaves out and has changed since the reader's last read is
// named in you_elided.
func TestSalienceYouElided(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("elided", nil)
	a := e.join(rm, "a")
	b := e.join(rm, "b")
	e.do("PUT", "/rooms/elided/views", rm.token, map[string]any{"id": "score", "scope": "_shared", "expr": "state._shared.?score.orValue(0)"}).must(t, 201)
	e.ctx(rm, a, "")
	e.ctx(rm, a, "only=state")
	e.do("PUT", "/rooms/elided/state", rm.token, map[string]any{"scope": "_shared", "key": "score", "value": 3}).must(t, 200)
	e.invoke(rm, b, "_send_message", map[string]any{"body": "hello"}).must(t, 200)
	at := attention(e.ctx(rm, a, "only=state"))
	if got := strs(at["you_elided"]); !slices.Contains(got, "views") || !slices.Contains(got, "messages") || slices.Contains(got, "state") {
		t.Fatalf("you_elided = %v (%v)", got, at)
	}
	if got := strs(attention(e.ctx(rm, a, "only=state"))["you_elided"]); len(got) != 0 {
		t.Fatalf("nothing changed since, yet you_elided = %v", got)
	}
}

// Rooms built to be progressive, stable and degenerating are assessed so.
func TestSalienceVocabularyHealth(t *testing.T) {
	e := newEnv(t, rest.Options{})
	health := func(rm room) map[string]any {
		h, _ := path(e.ctx(rm, rm.token, "only=views").body, "views", "_vocabulary_health").(map[string]any)
		return h
	}
	action := func(rm room, id string) {
		e.do("PUT", "/rooms/"+rm.id+"/actions", rm.token, map[string]any{"id": id, "writes": []any{map[string]any{"key": id, "increment": 1}}}).must(t, 201)
	}

	// Progressive: new vocabulary is being invoked.
	prog := e.room("progressive", nil)
	pa := e.join(prog, "a")
	action(prog, "build")
	e.invoke(prog, pa, "build", nil).must(t, 200)
	if h := health(prog); h["assessment"] != "progressive" {
		t.Errorf("progressive room: %v", h)
	}

	// Stable: established vocabulary in steady use, nothing new.
	stable := e.room("stable", nil)
	sa := e.join(stable, "a")
	salienceConfig(e, stable, map[string]any{"stale_after_mutations": 5})
	action(stable, "tick")
	for range 12 {
		e.invoke(stable, sa, "tick", nil).must(t, 200)
	}
	if h := health(stable); h["assessment"] != "stable" {
		t.Errorf("stable room: %v", h)
	}

	// Degenerating: vocabulary registered and never used, and messages
	// standing in for actions.
	deg := e.room("degenerating", nil)
	da := e.join(deg, "a")
	salienceConfig(e, deg, map[string]any{"stale_after_mutations": 3})
	for _, id := range []string{"propose", "vote", "tally"} {
		action(deg, id)
	}
	for i := range 12 {
		e.invoke(deg, da, "_send_message", map[string]any{"body": fmt.Sprintf("shall we vote? %d", i), "kind": "negotiation"}).must(t, 200)
	}
	h := health(deg)
	if h["assessment"] != "degenerating" || h["stale_actions"] != float64(3) || len(asList(h["reasons"])) < 2 || len(asList(h["suggestions"])) < 2 {
		t.Errorf("degenerating room: %v", h)
	}
	if at := attention(e.ctx(deg, da, "")); len(strs(at["stale_actions"])) != 3 || at["vocabulary_health"] != "degenerating" {
		t.Errorf("attention in the degenerating room: %v", at)
	}
	if a := path(e.ctx(deg, da, "depth=usage").body, "actions", "vote", "_stale"); a != true {
		t.Errorf("stale action not marked at depth=usage: %v", a)
	}
}

// Messages that keep coming just before the same invocation, and messages
// about a shared key no action writes, are suggested as vocabulary gaps;
// chatter interleaved with work is not. Precision is measured on a
// scripted room with known patterns and noise (help key vocabulary_review
// states it): every suggestion must be one of the scripted patterns, and
// every scripted pattern found. Counting any message kind that came within
// a few entries of an invocation, as the detector did, suggested "chat
// messages precede claim" here (precision 3 of 5).
func TestSalienceMessagePatterns(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("patterns", nil)
	a, b := e.join(rm, "a"), e.join(rm, "b")
	workers := []string{e.join(rm, "c"), e.join(rm, "d"), e.join(rm, "f")}
	for _, k := range []string{"deadline", "task_7"} {
		e.do("PUT", "/rooms/patterns/state", rm.token, map[string]any{"scope": "_shared", "key": k, "value": "open"}).must(t, 200)
	}
	e.do("PUT", "/rooms/patterns/actions", rm.token, map[string]any{"id": "accept", "writes": []any{map[string]any{"key": "accepted", "increment": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/patterns/actions", rm.token, map[string]any{"id": "claim", "writes": []any{map[string]any{"key": "claimed", "increment": 1}}}).must(t, 201)
	rng := rand.New(rand.NewPCG(7, 7))
	for step := range 150 {
		switch {
		case step%12 == 0: // the pattern: a proposes, b accepts
			e.invoke(rm, a, "_send_message", map[string]any{"body": fmt.Sprintf("can we move the deadline? (%d)", step), "kind": "proposal"}).must(t, 200)
			e.invoke(rm, b, "accept", nil).must(t, 200)
		case step%15 == 7: // the concept without vocabulary
			e.invoke(rm, workers[1], "_send_message", map[string]any{"body": fmt.Sprintf("task_7 is blocked again (%d)", step), "kind": "task_update"}).must(t, 200)
		case rng.IntN(10) < 6: // chatter
			e.invoke(rm, workers[rng.IntN(3)], "_send_message", map[string]any{"body": fmt.Sprintf("still on it %d", step)}).must(t, 200)
		default: // work
			e.invoke(rm, workers[rng.IntN(3)], "claim", nil).must(t, 200)
		}
	}
	h, _ := path(e.ctx(rm, rm.token, "only=views").body, "views", "_vocabulary_health").(map[string]any)
	scripted := []string{"messages_precede_action:proposal:accept<nil>", "messages_about_key:proposal:<nil>_shared.deadline", "messages_about_key:task_update:<nil>_shared.task_7"}
	var found []string
	right := 0
	for _, p := range asList(h["patterns"]) {
		pm := p.(map[string]any)
		k := fmt.Sprintf("%v:%v:%v", pm["pattern"], pm["kind"], pm["action"]) + fmt.Sprint(pm["key"])
		found = append(found, k)
		if slices.Contains(scripted, k) {
			right++
		}
	}
	t.Logf("scripted room: %d suggestions, %d of them scripted patterns; %d of %d scripted patterns found: %v", len(found), right, right, len(scripted), found)
	if right != len(found) || right != len(scripted) {
		t.Fatalf("patterns found %v, scripted %v", found, scripted)
	}
	// The strongest finding reaches _attention, whatever a budget cuts.
	if f := path(e.ctx(rm, a, "only=state&max_bytes=1500").body, "_context", "_attention", "finding"); f == nil {
		t.Errorf("no finding in _attention")
	}
	// And GET /views lists the system view, as it lists _contested.
	views := e.do("GET", "/rooms/patterns/views", rm.token, nil).must(t, 200)
	listed := false
	for _, v := range asList(views.body["views"]) {
		if v.(map[string]any)["id"] == "_vocabulary_health" {
			listed = true
		}
	}
	if !listed {
		t.Errorf("GET /views does not list _vocabulary_health: %s", views.raw)
	}
}

// Actions whose descriptions and intents say the same are flagged (seed 000
// §7.2), in the health view and, as the strongest finding, in _attention.
func TestSalienceOverlappingPurposes(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("overlap", nil)
	a := e.join(rm, "a")
	e.do("PUT", "/rooms/overlap/actions", rm.token, map[string]any{"id": "take_task", "description": "Assign an open task to yourself so nobody duplicates the work",
		"writes": []any{map[string]any{"key": "t", "value": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/overlap/actions", rm.token, map[string]any{"id": "grab", "description": "Assign yourself an open task so that nobody duplicates work",
		"writes": []any{map[string]any{"key": "t", "value": 2}}}).must(t, 201)
	e.do("PUT", "/rooms/overlap/actions", rm.token, map[string]any{"id": "finish", "description": "Mark a task done and publish its result",
		"writes": []any{map[string]any{"key": "d", "value": 1}}}).must(t, 201)
	ctx := e.ctx(rm, a, "")
	h, _ := path(ctx.body, "views", "_vocabulary_health").(map[string]any)
	pairs := asList(h["overlapping_purposes"])
	if len(pairs) != 1 || fmt.Sprint(pairs[0]) != "[grab take_task]" {
		t.Fatalf("overlapping purposes: %v", h["overlapping_purposes"])
	}
}

// Vocabulary nobody uses loses salience (flagged, and left out of lean
// reads when the room asks, with a count and the read that shows it); it
// still works, and using it restores it.
func TestSalienceEvaporates(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("fade", nil)
	a := e.join(rm, "a")
	salienceConfig(e, rm, map[string]any{"decay": 0.5, "low_salience": 0.2})
	e.do("PUT", "/rooms/fade/actions", rm.token, map[string]any{"id": "old", "writes": []any{map[string]any{"key": "k", "increment": 1}}}).must(t, 201)
	e.ctx(rm, a, "")
	if path(e.ctx(rm, a, "").body, "actions", "old", "_low_salience") != nil {
		t.Fatalf("a fresh action is already low")
	}
	for range 3 {
		e.ctx(rm, a, "")
	}
	r := e.ctx(rm, a, "")
	if path(r.body, "actions", "old", "_low_salience") != true || !slices.Contains(strs(attention(r)["low_salience"]), "old") {
		t.Fatalf("unused action not low after reads: %v / %v", path(r.body, "actions", "old"), attention(r))
	}
	salienceConfig(e, rm, map[string]any{"decay": 0.5, "low_salience": 0.2, "omit_low_salience_at_lean": true})
	r = e.ctx(rm, a, "")
	if path(r.body, "actions", "old") != nil || path(attention(r), "low_salience_omitted", "actions") != float64(1) || path(attention(r), "low_salience_omitted", "expand") == nil {
		t.Fatalf("low action not omitted and counted at lean: %v", attention(r))
	}
	if path(e.ctx(rm, a, "depth=full").body, "actions", "old", "_low_salience") != true {
		t.Fatalf("the low action is not shown, annotated, at depth full")
	}
	e.invoke(rm, a, "old", nil).must(t, 200) // availability never changes
	if path(e.ctx(rm, a, "").body, "actions", "old") == nil {
		t.Fatalf("using the action did not restore it")
	}
}

// An action's intent is shown at depth full and survives a replacement
// that does not restate it (its purpose outlives its implementation).
func TestSalienceIntentKeptThroughReplacement(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("intent", nil)
	e.do("PUT", "/rooms/intent/actions", rm.token, map[string]any{"id": "advance", "intent": "move the game to its next phase",
		"writes": []any{map[string]any{"key": "phase", "increment": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/intent/actions", rm.token, map[string]any{"id": "advance", "if": "state._shared.phase < 3",
		"writes": []any{map[string]any{"key": "phase", "increment": 1}}}).must(t, 200)
	full := e.ctx(rm, rm.token, "depth=full").body
	if got := path(full, "actions", "advance", "intent"); got != "move the game to its next phase" {
		t.Fatalf("intent after replacement: %v", got)
	}
	if got := path(e.ctx(rm, rm.token, "").body, "actions", "advance", "intent"); got != nil {
		t.Fatalf("intent at lean: %v", got)
	}
}

// Salience never tells a reader about what it cannot read: another
// agent's private writes are not counted in its since_your_last_read, and
// another agent's broken private view is not among its
// your_broken_views.
func TestAttackSalienceLeaksNothingPrivate(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("leak", nil)
	a := e.join(rm, "a")
	b := e.join(rm, "b")
	e.ctx(rm, b, "")
	e.ctx(rm, b, "")
	e.do("PUT", "/rooms/leak/state", a, map[string]any{"scope": "a", "key": "secret", "value": 1}).must(t, 200)
	e.do("PUT", "/rooms/leak/state", a, map[string]any{"scope": "a", "key": "secret2", "value": 2}).must(t, 200)
	e.do("PUT", "/rooms/leak/views", a, map[string]any{"id": "mine", "scope": "a", "expr": "state.self.missing"}).must(t, 201)
	// Nor of an entry its gate hides from it.
	e.do("PUT", "/rooms/leak/state", rm.token, map[string]any{"scope": "_shared", "key": "for_a", "value": 3, "enabled": `self == "a"`}).must(t, 200)
	at := attention(e.ctx(rm, b, ""))
	if s, _ := at["since_your_last_read"].(map[string]any); s["state_changes"] != float64(0) {
		t.Fatalf("HOLE: b is told of writes it cannot read (a's private scope, a gated entry): %v", s)
	}
	if at["your_broken_views"] != nil {
		t.Fatalf("HOLE: a's view error shown to b as b's own: %v", at)
	}
}

// An action registered long ago and never invoked is stale by age alone,
// however few mutations the room has seen since (the other test covers
// "too many mutations since").
func TestSalienceStaleByAge(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("aging", nil)
	a := e.join(rm, "a")
	salienceConfig(e, rm, map[string]any{"stale_after_mutations": 1000, "stale_after_minutes": 0.01}) // 0.6 s
	e.do("PUT", "/rooms/"+rm.id+"/actions", rm.token, map[string]any{"id": "vote", "writes": []any{map[string]any{"key": "v", "increment": 1}}}).must(t, 201)
	if s := path(e.ctx(rm, a, "depth=usage").body, "actions", "vote", "_stale"); s == true {
		t.Fatalf("a just-registered action is stale")
	}
	time.Sleep(1200 * time.Millisecond) // Stays: stale_after_minutes (0.6 s) passing on the real clock is what this checks
	if s := path(e.ctx(rm, a, "depth=usage").body, "actions", "vote", "_stale"); s != true {
		t.Errorf("an action older than stale_after_minutes, never invoked, not marked stale: %v", s)
	}
	if at := attention(e.ctx(rm, a, "")); !slices.Contains(strs(at["stale_actions"]), "vote") {
		t.Errorf("attention does not list the aged action: %v", at)
	}
	// Invoking it makes it fresh again, whatever its age.
	e.invoke(rm, a, "vote", nil).must(t, 200)
	if s := path(e.ctx(rm, a, "depth=usage").body, "actions", "vote", "_stale"); s == true {
		t.Errorf("an action invoked since it was registered is stale")
	}
}

// Threads feed the message-pattern signal (issue 31, seed 000): a thread
// whose subject names a shared key no action writes is a conversation
// about that key, message after message, though the replies never name
// it.
func TestSalienceThreadAboutKey(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("threadkey", nil)
	a, b := e.join(rm, "a"), e.join(rm, "b")
	e.do("PUT", "/rooms/threadkey/state", rm.token, map[string]any{"scope": "_shared", "key": "release_date", "value": "tbd"}).must(t, 200)
	root := e.invoke(rm, a, "_send_message", map[string]any{"body": "When?", "subject": "release_date"}).must(t, 200)
	seq := path(root.body, "writes").([]any)[0].(map[string]any)["sort_key"]
	for i := range 4 {
		who := a
		if i%2 == 0 {
			who = b
		}
		e.invoke(rm, who, "_send_message", map[string]any{"body": fmt.Sprintf("maybe next week (%d)", i), "reply_to": seq}).must(t, 200)
	}
	h, _ := path(e.ctx(rm, rm.token, "only=views").body, "views", "_vocabulary_health").(map[string]any)
	for _, p := range asList(h["patterns"]) {
		if pm := p.(map[string]any); pm["pattern"] == "messages_about_key" && pm["key"] == "_shared.release_date" {
			return
		}
	}
	t.Fatalf("the thread about release_date is not a pattern: %v", h["patterns"])
}

// A view that reads an action's enablement changed when a write its gate
// reads opened it: since_your_last_read names it, though the view reads
// no state entry by path.
func TestSalienceSinceYourLastReadViewOfAnAction(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("sinceact", nil)
	e.do("PUT", "/rooms/sinceact/state", rm.token, map[string]any{"scope": "_shared", "key": "open", "value": false}).must(t, 200)
	e.do("PUT", "/rooms/sinceact/actions", rm.token, map[string]any{"id": "go", "enabled": "state._shared.open == true",
		"writes": []any{map[string]any{"key": "n", "value": 1}}}).must(t, 201)
	e.do("PUT", "/rooms/sinceact/views", rm.token, map[string]any{"id": "go_view", "scope": "_shared", "expr": `actions.go.enabled ? "open" : "closed"`}).must(t, 201)
	tok := e.join(rm, "a")
	e.ctx(rm, tok, "") // the first (enriched) read
	e.ctx(rm, tok, "only=state")
	e.do("PUT", "/rooms/sinceact/state", rm.token, map[string]any{"scope": "_shared", "key": "open", "value": true}).must(t, 200)
	r := e.ctx(rm, tok, "only=state")
	s, _ := attention(r)["since_your_last_read"].(map[string]any)
	if !slices.Contains(strs(s["views_changed"]), "go_view") {
		t.Fatalf("since_your_last_read after the gate opened: %v, want views_changed to name go_view", s)
	}
}

// Salience's log window holds the messages the reader sees: a message
// whose timer has run out, or has not started yet, feeds neither the
// message-to-invocation ratio, nor the patterns, nor new_messages, as it
// is in neither the messages section nor messages.count. The window was
// read once per snapshot from every message up to its seq, so expired
// messages went on feeding it, and a timer that ran out without a write
// (same snapshot) changed nothing.
func TestSalienceWindowFollowsMessageTimers(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("msg-timers", nil)
	salienceConfig(e, rm, map[string]any{"pattern_min": 3})
	a, b := e.join(rm, "a"), e.join(rm, "b")
	e.do("PUT", "/rooms/msg-timers/state", rm.token, map[string]any{"scope": "_shared", "key": "deadline", "value": "friday"}).must(t, 200)
	e.ctx(rm, a, "") // a's first read: its next counts what came since
	e.ctx(rm, b, "")
	const ends, starts = 12, 3
	var writes []any
	for i := range ends { // end 2 s from now
		writes = append(writes, map[string]any{"scope": "_messages", "append": true, "timer": map[string]any{"ms": 2000},
			"value": map[string]any{"kind": "negotiation", "body": fmt.Sprintf("move the deadline? %d", i)}})
	}
	for i := range starts { // start 2 s from now
		writes = append(writes, map[string]any{"scope": "_messages", "append": true, "timer": map[string]any{"ms": 2000, "effect": "enable"},
			"value": map[string]any{"kind": "later", "body": fmt.Sprintf("announcement %d", i)}})
	}
	writes = append(writes, map[string]any{"scope": "_messages", "append": true, "value": map[string]any{"body": "plain"}})
	e.do("PUT", "/rooms/msg-timers/state/batch", rm.token, map[string]any{"writes": writes}).must(t, 200)
	at := time.Now().Add(2 * time.Second)

	health := func(tok string) map[string]any {
		h, _ := path(e.ctx(rm, tok, "only=views").body, "views", "_vocabulary_health").(map[string]any)
		return h
	}
	hasPattern := func(h map[string]any) bool {
		for _, p := range asList(h["patterns"]) {
			if pm, _ := p.(map[string]any); pm["pattern"] == "messages_about_key" && pm["key"] == "_shared.deadline" {
				return true
			}
		}
		return false
	}
	// Before the timers: the 12 negotiation messages and the plain one.
	h := health(b)
	if h["message_to_action_ratio"] != float64(ends+1) || !hasPattern(h) {
		t.Fatalf("before the timers: ratio %v (want %d: messages whose timer has not started are not seen), patterns %v", h["message_to_action_ratio"], ends+1, h["patterns"])
	}
	// Stays: the timers start on the real clock at a known time, and the
	// read right after, with no write since, is what this checks.
	time.Sleep(time.Until(at) + 300*time.Millisecond)
	// After, with no write since (the same snapshot): the plain message
	// and the 3 that started.
	h = health(b)
	if h["message_to_action_ratio"] != float64(starts+1) || hasPattern(h) {
		t.Fatalf("after the timers: ratio %v (want %d: messages whose timer ran out are gone), patterns %v", h["message_to_action_ratio"], starts+1, h["patterns"])
	}
	// A wait's full context counts the reader's messages after its
	// condition was read: the same messages.
	w := e.do("GET", "/rooms/msg-timers/wait?condition=true&context=full", b, nil).must(t, 200)
	if r := path(w.body, "context", "views", "_vocabulary_health", "message_to_action_ratio"); r != float64(starts+1) {
		t.Fatalf("after the timers, a wait's context: ratio %v, want %d", r, starts+1)
	}
	since, _ := attention(e.ctx(rm, a, "only=state"))["since_your_last_read"].(map[string]any)
	if since["new_messages"] != float64(starts+1) {
		t.Fatalf("after the timers, a's new_messages %v, want %d: %v", since["new_messages"], starts+1, since)
	}
}

// Contested claims and blocked work reach _attention by the rules help
// key vocabulary_review states: the same action with the same arguments
// by two agents (a refused one, the same agent twice, and increments
// contest nothing), an entry written directly by two agents, and an item
// whose status says blocked or that names what it waits on (a done one
// does not), in an entry or in a list.
func TestSalienceContestedClaimsAndBlockedWork(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("claims", nil)
	a, b, c := e.join(rm, "a", "_shared"), e.join(rm, "b", "_shared"), e.join(rm, "c")
	e.do("PUT", "/rooms/claims/state", rm.token, map[string]any{"scope": "_shared", "key": "t1", "value": map[string]any{"status": "todo"}}).must(t, 200)
	e.do("PUT", "/rooms/claims/state", rm.token, map[string]any{"scope": "_shared", "key": "board", "value": []any{
		map[string]any{"id": "B-1", "status": "doing", "waiting_on": "legal"}, map[string]any{"id": "B-2", "status": "done", "waiting_on": "legal"},
		map[string]any{"id": "B-3", "status": "todo"}}}).must(t, 200)
	e.do("PUT", "/rooms/claims/actions", rm.token, map[string]any{"id": "claim", "params": map[string]any{"task": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "${params.task}", "merge": map[string]any{"owner": "${self}"}}}}).must(t, 201)
	e.do("PUT", "/rooms/claims/actions", rm.token, map[string]any{"id": "take", "params": map[string]any{"task": map[string]any{"type": "string"}},
		"if":     `state._shared[params.task].?owner.orValue("") == ""`,
		"writes": []any{map[string]any{"key": "${params.task}", "merge": map[string]any{"owner": "${self}"}}}}).must(t, 201)
	e.do("PUT", "/rooms/claims/actions", rm.token, map[string]any{"id": "vote", "params": map[string]any{"task": map[string]any{"type": "string"}},
		"writes": []any{map[string]any{"key": "votes", "increment": 1}}}).must(t, 201)
	invoke := func(tok, action, task string) int {
		return e.do("POST", "/rooms/claims/actions/"+action+"/invoke", tok, map[string]any{"params": map[string]any{"task": task}}).status
	}
	for _, call := range []struct {
		tok, action, task string
	}{{a, "vote", "t1"}, {b, "vote", "t1"}, {a, "claim", "t2"}, {a, "claim", "t2"}, {a, "take", "t3"}, {b, "claim", "t1"}, {c, "claim", "t1"}} {
		invoke(call.tok, call.action, call.task)
	}
	if code := invoke(b, "take", "t3"); code == 200 {
		t.Fatalf("the second take of t3 succeeded")
	}
	e.do("PUT", "/rooms/claims/state", a, map[string]any{"scope": "_shared", "key": "owner_of_t9", "value": "a"}).must(t, 200)
	e.do("PUT", "/rooms/claims/state", b, map[string]any{"scope": "_shared", "key": "owner_of_t9", "value": "b"}).must(t, 200)
	e.do("PUT", "/rooms/claims/state", a, map[string]any{"scope": "_shared", "key": "t5", "value": map[string]any{"status": "Blocked"}}).must(t, 200)

	at := attention(e.ctx(rm, c, ""))
	raw, _ := json.Marshal(at)
	var got []string
	for _, x := range asList(at["contested"]) {
		m, _ := x.(map[string]any)
		got = append(got, fmt.Sprintf("%v %v %v %v", m["action"], path(m, "params", "task"), m["entry"], m["agents"]))
	}
	want := []string{"<nil> <nil> _shared.owner_of_t9 [a b]", "claim t1 <nil> [b c]"}
	if !slices.Equal(got, want) {
		t.Fatalf("contested = %q, want %q: %s", got, want, raw)
	}
	got = nil
	for _, x := range asList(at["blocked"]) {
		got = append(got, fmt.Sprint(path(x.(map[string]any), "entry")))
	}
	if want := []string{"_shared.board[B-1]", "_shared.t5"}; !slices.Equal(got, want) {
		t.Fatalf("blocked = %q, want %q: %s", got, want, raw)
	}
	h, _ := path(e.ctx(rm, c, "only=views").body, "views", "_vocabulary_health").(map[string]any)
	if h["contested_claims"] != float64(2) || h["blocked_items"] != float64(2) {
		t.Fatalf("_vocabulary_health counts: %v", h)
	}
}
