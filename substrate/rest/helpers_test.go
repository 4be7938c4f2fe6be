package rest_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

type env struct {
	t   *testing.T
	srv *httptest.Server
	svc *substrate.Service
}

func newEnv(t *testing.T, opt rest.Options) *env {
	t.Helper()
	return newEnvWith(t, opt, substrate.Limits{MaxValueBytes: 4096, MaxKeysPerScope: 50})
}

// newEnvWith is newEnv with the substrate's limits set.
func newEnvWith(t *testing.T, opt rest.Options, lim substrate.Limits) *env {
	t.Helper()
	db := pgtest.New(t)
	if opt.RatePerSecond == 0 {
		opt.RatePerSecond = -1
	}
	// A minute's safety-net re-check: a wait the tests see woken was woken
	// by its notification or its timer, never by the re-check.
	svc := substrate.New(db, substrate.Options{Features: testFeatures, Limits: lim, Wait: substrate.WaitOptions{Recheck: time.Minute}})
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(rest.Handler(svc, opt))
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, svc: svc}
}

type resp struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends body (a string is sent as is, anything else as JSON).
func (e *env) do(method, path, token string, body any) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		// Errorf, not Fatal: do also runs on goroutines of concurrency
		// tests; status 0 fails the caller's status check.
		e.t.Errorf("%s %s: %v", method, path, err)
		return resp{raw: err.Error()}
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	out := resp{status: res.StatusCode, header: res.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &out.body)
	return out
}

// must fails the test unless the response has status want.
func (r resp) must(t *testing.T, want int) resp {
	t.Helper()
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.raw)
	}
	return r
}

func (r resp) str(k string) string { s, _ := r.body[k].(string); return s }
func (r resp) num(k string) int64  { f, _ := r.body[k].(float64); return int64(f) }

type room struct {
	id, token, view string
}

func (e *env) room(id string, extra map[string]any) room {
	e.t.Helper()
	body := map[string]any{"id": id}
	for k, v := range extra {
		body[k] = v
	}
	r := e.do("POST", "/rooms", "", body).must(e.t, 201)
	return room{id: r.str("id"), token: r.str("token"), view: r.str("view_token")}
}

func (e *env) join(rm room, id string, grants ...string) string {
	e.t.Helper()
	tok := e.do("POST", "/rooms/"+rm.id+"/agents", rm.token, map[string]any{"id": id, "name": id}).must(e.t, 201).str("token")
	if len(grants) > 0 {
		e.do("PATCH", "/rooms/"+rm.id+"/agents/"+id, rm.token, map[string]any{"grants": grants}).must(e.t, 200)
	}
	return tok
}

// openWaits returns once n waits are open on the service (each subscribed
// to its room's notifications: a write made now wakes it).
func (e *env) openWaits(n int64) {
	e.t.Helper()
	pgtest.Eventually(e.t, 20*time.Second, func() bool { return e.svc.Stats().OpenWaits >= n }, "%d waits open", n)
}

func (e *env) seq(rm room) int64 {
	e.t.Helper()
	return e.do("GET", "/rooms/"+rm.id, rm.token, nil).must(e.t, 200).num("seq")
}
