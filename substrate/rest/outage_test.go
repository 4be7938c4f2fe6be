package rest_test

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// dbLink is a TCP link to the test cluster's socket that the test can cut
// and restore, as a network partition or a restarting database would.
type dbLink struct {
	t      *testing.T
	addr   string
	socket string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func (l *dbLink) up() {
	l.t.Helper()
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		l.t.Fatal(err)
	}
	l.mu.Lock()
	l.ln, l.addr = ln, ln.Addr().String()
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			pg, err := net.Dial("unix", l.socket)
			if err != nil {
				c.Close()
				continue
			}
			l.mu.Lock()
			l.conns = append(l.conns, c, pg)
			l.mu.Unlock()
			go func() { _, _ = io.Copy(pg, c); pg.Close() }()
			go func() { _, _ = io.Copy(c, pg); c.Close() }()
		}
	}()
}

func (l *dbLink) down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ln.Close()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// While the database cannot be reached, requests answer 503 unavailable
// with Retry-After (they used to answer 500), and the server recovers on
// its own when it is back.
func TestDatabaseOutageAnswers503(t *testing.T) {
	u, _ := url.Parse(pgtest.URL(t))
	link := &dbLink{t: t, addr: "127.0.0.1:0", socket: filepath.Join(u.Query().Get("host"), ".s.PGSQL.5432")}
	link.up()
	t.Cleanup(link.down)
	host, port, _ := net.SplitHostPort(link.addr)
	q := u.Query()
	q.Set("host", host)
	q.Set("port", port)
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	db, err := store.Open(context.Background(), u.String(), store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	svc := substrate.New(db, substrate.Options{})
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(rest.Handler(svc, rest.Options{RatePerSecond: -1}))
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv}
	rm := e.room("outage", nil)
	e.do("PUT", "/rooms/outage/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": 1}).must(t, 200)

	link.down()
	for _, req := range []struct{ method, path string }{
		{"GET", "/rooms/outage/context"},
		{"PUT", "/rooms/outage/state"},
	} {
		var body any
		if req.method == "PUT" {
			body = map[string]any{"scope": "_shared", "key": "k", "value": 2}
		}
		r := e.do(req.method, req.path, rm.token, body)
		if r.status != 503 || r.str("error") != "unavailable" || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s %s during the outage: %d %s (Retry-After %q)", req.method, req.path, r.status, r.raw, r.header.Get("Retry-After"))
		}
	}

	link.up()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := e.do("GET", "/rooms/outage/state?scope=_shared&key=k", rm.token, nil)
		if r.status == 200 {
			if !strings.Contains(r.raw, `"value":1`) {
				t.Fatalf("after the outage: %s (the refused write must not have applied)", r.raw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after the database came back: %d %s", r.status, r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
