package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// The TypeScript SDK client completes the OAuth flow and uses the tools.
// CI installs @modelcontextprotocol/sdk next to Node 22 and sets
// SYNC_NODE_MODULES to that node_modules directory.
func TestEndToEndWithTypeScriptClient(t *testing.T) {
	node, modules := os.Getenv("SYNC_NODE"), os.Getenv("SYNC_NODE_MODULES")
	if node == "" || modules == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SYNC_NODE and SYNC_NODE_MODULES must be set in CI (.ci/run installs them)")
		}
		t.Skip("set SYNC_NODE and SYNC_NODE_MODULES (with @modelcontextprotocol/sdk) to run the TypeScript client")
	}
	srv := startServer(t, pgtest.New(t))
	alice := signup(t, srv, "alice")
	helper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, err := alice.Consent(r.Context(), r.URL.Query().Get("url"), nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"code": res.Code})
	}))
	defer helper.Close()

	// ESM resolves packages next to the script: run it from a directory
	// whose node_modules is the installed one.
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/ts-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, filepath.Join(dir, "client.mjs"), srv.base+"/mcp", helper.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("TypeScript client failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("client output: %s", out)
	}
	if got["note"] != "from typescript" || got["view"] != true || got["agent"] != "alice:ts-sdk-test" || got["tools"] != float64(17) || got["refresh"] != true {
		t.Fatalf("TypeScript client saw %v", got)
	}
}
