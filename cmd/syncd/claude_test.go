package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

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
	urls  string // the file its BROWSER script appends each URL it is asked to open to
}

var authorizeRE = regexp.MustCompile(`http://\S+/authorize\?\S+`)

const claudeKey = "sk-ant-api03-scripted-model-for-tests-0123456789abcdefghij"

func newClaudeCode(t *testing.T) *claudeCode {
	t.Helper()
	c := &claudeCode{t: t, bin: claudeBin(t), home: t.TempDir(), dir: t.TempDir(), model: claudetest.New(t)}
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
	// The browser it opens for a sign-in only records the URL: the test
	// hands it to Chromium.
	c.urls = filepath.Join(c.home, "browser-urls")
	browser := filepath.Join(c.home, "browser")
	if err := os.WriteFile(browser, []byte("#!/bin/sh\necho \"$1\" >> '"+c.urls+"'\n"), 0o755); err != nil {
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
// one) and completes the consent in the browser, signed in already, that
// the URL it asks to open is handed to.
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
	sh.WriteString("{ '" + c.bin + "' mcp login sync; echo $? > '" + rc + ".new'; } 2>&1 | tee '" + logf + "'\nmv '" + rc + ".new' '" + rc + "'\n")
	if err := os.WriteFile(script, []byte(sh.String()), 0o755); err != nil {
		c.t.Fatal(err)
	}
	sock := filepath.Join(c.home, "tmux.sock")
	if out, err := exec.Command(tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50", script).CombinedOutput(); err != nil {
		c.t.Fatalf("tmux: %v\n%s", err, out)
	}
	c.t.Cleanup(func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() })
	output := func() string { b, _ := os.ReadFile(logf); return string(b) }
	deadline := time.Now().Add(2 * time.Minute)
	var authURL string
	for authURL == "" {
		if _, err := os.Stat(rc); err == nil {
			c.t.Fatalf("claude mcp login ended before opening a browser:\n%s", output())
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("claude mcp login opened no browser within 2 minutes:\n%s", output())
		}
		time.Sleep(50 * time.Millisecond)
		// It prints the URL as well as asking BROWSER to open it (which
		// 2.1.328 does not do under tmux).
		if m := authorizeRE.FindString(output()); m != "" {
			authURL = m
		}
	}
	c.t.Logf("claude opened %s", authURL)
	err = chromedp.Do(browser, chromedp.Navigate(authURL), chromedp.WaitVisible(chromedp.CSS("#allow")))
	if err == nil {
		_, err = chromedp.Run(browser, chromedp.Evaluate[bool](`document.getElementById("create_rooms").checked = true`))
	}
	if err == nil {
		err = chromedp.Do(browser, chromedp.Click(chromedp.CSS("#allow")))
	}
	if err != nil {
		c.t.Fatalf("consent: %v\n%s", err, output())
	}
	for {
		if b, err := os.ReadFile(rc); err == nil && strings.HasSuffix(string(b), "\n") {
			if strings.TrimSpace(string(b)) != "0" {
				c.t.Fatalf("claude mcp login failed:\n%s", output())
			}
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("claude mcp login did not finish:\n%s", output())
		}
		time.Sleep(50 * time.Millisecond)
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

// claudeServer starts syncd (open sign-up, cimd as given) with alice
// signed up in a headless Chromium, and Claude Code with the server added.
func claudeServer(t *testing.T, cimd string) (browser context.Context, public string, cc *claudeCode) {
	t.Helper()
	cc = newClaudeCode(t)
	dbURL := pgtest.URL(t)
	if err := run(context.Background(), "migrate", testConfig(t, "-database-url", dbURL), nil); err != nil {
		t.Fatal(err)
	}
	_, stop, ports := startOnFreePorts(t, 1, func(ports []string) *config {
		return testConfig(t, "-addr", "127.0.0.1:"+ports[0], "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open",
			"-public-url", "http://localhost:"+ports[0], "-cimd", cimd)
	})
	t.Cleanup(stop)
	public = "http://localhost:" + ports[0]
	browser = oauthtest.Chromium(t, 4*time.Minute)
	if err := chromedp.Do(browser,
		chromedp.Navigate(public+"/signup"),
		chromedp.WaitVisible(chromedp.CSS("#username")),
		chromedp.SendKeys(chromedp.CSS("#username"), "alice"),
		chromedp.Click(chromedp.CSS("#signup")),
		chromedp.WaitVisible(chromedp.CSS("#codes pre")),
	); err != nil {
		t.Fatalf("sign-up with a passkey: %v", err)
	}
	cc.run("mcp", "add", "--transport", "http", "sync", public+"/mcp")
	return browser, public, cc
}

func TestClaudeCodeSession(t *testing.T) {
	browser, _, cc := claudeServer(t, "off")
	cc.signIn(browser)
	t.Log(cc.run("mcp", "list"))
	res := cc.session(
		claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": "select:mcp__sync__sync_lobby"}}}},
		claudetest.Step{Calls: []claudetest.Call{{Name: "mcp__sync__sync_lobby"}}},
	)
	for _, r := range res {
		t.Logf("%s error=%v: %.300s", r.Call.Name, r.IsError, r.Text)
	}
}
