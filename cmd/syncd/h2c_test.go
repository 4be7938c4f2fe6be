package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// Issue 32 item 4: the listener speaks HTTP/2 without TLS (prior
// knowledge) beside HTTP/1.1, so a client holding many waits multiplexes
// them over a few connections instead of one descriptor per wait. 300
// waits over a pool of two database connections, woken by one write: all
// answered over HTTP/2, and the process (server and client both) holds a
// few more descriptors, not hundreds.
func TestWaitsMultiplexOverH2C(t *testing.T) {
	const n = 300
	base, stop := start(t, testConfig(t, "-database-url", pgtest.URL(t), "-db-max-conns", "2", "-rate-limit", "-1"))
	defer stop()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	cli := &http.Client{Transport: &http.Transport{Protocols: &p}}
	do := func(method, path, token string, body any) (*http.Response, map[string]any) {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			rd = bytes.NewReader(raw)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, _ := http.NewRequest(method, base+path, rd)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := cli.Do(req)
		if err != nil {
			t.Error(err)
			return nil, nil
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return res, out
	}
	res, room := do("POST", "/rooms", "", map[string]any{"id": "h2waits"})
	if res == nil || res.StatusCode != 201 && res.StatusCode != 200 {
		t.Fatalf("create: %v %v", res, room)
	}
	if res.Proto != "HTTP/2.0" {
		t.Fatalf("answered over %s, not HTTP/2 without TLS", res.Proto)
	}
	tok := room["token"].(string)
	agents := make([]string, n)
	for i := range n {
		res, a := do("POST", "/rooms/h2waits/agents", tok, map[string]any{"id": fmt.Sprintf("a%d", i), "name": fmt.Sprintf("a%d", i)})
		if res == nil || res.StatusCode != 200 && res.StatusCode != 201 {
			t.Fatalf("join: %v %v", res, a)
		}
		agents[i] = a["token"].(string)
	}
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := fds()
	var wg sync.WaitGroup
	woke := make([]bool, n)
	cond := url.QueryEscape(`has(state._shared.go)`)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, out := do("GET", "/rooms/h2waits/wait?timeout=30000&context=none&condition="+cond, agents[i], nil)
			woke[i] = res != nil && res.StatusCode == 200 && out["triggered"] == true && res.Proto == "HTTP/2.0"
		}()
	}
	waiting := func() int {
		_, list := do("GET", "/rooms/h2waits/agents", tok, nil)
		raw, _ := json.Marshal(list)
		return bytes.Count(raw, []byte(`"status":"waiting"`))
	}
	pgtest.Eventually(t, 30*time.Second, func() bool { return waiting() == n }, "%d agents waiting (%v are)", n, func() any { return waiting() })
	during := fds()
	if res, _ := do("PUT", "/rooms/h2waits/state", tok, map[string]any{"scope": "_shared", "key": "go", "value": true}); res == nil || res.StatusCode != 200 {
		t.Fatalf("write: %v", res)
	}
	wg.Wait()
	for i, ok := range woke {
		if !ok {
			t.Fatalf("a%d's wait did not end triggered over HTTP/2", i)
		}
	}
	if during-before > 20 {
		t.Fatalf("%d waits took %d more descriptors (%d → %d): not multiplexed", n, during-before, before, during)
	}
}
