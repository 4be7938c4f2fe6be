package rest_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// When a scope does not fit the budget, the keys it keeps are the salient
// ones: here the oldest key, which a view reads, survives the cut ahead
// of newer keys nothing reads, and the cut says how to read the rest.
func TestBudgetKeepsWatchedKeys(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("big", nil)
	pad := strings.Repeat("x", 500)
	for batch := range 3 { // three revisions: the oldest keys come first
		var writes []any
		for i := range 15 {
			writes = append(writes, map[string]any{"scope": "_shared", "key": fmt.Sprintf("key_%03d", batch*15+i), "value": pad})
		}
		e.do("PUT", "/rooms/big/state/batch", rm.token, map[string]any{"writes": writes}).must(t, 200)
	}
	e.do("PUT", "/rooms/big/views", rm.token, map[string]any{"id": "first", "scope": "_shared", "expr": "size(state._shared.key_000)"}).must(t, 201)

	ctx := e.do("GET", "/rooms/big/context?max_bytes=8000", rm.token, nil).must(t, 200)
	shared := ctx.body["state"].(map[string]any)["_shared"].(map[string]any)
	if _, ok := shared["_summary"]; !ok {
		t.Fatalf("the scope was not summarised (%d keys shown)", len(shared))
	}
	if _, ok := shared["key_000"]; !ok {
		t.Errorf("the key a view reads was cut; kept %d keys", len(shared)-1)
	}
	if _, ok := shared["key_001"]; ok {
		t.Errorf("an old key nothing reads was kept ahead of newer ones")
	}
	cuts := ctx.body["_context"].(map[string]any)["budget"].(map[string]any)["cuts"].([]any)
	if exp := cuts[0].(map[string]any)["expand"]; exp != "GET /rooms/big/context?only=state._shared" {
		t.Errorf("cut's expand = %v", exp)
	}
}

// Over budget, the messages kept are the newest and those addressed to
// the reader, however old.
func TestBudgetKeepsMessagesToTheReader(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("inbox", nil)
	alice := e.join(rm, "alice")
	bob := e.join(rm, "bob")
	e.invoke(rm, bob, "_send_message", map[string]any{"body": "for alice", "to": "alice"}).must(t, 200)
	for i := range 12 {
		e.invoke(rm, bob, "_send_message", map[string]any{"body": fmt.Sprintf("chatter %d %s", i, strings.Repeat("y", 400))}).must(t, 200)
	}
	ctx := e.do("GET", "/rooms/inbox/context?only=messages&max_bytes=3000", alice, nil).must(t, 200)
	recent := ctx.body["messages"].(map[string]any)["recent"].([]any)
	if len(recent) >= 13 {
		t.Fatalf("messages were not cut: %d", len(recent))
	}
	if first := recent[0].(map[string]any); first["body"] != "for alice" {
		t.Errorf("the message to the reader was cut; first kept: %v", first["body"])
	}
}
