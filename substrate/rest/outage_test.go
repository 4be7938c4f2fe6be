package rest_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/rest"
)

// While the database cannot be reached, requests answer 503 unavailable
// with Retry-After (they used to answer 500), and the server recovers on
// its own when it is back.
func TestDatabaseOutageAnswers503(t *testing.T) {
	link := pgtest.NewLink(t, pgtest.URL(t))
	db, err := store.Open(context.Background(), link.URL(), store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	svc := substrate.New(db, substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	srv := httptest.NewServer(rest.Handler(svc, rest.Options{RatePerSecond: -1}))
	t.Cleanup(srv.Close)
	e := &env{t: t, srv: srv, svc: svc}
	rm := e.room("outage", nil)
	e.do("PUT", "/rooms/outage/state", rm.token, map[string]any{"scope": "_shared", "key": "k", "value": 1}).must(t, 200)

	link.Down()
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

	link.Up()
	var r resp
	pgtest.Eventually(t, 20*time.Second, func() bool {
		r = e.do("GET", "/rooms/outage/state?scope=_shared&key=k", rm.token, nil)
		return r.status == 200
	}, "a read to succeed after the database came back")
	if !strings.Contains(r.raw, `"value":1`) {
		t.Fatalf("after the outage: %s (the refused write must not have applied)", r.raw)
	}
}
