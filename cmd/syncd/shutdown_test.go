package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// streamEnd is how a held event stream ended.
type streamEnd struct {
	at  time.Time
	err error // nil: the response ended cleanly (io.EOF)
}

// hold reads an event stream until it ends, reporting each line on lines
// (when not nil) and the end on the returned channel.
func hold(body io.ReadCloser, lines chan<- string) <-chan streamEnd {
	end := make(chan streamEnd, 1)
	go func() {
		defer body.Close()
		r := bufio.NewReader(body)
		for {
			line, err := r.ReadString('\n')
			if lines != nil && line != "" {
				select {
				case lines <- strings.TrimRight(line, "\n"):
				default:
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				end <- streamEnd{time.Now(), err}
				return
			}
		}
	}()
	return end
}

// waitLine waits for a line of a stream containing s.
func waitLine(t *testing.T, what string, lines <-chan string, s string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-lines:
			if strings.Contains(line, s) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: no line with %q in 30 s", what, s)
		}
	}
}

// A server held by a client's listen stream and a person's live page
// stops without waiting for them: a SIGTERM ends both streams at once and
// cleanly (the clients reconnect to another process), while a request in
// flight (a REST wait) still drains to its normal answer; the process
// then exits, far inside its 30 s shutdown timeout.
func TestShutdownEndsEventStreamsAndDrainsRequests(t *testing.T) {
	dbURL := pgtest.URL(t)
	port := freePort(t)
	public := "http://localhost:" + port
	base, proc := startChildProc(t, dbURL, "-addr", "127.0.0.1:"+port, "-public-url", public, "-signup", "open", "-shutdown-timeout", "30s")
	if base != "http://127.0.0.1:"+port {
		t.Fatalf("server at %s, not on the port asked for", base)
	}

	// A person with a room of her own, her MCP client's token, and her
	// live page of the room.
	alice := oauthtest.SignUp(t, public, "alice", "")
	token := alice.Token(t, "Shutdown", nil)["access_token"].(string)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: public + "/mcp", HTTPClient: &http.Client{Transport: oauthtest.Bearer{Token: token}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_create_room", Arguments: map[string]any{"room": "drain"}}); err != nil || res.IsError {
		t.Fatalf("sync_create_room: %v %v", err, res)
	}
	cs.Close()

	listenLines := make(chan string, 16)
	listen := hold(openListen(t, public, token).Body, listenLines)
	waitLine(t, "listen stream", listenLines, "notifications/subscriptions/acknowledged")

	req, _ := http.NewRequest("GET", public+"/live/rooms/drain", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := alice.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("live page stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	pageLines := make(chan string, 16)
	page := hold(res.Body, pageLines)
	waitLine(t, "live page stream", pageLines, "retry:")

	// An ordinary request in flight: a REST wait that times out (200,
	// not triggered) 8 s after it began.
	code, room := call(t, "POST", base+"/rooms", "", `{"id":"drain-rest"}`)
	if code != 201 {
		t.Fatalf("create room: %d", code)
	}
	roomTok := room["token"].(string)
	_, ag := call(t, "POST", base+"/rooms/drain-rest/agents", roomTok, `{"id":"waiter","name":"W"}`)
	waiterTok := ag["token"].(string)
	type answer struct {
		at   time.Time
		code int
		body map[string]any
	}
	waited := make(chan answer, 1)
	go func() {
		c, body := call(t, "GET", base+"/rooms/drain-rest/wait?timeout=8000&condition="+url.QueryEscape(`"never" in state._shared`), waiterTok, "")
		waited <- answer{time.Now(), c, body}
	}()
	parked(t, base, "drain-rest", roomTok, "waiter", time.Now().Add(20*time.Second))

	exited := make(chan error, 1)
	stopped := time.Now()
	if err := proc.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go func() { exited <- proc.Wait() }()

	var l, p streamEnd
	for got := 0; got < 2; got++ {
		select {
		case l = <-listen:
			listen = nil
		case p = <-page:
			page = nil
		case a := <-waited:
			t.Fatalf("the wait in flight answered (%d) before the event streams ended: the shutdown held them (listen ended: %v, page ended: %v)",
				a.code, listen == nil, page == nil)
		case <-time.After(25 * time.Second):
			t.Fatalf("the event streams did not end within 25 s of the signal (listen ended: %v, page ended: %v)", listen == nil, page == nil)
		}
	}
	if l.err != nil || p.err != nil {
		t.Fatalf("the streams were cut instead of ended: listen %v, page %v", l.err, p.err)
	}
	a := <-waited
	if a.code != 200 || a.body["triggered"] != false {
		t.Fatalf("the wait in flight was not drained to its answer: %d %v", a.code, a.body)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("syncd exited: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("syncd did not exit within 20 s of the signal (its shutdown timeout is 30 s)")
	}
	t.Logf("after the signal: listen stream ended %v, live page %v, the wait answered %v, exit %v",
		l.at.Sub(stopped).Round(time.Millisecond), p.at.Sub(stopped).Round(time.Millisecond),
		a.at.Sub(stopped).Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
}

// openListen opens a subscriptions/listen stream (protocol 2026-07-28),
// the one a client holds for its whole session.
func openListen(t *testing.T, base, token string) *http.Response {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"listen-test","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		res.Body.Close()
		t.Fatalf("listen stream: %d", res.StatusCode)
	}
	return res
}

// proc is a syncd process with its log, line by line.
type proc struct {
	cmd *exec.Cmd
	log chan string
}

// startEmbedded starts a syncd process on the embedded cluster in dir
// (no DATABASE_URL), without waiting for it to listen.
func startEmbedded(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-addr", "127.0.0.1:0", "-database-url=", "-data-dir", dir, "-rate-limit", "-1"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DATABASE_URL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: make(chan string, 1000)}
	go func() {
		defer close(p.log)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.log <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	return p
}

// expect reads p's log until a line containing want, failing if a line
// containing any of refused comes first. It returns the line.
func (p *proc) expect(t *testing.T, within time.Duration, want string, refused ...string) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line, ok := <-p.log:
			if !ok {
				t.Fatalf("syncd (pid %d) ended its log without %q", p.cmd.Process.Pid, want)
			}
			for _, r := range refused {
				if strings.Contains(line, r) {
					t.Fatalf("syncd (pid %d) logged %q before %q: %s", p.cmd.Process.Pid, r, want, line)
				}
			}
			if strings.Contains(line, want) {
				return line
			}
		case <-deadline:
			t.Fatalf("syncd (pid %d) did not log %q within %v", p.cmd.Process.Pid, want, within)
		}
	}
}

var listeningRE = regexp.MustCompile(`msg="syncd listening[^"]*" addr=(\S+)`)

// A server started while the previous one drains does not serve on the
// previous one's embedded cluster (which that one is about to stop): it
// waits for it to exit, then starts the cluster itself, and stays ready.
// A short command (syncd invite) beside it still uses its cluster.
func TestServerWaitsForTheDrainingOwnersCluster(t *testing.T) {
	dir, err := os.MkdirTemp("", "syncd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As root the cluster runs as the postgres account, which must be able
	// to enter the directory.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	a := startEmbedded(t, dir, "-shutdown-timeout", "60s")
	baseA := "http://" + listeningRE.FindStringSubmatch(a.expect(t, 90*time.Second, `msg="syncd listening`))[1]
	code, room := call(t, "POST", baseA+"/rooms", "", `{"id":"handover"}`)
	if code != 201 {
		t.Fatalf("create room: %d", code)
	}
	roomTok := room["token"].(string)
	_, ag := call(t, "POST", baseA+"/rooms/handover/agents", roomTok, `{"id":"waiter","name":"W"}`)
	waiterTok := ag["token"].(string)

	// A wait in flight holds A in its drain until the test lets it go.
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	req, _ := http.NewRequestWithContext(ctx, "GET", baseA+"/rooms/handover/wait?timeout=45000&condition="+url.QueryEscape(`"never" in state._shared`), nil)
	req.Header.Set("Authorization", "Bearer "+waiterTok)
	waitDone := make(chan struct{})
	go func() {
		defer close(waitDone)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	parked(t, baseA, "handover", roomTok, "waiter", time.Now().Add(20*time.Second))
	if err := a.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	a.expect(t, 20*time.Second, `msg="shutting down"`)

	b := startEmbedded(t, dir)
	b.expect(t, 60*time.Second, fmt.Sprintf("waiting for the previous syncd (pid %d) to stop its embedded PostgreSQL", a.cmd.Process.Pid),
		"using the embedded PostgreSQL another process runs", `msg="syncd listening`)

	// A drains (the waiter leaves), stops its cluster and exits.
	leave()
	<-waitDone
	aExited := make(chan error, 1)
	go func() { aExited <- a.cmd.Wait() }()
	select {
	case err := <-aExited:
		if err != nil {
			t.Fatalf("the first syncd exited: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the first syncd did not exit within 60 s of its drain ending")
	}

	b.expect(t, 90*time.Second, "started embedded PostgreSQL", "using the embedded PostgreSQL another process runs", `msg="syncd listening`)
	baseB := "http://" + listeningRE.FindStringSubmatch(b.expect(t, 60*time.Second, `msg="syncd listening`))[1]
	// The first has exited: nothing is left to stop the second's cluster.
	if code, body := call(t, "GET", baseB+"/readyz", "", ""); code != 200 {
		t.Fatalf("/readyz of the second syncd, after the first exited: %d %v", code, body)
	}
	if code, _ := call(t, "GET", baseB+"/rooms/handover", roomTok, ""); code != 200 {
		t.Fatalf("the room written through the first syncd, read through the second: %d", code)
	}

	// syncd invite beside the running server uses its cluster, and
	// leaves it running.
	inv := exec.Command(os.Args[0], "invite", "-database-url=", "-data-dir", dir)
	inv.Env = b.cmd.Env
	out, err := inv.Output()
	if err != nil {
		t.Fatalf("syncd invite beside the server: %v", err)
	}
	if !strings.Contains(string(out), "/signup?invite=") {
		t.Fatalf("syncd invite printed %q", out)
	}
	if code, body := call(t, "GET", baseB+"/readyz", "", ""); code != 200 {
		t.Fatalf("/readyz after syncd invite: %d %v", code, body)
	}
}
