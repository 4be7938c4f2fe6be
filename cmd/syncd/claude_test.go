package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/mcp/claudetest"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// The real Claude Code CLI (SYNC_CLAUDE: its binary, which .ci/run
// installs pinned from npm) against syncd, its model replaced by a
// scripted Messages API (mcp/claudetest): no network.

// claudeBin is the Claude Code binary, or a skip outside CI (a failure in
// CI) when there is none.
func claudeBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SYNC_CLAUDE")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("SYNC_CLAUDE is not set; .ci/run installs @anthropic-ai/claude-code and sets it")
		}
		t.Skip("SYNC_CLAUDE is not set (the claude binary of npm @anthropic-ai/claude-code)")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("SYNC_CLAUDE: %v", err)
	}
	return bin
}

// claudeCode is one Claude Code installation: its own HOME, working
// directory and scripted model.
type claudeCode struct {
	t     *testing.T
	bin   string
	home  string
	dir   string
	model *claudetest.Server
	env   []string
	// server is the MCP server's name in Claude Code (default sync, as
	// claude mcp add names it).
	server string
}

var authorizeRE = regexp.MustCompile(`https?://\S+/authorize\?\S+`)

const claudeKey = "sk-ant-api03-scripted-model-for-tests-0123456789abcdefghij"

