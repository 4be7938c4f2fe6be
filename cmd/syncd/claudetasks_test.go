package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/mcp/claudetest"
	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// rpcLog records the JSON-RPC requests a client posts to /mcp (and the
// answers to them) on their way through a proxy to syncd: what Claude
// Code declares and calls is read from the wire, not assumed.
type rpcLog struct {
	mu   sync.Mutex
	msgs []loggedRPC
}

type loggedRPC struct {
	Method  string
	Headers http.Header
	Body    map[string]any
	Answer  string // the response body's first bytes (a stream: what arrived before it was cut off)
}

func (l *rpcLog) all() []loggedRPC {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]loggedRPC(nil), l.msgs...)
}

// byMethod is the logged requests of one method.
func (l *rpcLog) byMethod(method string) []loggedRPC {
	var out []loggedRPC
	for _, m := range l.all() {
		if m.Method == method {
			out = append(out, m)
		}
	}
	return out
}

// capWriter keeps the first bytes of what passes through it.
type capWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
}

func (c capWriter) Write(b []byte) (int, error) {
	if c.buf.Len() < 4096 {
		c.buf.Write(b[:min(len(b), 4096-c.buf.Len())])
	}
	return c.ResponseWriter.Write(b)
}

func (c capWriter) Flush() { _ = http.NewResponseController(c.ResponseWriter).Flush() }

