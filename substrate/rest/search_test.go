package rest_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// GET /rooms/:id/search (issue 31): ranked hits with snippets, filters,
// paging by the offset the result names, and bad input refused with a
// stable code and the route to send instead.
func TestSearchRoute(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("find", nil)
	al := e.join(rm, "al")
	bo := e.join(rm, "bo")
	say := func(tok, body string, extra map[string]any) {
		params := map[string]any{"body": body}
		for k, v := range extra {
			params[k] = v
		}
		e.do("POST", "/rooms/find/actions/_send_message/invoke", tok, map[string]any{"params": params}).must(t, 200)
	}
	say(al, "We decided the deadline is Friday", map[string]any{"kind": "decision"})
	say(bo, "Lunch is at noon", nil)
	say(bo, "Moving the deadline would cost a week", nil)
	e.do("PUT", "/rooms/find/state", rm.token, map[string]any{"scope": "_shared", "key": "release.deadline", "value": "2026-12-04"}).must(t, 200)

	get := func(tok, q string) resp {
		return e.do("GET", "/rooms/find/search?"+q, tok, nil)
	}
	r := get(al, "q=deadline").must(t, 200)
	hits, _ := r.body["hits"].([]any)
	if len(hits) != 3 {
		t.Fatalf("deadline: want 3 hits (two messages, one key), got %d: %s", len(hits), r.raw)
	}
	first := hits[0].(map[string]any)
	if first["kind"] != "entry" || first["key"] != "release.deadline" {
		t.Errorf("the key named deadline ranks first (keys weigh most): %v", first)
	}
	if !strings.Contains(r.raw, "«deadline»") {
		t.Errorf("snippets mark the match: %s", r.raw)
	}
	// Filters: sender, kind, scope.
	for q, want := range map[string]int{
		"q=deadline&from=bo":                    1,
		"q=deadline&kind=decision":              1,
		"q=deadline&scope=_shared":              1,
		"q=deadline&scope=_messages":            2,
		"q=lunch":                               1,
		"q=" + url.QueryEscape(`"cost a week"`): 1,
		"q=deadline+-friday&scope=_messages":    1,
	} {
		r := get(al, q).must(t, 200)
		if n := len(r.body["hits"].([]any)); n != want {
			t.Errorf("%s: %d hits, want %d: %s", q, n, want, r.raw)
		}
	}
	// Paging: one hit a page, each page naming the next route.
	seen := map[string]bool{}
	q := "q=deadline&limit=1"
	for i := 0; i < 5 && q != ""; i++ {
		r := get(al, q).must(t, 200)
		for _, h := range r.body["hits"].([]any) {
			seen[fmt.Sprint(h.(map[string]any)["snippet"])] = true
		}
		more := r.str("more")
		if more == "" {
			q = ""
			break
		}
		if !strings.HasPrefix(more, "GET /rooms/find/search?") {
			t.Fatalf("more is not a route: %q", more)
		}
		_, after, _ := strings.Cut(more, "?")
		q = strings.ReplaceAll(after, "deadline", "deadline")
	}
	if len(seen) != 3 || q != "" {
		t.Errorf("paging saw %d distinct hits (want 3) and ended=%v", len(seen), q == "")
	}
	// Bad input: 400 with a stable code and what to send.
	for _, bad := range []string{"", "q=", "q=x&limit=99", "q=x&offset=-1", "q=x&after=yesterday", "q=x&thread=abc", "q=x&scope=bad%20scope"} {
		r := get(al, bad)
		if r.status != 400 || r.str("error") != "invalid_field" || r.str("hint") == "" {
			t.Errorf("%q: %d %s", bad, r.status, r.raw)
		}
	}
	// "self" is an agent's own scope: the room token has none.
	if r := get(rm.token, "q=x&scope=self"); r.status != 400 || r.str("error") != "invalid_field" {
		t.Errorf("scope self with the room token: %d %s", r.status, r.raw)
	}
	if r := get(al, "q=x&scope=self"); r.status != 200 {
		t.Errorf("scope self for an agent: %d %s", r.status, r.raw)
	}
	// A scope the reader may not read is refused, not searched empty.
	if r := get(al, "q=x&scope=bo"); r.status != 403 {
		t.Errorf("al searching bo's scope: %d %s", r.status, r.raw)
	}
}