func newClaudeCode(t *testing.T) *claudeCode {
	t.Helper()
	c := &claudeCode{t: t, bin: claudeBin(t), home: t.TempDir(), dir: t.TempDir(), model: claudetest.New(t), server: "sync"}
	// Claude Code asks on first run about onboarding, trusting the working
	// directory and using an API key; these answer it beforehand.
	seed, _ := json.Marshal(map[string]any{
		"hasCompletedOnboarding": true,
		"projects":               map[string]any{c.dir: map[string]any{"hasTrustDialogAccepted": true}},
		"customApiKeyResponses":  map[string]any{"approved": []string{claudeKey[len(claudeKey)-20:]}},
	})
	if err := os.WriteFile(filepath.Join(c.home, ".claude.json"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	// No browser of the machine's: the sign-in URL is read from what
	// Claude Code prints and handed to the test's Chromium.
	browser := filepath.Join(c.home, "browser")
	if err := os.WriteFile(browser, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("PATH")
	if node := os.Getenv("SYNC_NODE"); node != "" {
		path = filepath.Dir(node) + ":" + path
	}
	c.env = []string{"HOME=" + c.home, "PATH=" + path, "BROWSER=" + browser, "TERM=xterm-256color",
		"ANTHROPIC_BASE_URL=" + c.model.URL, "ANTHROPIC_API_KEY=" + claudeKey,
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1"}
	return c
}

func (c *claudeCode) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir, cmd.Env = c.dir, c.env
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a claude command to its end and returns its output.
func (c *claudeCode) run(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.cmd(ctx, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("claude %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// signIn runs `claude mcp login sync` (Claude Code's own OAuth client:
// discovery, registration or a metadata document, PKCE, its loopback
// callback) in a terminal of its own (tmux: it refuses to sign in without
// one), hands the authorization URL it prints to the browser (signed in
// already), ticks new rooms on the consent page and allows.
func (c *claudeCode) signIn(browser context.Context) {
	c.t.Helper()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		if os.Getenv("CI") == "true" {
			c.t.Fatal("tmux is not installed; .ci/run installs it")
		}
		c.t.Skip("tmux is not installed (apt-get install tmux)")
	}
	rc, logf := filepath.Join(c.home, "login-rc"), filepath.Join(c.home, "login-out")
	script := filepath.Join(c.home, "login")
	var sh strings.Builder
	sh.WriteString("#!/bin/sh\ncd '" + c.dir + "'\n")
	for _, e := range c.env {
		k, v, _ := strings.Cut(e, "=")
		sh.WriteString("export " + k + "='" + v + "'\n")
	}
	sh.WriteString("{ '" + c.bin + "' mcp login '" + c.server + "'; echo $? > '" + rc + ".new'; } 2>&1 | tee '" + logf + "'\nmv '" + rc + ".new' '" + rc + "'\n")
	if err := os.WriteFile(script, []byte(sh.String()), 0o755); err != nil {
		c.t.Fatal(err)
	}
	sock := filepath.Join(c.home, "tmux.sock")
	if out, err := exec.Command(tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50", script).CombinedOutput(); err != nil {
		c.t.Fatalf("tmux: %v\n%s", err, out)
	}
	c.t.Cleanup(func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() })
	output := func() string { b, _ := os.ReadFile(logf); return string(b) }
	ended := func() bool { _, err := os.Stat(rc); return err == nil }
	// It prints the URL as well as opening a browser.
	var authURL string
	pgtest.Eventually(c.t, 2*time.Minute, func() bool {
		authURL = authorizeRE.FindString(output())
		return authURL != "" || ended()
	}, "claude mcp login to open a browser:\n%s", func() any { return output() })
	if authURL == "" {
		c.t.Fatalf("claude mcp login ended before opening a browser:\n%s", output())
	}
	c.t.Logf("claude opened %s", authURL)
	// A server refusing the client shows an error page, not the consent:
	// a minute, not the browser's whole budget, then what the page said.
	cctx, cancelConsent := context.WithTimeout(browser, time.Minute)
	err = chromedp.Do(cctx, chromedp.Navigate(authURL), chromedp.WaitVisible(chromedp.CSS("#allow")))
	cancelConsent()
	if err != nil {
		page, _ := chromedp.Run(browser, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		c.t.Fatalf("no consent page (%v); the page said:\n%s", err, page)
	}
	if err == nil {
		_, err = chromedp.Run(browser, chromedp.Evaluate[bool](`document.getElementById("create_rooms").checked = true`))
	}
	if err == nil {
		err = chromedp.Do(browser, chromedp.Click(chromedp.CSS("#allow")))
	}
	if err != nil {
		c.t.Fatalf("consent: %v\n%s", err, output())
	}
	var code string
	pgtest.Eventually(c.t, 2*time.Minute, func() bool {
		b, err := os.ReadFile(rc)
		code = string(b)
		return err == nil && strings.HasSuffix(code, "\n")
	}, "claude mcp login to finish:\n%s", func() any { return output() })
	if strings.TrimSpace(code) != "0" {
		c.t.Fatalf("claude mcp login failed:\n%s", output())
	}
	c.t.Logf("claude mcp login: %s", strings.TrimSpace(output()))
}

// session runs one headless conversation (`claude -p`) with the script
// and returns the tool results of it that reached the model.
func (c *claudeCode) session(script ...claudetest.Step) []claudetest.ToolResult {
	c.t.Helper()
	before := len(c.model.ToolResults())
	c.model.SetScript(script...)
	c.run("-p", "Work in sync.", "--allowedTools", "mcp__sync", "ToolSearch", "--output-format", "stream-json", "--verbose")
	return c.model.ToolResults()[before:]
}

// refusingProxy is the address of a proxy on loopback that refuses every
// connection (a port just closed).
func refusingProxy(t *testing.T) string {
	t.Helper()
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	return "http://" + dead.Addr().String()
}

// claudeServer starts syncd (open sign-up, cimd as given) with alice
// signed up in a headless Chromium, and Claude Code with the server added.
// restart stops the server and starts it again on the same port and
// database, as an operator's restart would.
func claudeServer(t *testing.T, cimd string) (browser context.Context, public string, cc *claudeCode, restart func()) {
	t.Helper()
	cc = newClaudeCode(t)
	dbURL := pgtest.URL(t)
	if err := run(context.Background(), "migrate", testConfig(t, "-database-url", dbURL), nil); err != nil {
		t.Fatal(err)
	}
	// Metadata documents are fetched through a proxy on loopback that
	// refuses every connection: no test sends traffic past this machine,
	// and claude.ai's document is then taken from the built-in copy.
	deadProxy := refusingProxy(t)
	mk := func(port string) *config {
		return testConfig(t, "-addr", "127.0.0.1:"+port, "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open",
			"-public-url", "http://localhost:"+port, "-cimd", cimd, "-outbound-proxy", deadProxy)
	}
	_, stop, ports := startOnFreePorts(t, 1, func(ports []string) *config { return mk(ports[0]) })
	t.Cleanup(func() { stop() })
	restart = func() {
		stop()
		_, again, err := startErr(t, mk(ports[0]))
		if err != nil {
			t.Fatalf("restart on port %s: %v", ports[0], err)
		}
		stop = again
	}
	public = "http://localhost:" + ports[0]
	browser = oauthtest.Chromium(t, 4*time.Minute)
	aliceSignsUp(t, browser, public)
	cc.run("mcp", "add", "--transport", "http", "sync", public+"/mcp")
	return browser, public, cc, restart
}

// expireTokens sets every stored MCP access token's expiry in the past, so
// that Claude Code refreshes before its next call.
func (c *claudeCode) expireTokens() {
	c.t.Helper()
	path := filepath.Join(c.home, ".claude", ".credentials.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatalf("Claude Code's credentials: %v", err)
	}
	var creds map[string]any
	if err := json.Unmarshal(raw, &creds); err != nil {
		c.t.Fatal(err)
	}
	servers, _ := creds["mcpOAuth"].(map[string]any)
	if len(servers) == 0 {
		c.t.Fatalf("no MCP credentials stored: %s", raw)
	}
	for _, v := range servers {
		v.(map[string]any)["expiresAt"] = time.Now().Add(-time.Hour).UnixMilli()
	}
	raw, _ = json.Marshal(creds)
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// accessToken is the access token Claude Code holds for sync.
func (c *claudeCode) accessToken() string {
	c.t.Helper()
	raw, _ := os.ReadFile(filepath.Join(c.home, ".claude", ".credentials.json"))
	var creds struct {
		MCPOAuth map[string]struct{ AccessToken string } `json:"mcpOAuth"`
	}
	_ = json.Unmarshal(raw, &creds)
	for _, v := range creds.MCPOAuth {
		return v.AccessToken
	}
	c.t.Fatalf("no MCP access token stored: %s", raw)
	return ""
}

func call1(name string, input map[string]any) claudetest.Step {
	return claudetest.Step{Calls: []claudetest.Call{{Name: "mcp__sync__" + name, Input: input}}}
}

// checkResults asserts what reached the model: structured content (JSON)
// for a success, is_error with the error's code for a failure, nothing
// persisted to a file, each result inside the inline limit.
func checkResults(t *testing.T, res []claudetest.ToolResult, wantErr map[string]string) (total int) {
	t.Helper()
	for _, r := range res {
		total += len(r.Text)
		name := strings.TrimPrefix(r.Call.Name, "mcp__sync__")
		t.Logf("step %d %s error=%v %d chars: %.200s", r.Step, name, r.IsError, len(r.Text), r.Text)
		if strings.Contains(r.Text, "<persisted-output>") || strings.Contains(r.Text, "exceeds maximum allowed tokens") {
			t.Errorf("step %d %s: the result was persisted to a file, not shown: %.300s", r.Step, name, r.Text)
		}
		// Claude Code 2.1.328 persists a result of about 48,000
		// characters or more; sync's budgets (32,000 bytes by default,
		// max_bytes at most 40,000 over MCP, the text rendering a little
		// longer) keep every result under it.
		if len(r.Text) > 45000 {
			t.Errorf("step %d %s: %d characters, past the result budget", r.Step, name, len(r.Text))
		}
		if r.Call.Name == "ToolSearch" {
			continue
		}
		key := fmt.Sprintf("%d", r.Step)
		if code, ok := wantErr[key]; ok {
			if !r.IsError || !strings.Contains(r.Text, code) {
				t.Errorf("step %d %s: want an error %s, got is_error=%v %.300s", r.Step, name, code, r.IsError, r.Text)
			}
			continue
		}
		var out map[string]any
		if r.IsError || json.Unmarshal([]byte(r.Text), &out) != nil {
			t.Errorf("step %d %s: want structured content, got is_error=%v %.300s", r.Step, name, r.IsError, r.Text)
		}
	}
	return total
}

var allTools = "select:" + strings.Join([]string{"mcp__sync__sync_lobby", "mcp__sync__sync_create_room", "mcp__sync__sync_embody",
	"mcp__sync__sync_read_context", "mcp__sync__sync_register_action", "mcp__sync__sync_invoke_action", "mcp__sync__sync_wait",
	"mcp__sync__sync_search", "mcp__sync__sync_send_message", "mcp__sync__sync_loom", "mcp__sync__sync_share_room"}, ",")

// A scripted session through the real Claude Code, what reached the model
// at each step; then a refresh and a restart between sessions.
func TestClaudeCodeSession(t *testing.T) {
	browser, public, cc, restart := claudeServer(t, "off")
	cc.signIn(browser)
	if out := cc.run("mcp", "list"); !strings.Contains(out, "Connected") {
		t.Fatalf("claude mcp list after the sign-in:\n%s", out)
	}
	bob := oauthtest.SignUp(t, public, "bob", "")
	bobTok := bob.Token(t, "Bob's client", map[string]string{oauthtest.SharedRooms: "write"})

	big := strings.Repeat("a long note about the release plan ", 140) // ~5,000 characters
	var fill []claudetest.Call
	for i := range 12 {
		fill = append(fill, claudetest.Call{Name: "mcp__sync__sync_invoke_action", Input: map[string]any{"action": "note", "params": map[string]any{"key": fmt.Sprintf("n%02d", i), "text": big}}})
	}
	script := []claudetest.Step{
		{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}},
		call1("sync_lobby", nil),                                    // 1
		call1("sync_create_room", map[string]any{"room": "plans"}),  // 2
		call1("sync_read_context", map[string]any{"room": "plans"}), // 3 observe
		call1("sync_embody", map[string]any{"room": "plans"}),       // 4
		call1("sync_register_action", map[string]any{"id": "note", "params": map[string]any{"key": map[string]any{"type": "string"}, "text": map[string]any{"type": "string"}},
			"writes": []any{map[string]any{"scope": "_shared", "key": "notes.${params.key}", "value": "${params.text}"}}}), // 5
		{Calls: fill}, // 6: a big room
		call1("sync_read_context", map[string]any{}), // 7: read it
		call1("sync_register_action", map[string]any{"id": "ring", "writes": []any{map[string]any{"scope": "_shared", "key": "rung", "value": true}}}), // 8
		call1("sync_share_room", map[string]any{"room": "plans", "username": "bob"}),                                                                   // 9
		call1("sync_wait", map[string]any{"condition": "has(state._shared.rung)", "timeout_ms": 40000}),                                                // 10: bob rings
		call1("sync_invoke_action", map[string]any{"action": "nope"}),                                                                                  // 11: not found
		call1("sync_read_context", map[string]any{"depth": "bogus"}),                                                                                   // 12: invalid field
		call1("sync_wait", map[string]any{"condition": "state._shared.(((", "timeout_ms": 1000}),                                                       // 13: bad CEL
		call1("sync_embody", map[string]any{"room": "nowhere"}),                                                                                        // 14: no such room
		call1("sync_search", map[string]any{"q": "release plan"}),                                                                                      // 15
		call1("sync_send_message", map[string]any{"body": "Please confirm the plan", "ack": true, "to": "bob:bob-s-client"}),                           // 16
		call1("sync_loom", map[string]any{"commands": "→ new tree \"plan\" \"Once upon a release\"\n→ view 1"}),                                        // 17
		call1("sync_read_context", map[string]any{"max_bytes": 40000}),                                                                                 // 18: the largest result
		call1("sync_wait", map[string]any{"condition": `state._acks.exists(k, size(state._acks[k].acked) > 0)`, "timeout_ms": 40000}),                  // 19: bob acknowledges and replies
		call1("sync_read_context", map[string]any{"only": "messages"}),                                                                                 // 20: the reply
		{Text: "All done."},
	}
	// Bob rings once the model has asked for the wait, and acknowledges
	// and answers its message once it waits for that: before or after
	// syncd sees the wait, it must end satisfied, not time out.
	rung, acked, ended := make(chan error, 1), make(chan error, 1), make(chan struct{})
	asked := func(step int) bool {
		for _, r := range cc.model.Requests() {
			if r.Main && r.Step == step {
				return true
			}
		}
		return false
	}
	go func() {
		for _, c := range []struct {
			step int
			out  chan error
			do   func() error
		}{
			{10, rung, func() error {
				return asBob(public, bobTok["access_token"].(string), tool{"sync_invoke_action", map[string]any{"action": "ring"}})
			}},
			{19, acked, func() error {
				seq, err := sentSeq(cc.model.ToolResults(), 16)
				if err != nil {
					return err
				}
				return asBob(public, bobTok["access_token"].(string),
					tool{"sync_invoke_action", map[string]any{"action": "_ack", "params": map[string]any{"seq": seq}}},
					tool{"sync_send_message", map[string]any{"body": "Confirmed: the plan stands", "reply_to": seq}})
			}},
		} {
			for !asked(c.step) {
				select {
				case <-ended:
					c.out <- fmt.Errorf("the model never asked for step %d", c.step)
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			c.out <- c.do()
		}
	}()
	res := cc.session(script...)
	close(ended)
	if err := <-rung; err != nil {
		t.Fatalf("bob's ring: %v", err)
	}
	if err := <-acked; err != nil {
		t.Fatalf("bob's acknowledgement and reply: %v", err)
	}
	total := checkResults(t, res, map[string]string{"11": "action_not_found", "12": "invalid_field", "13": "cel_error", "14": "room_not_in_scope"})
	t.Logf("the session's %d tool results: %d characters", len(res), total)
	// A read at the default budget fits it; the big room was cut, not
	// handed over whole.
	for _, r := range res {
		if r.Step == 10 && !strings.Contains(r.Text, `"triggered":true`) {
			t.Errorf("the wait bob's ring satisfies did not end triggered: %.300s", r.Text)
		}
		if r.Step == 19 && !strings.Contains(r.Text, `"triggered":true`) {
			t.Errorf("the wait bob's acknowledgement satisfies did not end triggered: %.300s", r.Text)
		}
		if r.Step == 20 && (!strings.Contains(r.Text, "Confirmed: the plan stands") || !strings.Contains(r.Text, `"acked_by":["bob`)) {
			t.Errorf("the model's read after bob's acknowledgement shows neither his reply nor his receipt: %.600s", r.Text)
		}
		if r.Step == 7 && (len(r.Text) > 32000 || !strings.Contains(r.Text, `"_truncated":true`)) {
			t.Errorf("reading the big room at the default budget: %d characters, cut: %v", len(r.Text), strings.Contains(r.Text, `"_truncated":true`))
		}
	}

	// A refresh mid-session: the next call works.
	cc.expireTokens()
	before := cc.accessToken()
	res = cc.session(claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}}, call1("sync_lobby", nil), claudetest.Step{Text: "ok"})
	if checkResults(t, res, nil); len(res) != 2 {
		t.Fatalf("want the tool search and one sync call to reach the model, got %+v", res)
	}
	if cc.accessToken() == before {
		t.Error("Claude Code did not refresh an expired access token")
	}
	// A restart: the next call works.
	restart()
	res = cc.session(claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}}, call1("sync_read_context", map[string]any{"room": "plans", "only": "state"}), claudetest.Step{Text: "ok"})
	if checkResults(t, res, nil); len(res) != 2 {
		t.Fatalf("want the tool search and one sync call to reach the model, got %+v", res)
	}

	// The person revokes the grant on their account page: Claude Code
	// loses the tools (the model is not told why) and its list says the
	// server needs a sign-in again.
	if err := chromedp.Do(browser,
		chromedp.Navigate(public+"/account"),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/account/revoke"] button`)),
		chromedp.Click(chromedp.CSS(`form[action="/account/revoke"] button`)),
		chromedp.WaitNotPresent(chromedp.CSS(`form[action="/account/revoke"]`)),
	); err != nil {
		t.Fatalf("revoke on /account: %v", err)
	}
	res = cc.session(claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}}, call1("sync_lobby", nil), claudetest.Step{Text: "ok"})
	for _, r := range res {
		t.Logf("after the revocation: step %d %s error=%v: %.300s", r.Step, r.Call.Name, r.IsError, r.Text)
	}
	if len(res) != 2 || !res[1].IsError || !strings.Contains(res[1].Text, "No such tool available") {
		t.Errorf("after the revocation the model got %+v, want sync_lobby gone (No such tool available)", res)
	}
	out := cc.run("mcp", "list")
	t.Logf("claude mcp list after the revocation:\n%s", out)
	if strings.Contains(out, "Connected") || !strings.Contains(strings.ToLower(out), "auth") {
		t.Errorf("claude mcp list after the revocation does not ask for a sign-in:\n%s", out)
	}
}

// tool is one call another client makes.
type tool struct {
	name string
	args map[string]any
}

// sentSeq is the seq sync_send_message answered at the script's step.
func sentSeq(res []claudetest.ToolResult, step int) (int64, error) {
	for _, r := range res {
		if r.Step == step {
			var out struct {
				Seq int64 `json:"seq"`
			}
			if err := json.Unmarshal([]byte(r.Text), &out); err != nil || out.Seq == 0 {
				return 0, fmt.Errorf("step %d's result has no seq (%v): %.300s", step, err, r.Text)
			}
			return out.Seq, nil
		}
	}
	return 0, fmt.Errorf("no result of step %d reached the model", step)
}

// asBob embodies bob's agent in plans and makes the calls, over MCP: another
// client.
func asBob(public, token string, calls ...tool) error {
	rt := &rotate{hosts: make([]atomic.Value, 1)}
	rt.hosts[0].Store(strings.TrimPrefix(public, "http://"))
	rt.token.Store(token)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bob", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: public + "/mcp", HTTPClient: &http.Client{Transport: rt}}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	for _, c := range append([]tool{{"sync_embody", map[string]any{"room": "plans"}}}, calls...) {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: c.name, Arguments: c.args})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("%s: %v", c.name, res.Content[0].(*sdk.TextContent).Text)
		}
	}
	return nil
}

// With client ID metadata documents on and no network, Claude Code signs
// in with Claude's published document for its client id, which the server
// must then take from its built-in copy (issue 44 item 1).
func TestClaudeCodeSignInWithMetadataDocument(t *testing.T) {
	browser, _, cc, _ := claudeServer(t, "on")
	cc.signIn(browser)
	if out := cc.run("mcp", "list"); !strings.Contains(out, "Connected") {
		t.Fatalf("claude mcp list after the sign-in:\n%s", out)
	}
	res := cc.session(claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}}, call1("sync_lobby", nil), claudetest.Step{Text: "ok"})
	if checkResults(t, res, nil); len(res) != 2 {
		t.Fatalf("want the tool search and one sync call to reach the model, got %+v", res)
	}
}