// recordingProxy listens on a free loopback port and forwards everything
// to target, logging each POST /mcp.
func recordingProxy(t *testing.T, l net.Listener, target string, log *rpcLog) {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/mcp" {
			rp.ServeHTTP(w, r)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		method, _ := body["method"].(string)
		var ans bytes.Buffer
		rp.ServeHTTP(capWriter{w, &ans}, r)
		h := r.Header.Clone()
		h.Del("Authorization")
		log.mu.Lock()
		log.msgs = append(log.msgs, loggedRPC{Method: method, Headers: h, Body: body, Answer: ans.String()})
		log.mu.Unlock()
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// claudeProxiedServer is claudeServer with the recording proxy as the
// public address: Claude Code talks to the proxy, the proxy to syncd.
func claudeProxiedServer(t *testing.T) (browser context.Context, public string, cc *claudeCode, log *rpcLog) {
	t.Helper()
	cc = newClaudeCode(t)
	dbURL := pgtest.URL(t)
	if err := run(context.Background(), "migrate", testConfig(t, "-database-url", dbURL), nil); err != nil {
		t.Fatal(err)
	}
	deadProxy := refusingProxy(t)
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	public = "http://localhost:" + strings.TrimPrefix(front.Addr().String(), "127.0.0.1:")
	base, stop, _ := startOnFreePorts(t, 1, func(ports []string) *config {
		return testConfig(t, "-addr", "127.0.0.1:"+ports[0], "-database-url", dbURL, "-rate-limit", "-1", "-signup", "open",
			"-public-url", public, "-cimd", "off", "-outbound-proxy", deadProxy)
	})
	t.Cleanup(func() { stop() })
	log = &rpcLog{}
	recordingProxy(t, front, base, log)
	browser = oauthtest.Chromium(t, 4*time.Minute)
	aliceSignsUp(t, browser, public)
	cc.run("mcp", "add", "--transport", "http", "sync", public+"/mcp")
	return browser, public, cc, log
}

// The real Claude Code runs a sync_wait as a task (issue 48). In its
// terminal interface it declares the tasks extension in each request's
// _meta; sync answers the wait with a task; Claude Code tells the model
// the wait moved to the background, polls tasks/get (Mcp-Name: the task
// id), and the model goes on: here it makes the very call that satisfies
// the wait, which a blocking wait made impossible in one turn. When the
// task completes, a new turn brings the model a task notification with
// the wait's result. Headless (claude -p) it declares nothing and the wait
// blocks, as before.
func TestClaudeCodeWaitAsTask(t *testing.T) {
	browser, _, cc, log := claudeProxiedServer(t)
	cc.signIn(browser)
	script := []claudetest.Step{
		{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}},
		call1("sync_create_room", map[string]any{"room": "plans"}),                                                                                     // 1
		call1("sync_embody", map[string]any{"room": "plans"}),                                                                                          // 2
		call1("sync_register_action", map[string]any{"id": "ring", "writes": []any{map[string]any{"scope": "_shared", "key": "rung", "value": true}}}), // 3
		call1("sync_wait", map[string]any{"condition": "has(state._shared.rung)", "timeout_ms": 40000}),                                                // 4: a task
		call1("sync_invoke_action", map[string]any{"action": "ring"}),                                                                                  // 5: while it is open
		{Text: "Rang; the wait runs in the background."},                                                                                               // 6
		{Text: "The wait ended."}, // 7: the task notification's turn
	}
	res := cc.interactive(t, script...)
	for _, r := range res {
		t.Logf("model read: step %d %s error=%v: %.400s", r.Step, r.Call.Name, r.IsError, r.Text)
	}
	calls := log.byMethod("tools/call")
	var waitCall *loggedRPC
	for i, c := range calls {
		if jsonAt(c.Body, "params", "name") == "sync_wait" {
			waitCall = &calls[i]
		}
	}
	if waitCall == nil {
		t.Fatal("no sync_wait reached sync")
	}
	if jsonAt(waitCall.Body, "params", "_meta", "io.modelcontextprotocol/clientCapabilities", "extensions", "io.modelcontextprotocol/tasks") == nil {
		t.Fatalf("Claude Code's sync_wait does not declare the tasks extension: %v", waitCall.Body)
	}
	var id string
	if i := strings.Index(waitCall.Answer, `"taskId":"`); i >= 0 {
		id, _, _ = strings.Cut(waitCall.Answer[i+len(`"taskId":"`):], `"`)
	}
	if id == "" || !strings.Contains(waitCall.Answer, `"resultType":"task"`) {
		t.Fatalf("sync answered the wait without a task: %.400s", waitCall.Answer)
	}
	polls := log.byMethod("tasks/get")
	if len(polls) == 0 {
		t.Fatal("Claude Code never polled tasks/get")
	}
	for _, p := range polls {
		if p.Headers.Get("Mcp-Name") != id || jsonAt(p.Body, "params", "taskId") != id {
			t.Errorf("a poll names another task: Mcp-Name %q, %v", p.Headers.Get("Mcp-Name"), p.Body)
		}
	}
	for _, r := range res {
		switch r.Step {
		case 4:
			if !strings.Contains(r.Text, "moved to the background") || !strings.Contains(r.Text, id) {
				t.Errorf("the model was not told the wait runs in the background: %.400s", r.Text)
			}
		case 5:
			if r.IsError || !strings.Contains(r.Text, `"invoked":true`) && !strings.Contains(r.Text, `"action":"ring"`) {
				t.Errorf("the call made while the wait was open: %.400s", r.Text)
			}
		}
	}
	told := lastMainMessage(cc, 7)
	t.Logf("the model's turn after the wait ended: %.1500s", told)
	if !strings.Contains(told, "task-notification") || !strings.Contains(told, id) || !strings.Contains(told, `\"triggered\":true`) {
		t.Errorf("the model's turn after the wait did not bring the triggered result: %.1500s", told)
	}

	// Headless: no extension declared, the blocking wait.
	before := len(log.byMethod("tools/call"))
	hres := cc.session(
		claudetest.Step{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}},
		call1("sync_wait", map[string]any{"condition": "has(state._shared.rung)", "timeout_ms": 1000}),
		claudetest.Step{Text: "ok"},
	)
	for _, c := range log.byMethod("tools/call")[before:] {
		if jsonAt(c.Body, "params", "_meta", "io.modelcontextprotocol/clientCapabilities", "extensions") != nil {
			t.Errorf("claude -p declared extensions: %v", c.Body)
		}
	}
	if len(hres) != 2 || !strings.Contains(hres[1].Text, `"triggered":true`) {
		t.Errorf("the headless wait: %+v", hres)
	}
}

// jsonAt is the value at path in nested JSON objects.
func jsonAt(m map[string]any, path ...string) any {
	var v any = m
	for _, k := range path {
		mm, _ := v.(map[string]any)
		v = mm[k]
	}
	return v
}

