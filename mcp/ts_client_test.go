package mcp_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// The TypeScript SDK client completes the OAuth flow (dynamic
// registration) and uses the tools. CI installs @modelcontextprotocol/sdk
// next to Node 22 and sets SYNC_NODE_MODULES to that node_modules directory.
func TestEndToEndWithTypeScriptClient(t *testing.T) {
	// Access tokens last 3 s here and the client outlives its first one:
	// refresh: true means the SDK really refreshed and got through (it
	// used to mean only that a refresh token was saved).
	srv := startServerOpts(t, pgtest.New(t), serverOpts{accessTTL: 3 * time.Second})
	t.Setenv("SYNC_TS_OUTLIVE_MS", "4000")
	got := runTSClient(t, srv, "")
	if got["note"] != "from typescript" || got["view"] != true || got["agent"] != "alice:ts-sdk-test" || got["tools"] != float64(19) || got["refresh"] != true {
		t.Fatalf("TypeScript client saw %v", got)
	}
	// The SDK validated each of these results against its tool's output
	// schema (it throws on a mismatch): the schemas' narrowed types and
	// left-out fields are ones it accepts.
	want := "sync_create_room sync_delete_action sync_delete_view sync_disembody sync_embody sync_eval_cel sync_help sync_invoke_action sync_lobby sync_read_context sync_register_action sync_register_view sync_search sync_send_message sync_wait"
	if called := fmt.Sprint(got["called"]); called != "["+want+"]" {
		t.Fatalf("TypeScript client called %s, want [%s]", called, want)
	}
}

// The same client identifying itself with a client ID metadata document, as
// Claude.ai and Claude Code do once the server advertises support. Until
// the metadata said client_id_metadata_document_supported, the client fell
// back to dynamic registration.
func TestTypeScriptClientWithMetadataDocument(t *testing.T) {
	var docURL string
	docs := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=600")
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": docURL, "client_name": "TS SDK via metadata document",
			"redirect_uris": []string{"http://localhost:1/callback"}, "grant_types": []string{"authorization_code", "refresh_token"},
			"response_types": []string{"code"}, "token_endpoint_auth_method": "none"})
	}))
	defer docs.Close()
	docURL = docs.URL + "/oauth/client.json"
	roots := x509.NewCertPool()
	roots.AddCert(docs.Certificate())
	srv := startServerOpts(t, pgtest.New(t), serverOpts{cimdRoots: roots})

	got := runTSClient(t, srv, docURL)
	if got["client_id"] != docURL || got["note"] != "from typescript" || got["refresh"] != false {
		t.Fatalf("TypeScript client with a metadata document saw %v", got)
	}
	var clients, named int
	_ = srv.db.QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE id = $1 AND name = 'TS SDK via metadata document') FROM smcp_oauth_clients`, docURL).Scan(&clients, &named)
	if clients != 1 || named != 1 {
		t.Fatalf("clients after a metadata-document connection: %d (%d by the document); want only the document's", clients, named)
	}
}

// runTSClient signs alice up, runs testdata/ts-client.mjs against srv (with
// a client metadata URL when metadataURL is set) and returns the JSON line
// it prints last.
func runTSClient(t *testing.T, srv *server, metadataURL string) map[string]any {
	t.Helper()
	args := []string{}
	if metadataURL != "" {
		args = append(args, metadataURL)
	}
	return runTSScript(t, signup(t, srv, "alice"), "ts-client.mjs", srv.base+"/mcp", args...)
}

// runTSScript runs a testdata script as `node <script> <mcpURL> <consent
// helper URL> [args…]`, alice consenting, and returns the JSON line it
// prints last.
func runTSScript(t *testing.T, alice *person, script, mcpURL string, args ...string) map[string]any {
	t.Helper()
	node, modules := os.Getenv("SYNC_NODE"), os.Getenv("SYNC_NODE_MODULES")
	if node == "" || modules == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SYNC_NODE and SYNC_NODE_MODULES must be set in CI (.ci/run installs them)")
		}
		t.Skip("set SYNC_NODE and SYNC_NODE_MODULES (with @modelcontextprotocol/sdk) to run the TypeScript client")
	}
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
	scripts, _ := filepath.Glob("testdata/*.mjs")
	for _, f := range scripts {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, append([]string{filepath.Join(dir, script), mcpURL, helper.URL}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("TypeScript client failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var got map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("client output: %s", out)
	}
	return got
}

// Every kind of tool error reaches the model through the TypeScript SDK
// client, the library most hosts are built on: an isError result whose
// text begins with the error's code and says what was wrong and what to
// call next. Errors used to carry structured content shaped unlike the
// tools' output schemas, and the SDK's callTool threw -32602 ("Structured
// content does not match the tool's output schema") instead. The client
// connects to /mcp/ (with the slash), which is served as /mcp is, and
// reads the server's icon and website.
func TestTypeScriptClientSeesToolErrors(t *testing.T) {
	// 40 calls at once against a burst of 20: some are rate limited.
	stack := httpmw.New(httpmw.Options{RatePerSecond: 2, RateBurst: 20})
	srv := startServerOpts(t, pgtest.New(t), serverOpts{http: stack})
	got := runTSScript(t, signup(t, srv, "alice"), "ts-errors.mjs", srv.base+"/mcp/")
	errs, _ := got["errors"].(map[string]any)
	for kind, want := range map[string][]string{
		"bad_arguments": {"error: invalid_field", "message: ", "has no argument", "timeout", "hint: ", "did you mean", "timeout_ms", "next: "},
		"not_found":     {"error: action_not_found", "message: ", "nope", "claim", "_session: "},
		"precondition":  {"error: precondition_failed", "message: ", "params.n > 5", "hint: ", "read: "},
		"scope":         {"error: room_not_in_scope", "message: ", "elsewhere", "sync_create_room"},
		"rate_limit":    {"error: rate_limited", "message: ", "hint: retry after", "retry_after_ms: "},
	} {
		r, _ := errs[kind].(map[string]any)
		text, _ := r["text"].(string)
		if r["threw"] != nil || r["isError"] != true || r["structured"] != nil {
			t.Errorf("%s: the model did not get an error result: %v", kind, r)
			continue
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the text lacks %q:\n%s", kind, w, text)
			}
		}
		if !strings.HasPrefix(text, want[0]+"\n") {
			t.Errorf("%s: the text does not begin with its code:\n%s", kind, text)
		}
	}
	if got["burst_threw"] != float64(0) || got["burst_ok"].(float64) < 5 {
		t.Errorf("40 calls at once: %v succeeded, %v threw (want some through and none thrown)", got["burst_ok"], got["burst_threw"])
	}
	info, _ := got["serverInfo"].(map[string]any)
	icons, _ := info["icons"].([]any)
	if info["websiteUrl"] != srv.base+"/" || len(icons) != 1 || icons[0].(map[string]any)["src"] != srv.base+"/icon.png" {
		t.Errorf("serverInfo without the icon and website: %v", info)
	}
}
