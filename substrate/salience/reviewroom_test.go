package salience_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/reviewroom"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// suggestion is one thing _attention points a reader at, and whether it
// is a planted signal for that reader.
type suggestion struct {
	what string
	true bool
}

// suggestions are what a reader's _attention (as JSON) points at, judged
// against the review room's plants. A suggestion is one element of
// broken_views (a your_broken_views key not among them too),
// stale_actions, low_salience, contested, blocked and overdue_acks, the
// finding, and a "degenerating" assessment. True ones: the builder's
// broken view, for the builder only (for anyone else it is not theirs to
// act on); the stale action; a finding naming the gap key (or, for the
// builder, its own broken view); the contested task; the blocked task.
// The room is not degenerating: its vocabulary is invoked all the time.
// News (since_your_last_read, you_elided) and counts are not suggestions.
func suggestions(reader string, at map[string]any) []suggestion {
	var out []suggestion
	strs := func(k string) []string {
		var l []string
		for _, x := range asList(at[k]) {
			l = append(l, fmt.Sprint(x))
		}
		return l
	}
	broken := map[string]bool{}
	for _, id := range strs("broken_views") {
		broken[id] = true
		out = append(out, suggestion{"broken_views:" + id, id == reviewroom.BrokenView && reader == reviewroom.BrokenViewOwner})
	}
	yours, _ := at["your_broken_views"].(map[string]any)
	for id := range yours {
		if !broken[id] {
			out = append(out, suggestion{"your_broken_views:" + id, id == reviewroom.BrokenView && reader == reviewroom.BrokenViewOwner})
		}
	}
	for _, k := range []string{"stale_actions", "low_salience"} {
		for _, id := range strs(k) {
			out = append(out, suggestion{k + ":" + id, id == reviewroom.StaleAction})
		}
	}
	for _, c := range asList(at["contested"]) {
		raw, _ := json.Marshal(c)
		out = append(out, suggestion{"contested:" + string(raw), strings.Contains(string(raw), `"`+reviewroom.ContestedTask+`"`)})
	}
	for _, b := range asList(at["blocked"]) {
		e, _ := b.(map[string]any)
		out = append(out, suggestion{"blocked:" + fmt.Sprint(e["entry"]), e["entry"] == reviewroom.BlockedTask})
	}
	for _, a := range asList(at["overdue_acks"]) {
		out = append(out, suggestion{fmt.Sprint("overdue_ack:", a), false})
	}
	if f, _ := at["finding"].(string); f != "" {
		gap := strings.Contains(f, reviewroom.GapKey)
		own := reader == reviewroom.BrokenViewOwner && strings.Contains(f, "views fail to evaluate")
		out = append(out, suggestion{"finding:" + f, gap || own})
	}
	if at["vocabulary_health"] == "degenerating" {
		out = append(out, suggestion{"vocabulary_health:degenerating", false})
	}
	return out
}

func asList(v any) []any { l, _ := v.([]any); return l }

// The review room's _attention is worth its tokens: of what it points
// each of the ten agents at, at least 80 % are the room's planted
// signals (the gap, the contested claim, the blocked task, the stale
// action; the builder's own broken view for the builder), and every
// reader is pointed at the gap, the contested claim and the blocked task.
// Precision is measured over the default (lean) read of every agent, one
// suggestion per listed item (see suggestions).
func TestAttentionPrecisionOnTheReviewRoom(t *testing.T) {
	db := pgtest.New(t)
	// No expression budget: the fixture's 2,000 calls in a few seconds
	// spend a room's, which a quiet machine reaches (room_busy at a
	// message in CI), and the budget is not what this test measures.
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Wait: substrate.WaitOptions{Recheck: time.Hour}, Limits: substrate.Limits{RoomCostPerSecond: -1}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	start := time.Now()
	room, err := reviewroom.Build(ctx, svc, reviewroom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built in %v", time.Since(start))

	total, hits, bytes := 0, 0, 0
	for _, id := range reviewroom.AgentIDs {
		env, err := svc.Context(ctx, room.Principals[id], room.ID, substrate.ContextRequest{})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(env.Context.Attention)
		bytes += len(raw)
		var at map[string]any
		_ = json.Unmarshal(raw, &at)
		ss := suggestions(id, at)
		for _, s := range ss {
			total++
			if s.true {
				hits++
			} else {
				t.Logf("%s: noise: %s", id, s.what)
			}
		}
		var has struct{ gap, contest, blocked bool }
		for _, s := range ss {
			has.gap = has.gap || s.true && strings.HasPrefix(s.what, "finding:") && strings.Contains(s.what, reviewroom.GapKey)
			has.contest = has.contest || s.true && strings.HasPrefix(s.what, "contested:")
			has.blocked = has.blocked || s.true && strings.HasPrefix(s.what, "blocked:")
		}
		if id != reviewroom.BrokenViewOwner && !has.gap {
			t.Errorf("%s is not pointed at the room's gap (%s): %s", id, reviewroom.GapKey, raw)
		}
		if !has.contest || !has.blocked {
			t.Errorf("%s is not pointed at the contested claim and the blocked task: %s", id, raw)
		}
	}
	precision := float64(hits) / float64(max(total, 1))
	t.Logf("precision %d/%d = %.2f; _attention %d bytes over %d readers (~%d tokens each)", hits, total, precision, bytes, len(reviewroom.AgentIDs), bytes/4/len(reviewroom.AgentIDs))
	if precision < 0.8 {
		t.Errorf("precision of _attention on the review room is %.2f, want ≥ 0.80", precision)
	}
}
