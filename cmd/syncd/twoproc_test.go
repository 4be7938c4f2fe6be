package main

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// childEnv makes the test binary act as syncd itself (see TestMain), so
// the second server is a real, separate process.
const childEnv = "SYNCD_TEST_CHILD"

func startChild(t *testing.T, dbURL string, extra ...string) string {
	t.Helper()
	base, _ := startChildProc(t, dbURL, extra...)
	return base
}

// startChildProc starts a syncd process and returns its base URL and the
// process, which a fault test may kill.
func startChildProc(t *testing.T, dbURL string, extra ...string) (string, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-addr", "127.0.0.1:0", "-database-url", dbURL, "-rate-limit", "-1"}, extra...)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
		}
		// No log line after the test ends.
		select {
		case <-scanned:
		case <-time.After(5 * time.Second):
		}
	})
	addrRE := regexp.MustCompile(`msg="syncd listening[^"]*" addr=(\S+)`)
	found := make(chan string, 1)
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
			// The child's errors are the test's to show: a 500 a test
			// sees is explained by the line its server logged.
			if strings.Contains(sc.Text(), " ERROR ") {
				t.Logf("child syncd: %s", sc.Text())
			}
		}
	}()
	select {
	case addr := <-found:
		return "http://" + addr, cmd
	case <-time.After(60 * time.Second):
		t.Fatal("second syncd process did not start")
	}
	return "", nil
}

// A waiter served by one server process is woken by an invocation served
// by another process on the same database.
func TestWaitAcrossProcesses(t *testing.T) {
	dbURL := pgtest.URL(t)
	// The safety-net re-check is a minute on both processes: only the
	// notification can wake the waiter within the test's bound.
	cfg := testConfig(t, "-database-url", dbURL, "-rate-limit", "-1", "-wait-recheck", "60s")
	if err := run(context.Background(), "migrate", cfg, nil); err != nil {
		t.Fatal(err)
	}
	a, stop := start(t, cfg)
	defer stop()
	b := startChild(t, dbURL, "-wait-recheck", "60s")

	code, room := call(t, "POST", a+"/rooms", "", `{"id":"twoproc"}`)
	if code != 201 {
		t.Fatalf("create room: %d", code)
	}
	tok := room["token"].(string)
	if code, _ := call(t, "PUT", a+"/rooms/twoproc/actions", tok, `{"id":"finish","writes":[{"key":"done","value":true}]}`); code != 201 {
		t.Fatalf("register: %d", code)
	}
	_, ag := call(t, "POST", a+"/rooms/twoproc/agents", tok, `{"id":"waiter","name":"W"}`)
	waiterTok := ag["token"].(string)
	_, ag = call(t, "POST", a+"/rooms/twoproc/agents", tok, `{"id":"doer","name":"D"}`)
	doerTok := ag["token"].(string)

	type result struct {
		code int
		body map[string]any
	}
	got := make(chan result, 1)
	go func() {
		c, body := call(t, "GET", b+"/rooms/twoproc/wait?timeout=30000&condition="+url.QueryEscape(`"done" in state._shared`), waiterTok, "")
		got <- result{c, body}
	}()
	// Invoke on process A once the waiter (on B) is waiting.
	parked(t, a, "twoproc", tok, "waiter", time.Now().Add(20*time.Second))
	sent := time.Now()
	if code, body := call(t, "POST", a+"/rooms/twoproc/actions/finish/invoke", doerTok, `{}`); code != 200 {
		t.Fatalf("invoke: %d %v", code, body)
	}
	select {
	case r := <-got:
		if r.code != 200 || r.body["triggered"] != true {
			t.Fatalf("wait on process B: %d %v", r.code, r.body)
		}
		woken := time.Since(sent)
		t.Logf("woken %v after the invocation returned", woken)
		if woken > 3*time.Second {
			t.Fatalf("woken %v after the invocation: not by its notification", woken)
		}
	case <-time.After(25 * time.Second):
		t.Fatal("waiter on process B was not woken by the invocation on process A")
	}
}

// The first minute (issue 42 bug 11): the start-up log names the URL to
// open, http://localhost:PORT, not the listen address 127.0.0.1:PORT
// where passkey sign-up fails, and, before it, the first account's
// enrolment link on the same host.
func TestStartupLogNamesLocalhostAndTheEnrolmentLink(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-addr", "127.0.0.1:0", "-database-url", pgtest.URL(t))
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var enrol string
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("syncd ended before it listened")
			}
			if regexp.MustCompile(`create the first one .* at http://localhost:0/signup\?invite=`).MatchString(line) {
				enrol = line
			}
			if !regexp.MustCompile(`msg="syncd listening`).MatchString(line) {
				continue
			}
			if !regexp.MustCompile(`msg="syncd listening: open http://localhost:0"`).MatchString(line) {
				t.Errorf("the listening line does not say to open http://localhost: %s", line)
			}
			if enrol == "" {
				t.Error("no enrolment link on localhost was logged before the listening line")
			}
			return
		case <-deadline:
			t.Fatal("syncd did not start")
		}
	}
}
