package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// syncd runs every feature it documents: the loom (its route, its read
// rule) and adaptive salience (the envelope's _vocabulary_health view and
// _attention). Features were once registered by blank imports, and one
// left out dropped salience with nothing to say so; they are now listed
// in features(), and this test reads them through the running server.
func TestSyncdRunsEveryFeature(t *testing.T) {
	var names []string
	for _, f := range features() {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"loom", "salience"}) {
		t.Fatalf("syncd's features are %v, want the loom and salience", names)
	}
	base, stop := start(t, testConfig(t, "-database-url", pgtest.URL(t)))
	defer stop()
	code, room := call(t, "POST", base+"/rooms", "", `{"id":"featured"}`)
	if code != 201 {
		t.Fatalf("create room %d %v", code, room)
	}
	tok := room["token"].(string)
	code, env := call(t, "GET", base+"/rooms/featured/context?depth=full", tok, "")
	if code != 200 {
		t.Fatalf("context %d %v", code, env)
	}
	views, _ := env["views"].(map[string]any)
	if views["_vocabulary_health"] == nil {
		raw, _ := json.Marshal(env)
		t.Fatalf("syncd's envelope carries no salience (no _vocabulary_health view): %.400s", raw)
	}
	body, _ := json.Marshal(map[string]string{"commands": `→ new tree "t" "root words"` + "\n→ view 1"})
	code, res := call(t, "POST", base+"/rooms/featured/loom", tok, string(body))
	if text, _ := res["text"].(string); code != 200 || !strings.Contains(text, "root words") {
		t.Fatalf("syncd's loom: %d %v", code, res)
	}
}