// interactive runs one conversation in Claude Code's terminal interface
// (in tmux), the prompt given on its command line, until the model has
// answered the script's last step, and returns the tool results.
func (c *claudeCode) interactive(t *testing.T, script ...claudetest.Step) []claudetest.ToolResult {
	t.Helper()
	tmux, err := exec.LookPath("tmux")
	if err != nil {
		t.Skip("tmux is not installed")
	}
	before := len(c.model.ToolResults())
	c.model.SetScript(script...)
	sh := "#!/bin/sh\ncd '" + c.dir + "'\n"
	for _, e := range c.env {
		k, v, _ := strings.Cut(e, "=")
		sh += "export " + k + "='" + v + "'\n"
	}
	sh += "exec '" + c.bin + "' --allowedTools mcp__sync ToolSearch -- 'Work in sync.'\n"
	file := filepath.Join(c.home, "tui")
	if err := os.WriteFile(file, []byte(sh), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(c.home, "tui.sock")
	if out, err := exec.Command(tmux, "-S", sock, "-f", "/dev/null", "new-session", "-d", "-x", "200", "-y", "50", file).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	defer func() { _ = exec.Command(tmux, "-S", sock, "kill-server").Run() }()
	screen := func() string {
		out, _ := exec.Command(tmux, "-S", sock, "capture-pane", "-p").CombinedOutput()
		return string(out)
	}
	last := len(script) - 1
	pgtest.Eventually(t, 90*time.Second, func() bool {
		for _, r := range c.model.Requests() {
			if r.Main && r.Step == last {
				return true
			}
		}
		return false
	}, "the interactive session to reach step %d; the screen:\n%s", last, func() any { return screen() })
	t.Logf("the screen at the end:\n%s", screen())
	return c.model.ToolResults()[before:]
}

// A teammate's message reaches the model while it works (issue 48): the
// model waits, as a task, for a message directed to it and goes on with
// other calls; bob's message ends the wait, and the task notification
// brings the model the message in a turn of its own.
func TestClaudeCodeHearsATeammateWhileBusy(t *testing.T) {
	browser, public, cc, _ := claudeProxiedServer(t)
	cc.signIn(browser)
	bob := oauthtest.SignUp(t, public, "bob", "")
	bobTok := bob.Token(t, "Bob's client", map[string]string{oauthtest.SharedRooms: "write"})
	script := []claudetest.Step{
		{Calls: []claudetest.Call{{Name: "ToolSearch", Input: map[string]any{"query": allTools}}}},
		call1("sync_create_room", map[string]any{"room": "plans"}),                                           // 1
		call1("sync_embody", map[string]any{"room": "plans"}),                                                // 2
		call1("sync_share_room", map[string]any{"room": "plans", "username": "bob"}),                         // 3
		call1("sync_wait", map[string]any{"condition": "messages.directed_unread > 0", "timeout_ms": 40000}), // 4: a task
		call1("sync_read_context", map[string]any{"only": "state"}),                                          // 5: busy; bob writes now
		{Text: "Working on something else."},                                                                 // 6
		{Text: "Bob wrote."},                                                                                 // 7: the notification's turn
	}
	sent := make(chan error, 1)
	go func() {
		pgtest.Eventually(t, 2*time.Minute, func() bool {
			for _, r := range cc.model.Requests() {
				if r.Main && r.Step == 5 {
					return true
				}
			}
			return false
		}, "the model to be told its wait runs in the background")
		sent <- asBob(public, bobTok["access_token"].(string),
			tool{"sync_send_message", map[string]any{"body": "Please review the release plan", "to": "alice:claude-code-sync"}})
	}()
	res := cc.interactive(t, script...)
	if err := <-sent; err != nil {
		t.Fatalf("bob's message: %v", err)
	}
	for _, r := range res {
		t.Logf("model read: step %d %s error=%v: %.300s", r.Step, r.Call.Name, r.IsError, r.Text)
		if r.Step == 4 && !strings.Contains(r.Text, "moved to the background") {
			t.Errorf("the wait did not move to the background: %.300s", r.Text)
		}
	}
	told := lastMainMessage(cc, 7)
	t.Logf("the model's turn after bob wrote: %.2000s", told)
	if !strings.Contains(told, "task-notification") || !strings.Contains(told, "Please review the release plan") {
		t.Errorf("the model was not told of bob's message: %.2000s", told)
	}
}

// lastMainMessage is the last message of the main loop's request at step
// (as JSON), as the scripted model received it ("" when there was none).
func lastMainMessage(cc *claudeCode, step int) string {
	var told string
	for _, r := range cc.model.Requests() {
		if r.Main && r.Step == step {
			msgs, _ := r.Body["messages"].([]any)
			if len(msgs) > 0 {
				b, _ := json.Marshal(msgs[len(msgs)-1])
				told = string(b)
			}
		}
	}
	return told
}
