package mcp

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the tool schema goldens in testdata/")

// Every tool's definition (name, title, description, schema, annotations)
// is snapshotted, so a changed schema shows up as a reviewed diff. Run
// go test ./mcp -run TestToolSchemas -update after an intended change.
func TestToolSchemas(t *testing.T) {
	total := 0
	for _, tl := range tools() {
		got, err := json.MarshalIndent(tl.def, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		// Measured as a client shows it to a model: compact, without
		// HTML escapes.
		var compact bytes.Buffer
		enc := json.NewEncoder(&compact)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(tl.def); err != nil {
			t.Fatal(err)
		}
		total += compact.Len() - 1
		path := filepath.Join("testdata", tl.def.Name+".json")
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: no golden (run with -update): %v", tl.def.Name, err)
		}
		if string(want) != string(got) {
			t.Errorf("%s schema changed; review and run with -update:\n--- golden\n%s\n--- now\n%s", tl.def.Name, want, got)
		}
		if tl.def.Description == "" || tl.def.Title == "" || tl.def.Annotations == nil || tl.def.InputSchema == nil {
			t.Errorf("%s lacks a title, description, schema or annotations", tl.def.Name)
		}
	}
	// A connector's tool list is paid for in every conversation: keep it
	// within 3,000 tokens (issue 26.6). The issue measured 14,040 bytes as
	// ~3,450 tokens: about 4.07 bytes a token.
	tokens := total * 100 / 407
	t.Logf("tools/list: %d tools, %d bytes, ~%d tokens", len(tools()), total, tokens)
	if tokens > 3000 {
		t.Errorf("tool list is ~%d tokens, over the 3,000 budget", tokens)
	}
}
