package httpmw_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/httpmw"
)

func mustProxies(t *testing.T, s string) *httpmw.Stack {
	t.Helper()
	p, err := httpmw.ParseProxies(s)
	if err != nil {
		t.Fatal(err)
	}
	return httpmw.New(httpmw.Options{TrustedProxies: p})
}

// The client address is the TCP peer unless the peer is a trusted proxy;
// then it is the nearest forwarded address that is not itself a trusted
// proxy. Addresses further back could have been written by the client.
func TestClientIP(t *testing.T) {
	stack := mustProxies(t, "10.0.0.0/8, 127.0.0.1, ::1")
	cases := []struct {
		name, peer string
		headers    map[string]string
		want       string
		header     string // the operator's choice; "" for the default
	}{
		{"direct client", "203.0.113.7:5555", nil, "203.0.113.7", ""},
		{"untrusted peer forging XFF", "203.0.113.7:5555", map[string]string{"X-Forwarded-For": "1.1.1.1"}, "203.0.113.7", ""},
		{"trusted proxy", "127.0.0.1:4000", map[string]string{"X-Forwarded-For": "198.51.100.9"}, "198.51.100.9", ""},
		{"chain of proxies", "127.0.0.1:4000", map[string]string{"X-Forwarded-For": "198.51.100.9, 10.1.2.3"}, "198.51.100.9", ""},
		{"client spoofs the start of the chain", "127.0.0.1:4000", map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.9"}, "198.51.100.9", ""},
		{"garbage in the chain", "127.0.0.1:4000", map[string]string{"X-Forwarded-For": "nonsense, 198.51.100.9"}, "198.51.100.9", ""},
		{"trusted proxy without header", "[::1]:4000", nil, "::1", ""},
		// Only the operator's one header is believed (X-Forwarded-For by
		// default): a client-sent Forwarded passes through proxies that
		// set X-Forwarded-For.
		{"Forwarded ignored by default", "127.0.0.1:4000", map[string]string{"Forwarded": "for=192.0.2.60", "X-Forwarded-For": "198.51.100.9"}, "198.51.100.9", ""},
		{"Forwarded alone ignored by default", "127.0.0.1:4000", map[string]string{"Forwarded": "for=192.0.2.60", "X-Real-Ip": "192.0.2.61"}, "127.0.0.1", ""},
		{"Forwarded when chosen, v6", "[::1]:4000", map[string]string{"Forwarded": `for="[2001:db8::1]:4711";proto=https`}, "2001:db8::1", "Forwarded"},
		{"Forwarded when chosen ignores XFF", "127.0.0.1:4000", map[string]string{"Forwarded": "for=192.0.2.60", "X-Forwarded-For": "6.6.6.6"}, "192.0.2.60", "Forwarded"},
		{"Forwarded chain walked from the right", "127.0.0.1:4000", map[string]string{"Forwarded": "for=6.6.6.6, for=192.0.2.60;proto=https"}, "192.0.2.60", "Forwarded"},
		{"address with a port", "127.0.0.1:4000", map[string]string{"X-Forwarded-For": "6.6.6.6, 198.51.100.9:61000"}, "198.51.100.9", ""},
		{"v6 address with a port", "127.0.0.1:4000", map[string]string{"X-Forwarded-For": "[2001:db8::7]:61000"}, "2001:db8::7", ""},
		{"X-Real-IP when chosen", "127.0.0.1:4000", map[string]string{"X-Real-IP": "192.0.2.62", "X-Forwarded-For": "6.6.6.6"}, "192.0.2.62", "x-real-ip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got string
			stack := stack
			if c.header != "" {
				p, _ := httpmw.ParseProxies("10.0.0.0/8, 127.0.0.1, ::1")
				stack = httpmw.New(httpmw.Options{TrustedProxies: p, ClientIPHeader: c.header})
			}
			h := stack.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = httpmw.ClientIP(r) }))
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = c.peer
			for k, v := range c.headers {
				r.Header.Set(k, v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != c.want {
				t.Fatalf("client %q, want %q", got, c.want)
			}
		})
	}
	if _, err := httpmw.ParseProxies("10.0.0.0/33"); err == nil {
		t.Fatal("bad prefix accepted")
	}
	for _, bad := range []string{"", "X Forwarded", "Host", "authorization", "X-Forwarded-For:"} {
		if httpmw.ValidClientIPHeader(bad) == nil {
			t.Errorf("client address header %q accepted", bad)
		}
	}
}

func TestWrap(t *testing.T) {
	var logs bytes.Buffer
	stack := httpmw.New(httpmw.Options{MaxBodyBytes: 100, AccessLog: slog.New(slog.NewTextHandler(&logs, nil)),
		Logger: slog.New(slog.DiscardHandler)})
	h := stack.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic("boom")
		case "/read":
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, "too big", http.StatusRequestEntityTooLarge)
				return
			}
		}
		_, _ = io.WriteString(w, httpmw.RequestID(r.Context()))
	}))
	do := func(method, path string, body io.Reader) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, body)
		h.ServeHTTP(w, r)
		return w
	}
	w := do("GET", "/", nil)
	if id := w.Header().Get("X-Request-Id"); id == "" || w.Body.String() != id {
		t.Fatalf("request id %q, handler saw %q", id, w.Body.String())
	}
	if !strings.Contains(logs.String(), "request_id="+w.Header().Get("X-Request-Id")) {
		t.Fatalf("access log lacks the request: %s", logs.String())
	}
	w = do("GET", "/panic", nil)
	var body map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != 500 || body["error"] != "internal" || !strings.Contains(body["message"].(string), w.Header().Get("X-Request-Id")) {
		t.Fatalf("panic answered %d %s", w.Code, w.Body)
	}
	w = do("POST", "/", strings.NewReader(strings.Repeat("x", 101)))
	_ = json.Unmarshal(w.Body.Bytes(), &body)
	if w.Code != 413 || body["error"] != "body_too_large" {
		t.Fatalf("declared oversize body answered %d %s", w.Code, w.Body)
	}
	// A body without a declared length is cut at the limit while read.
	r := httptest.NewRequest("POST", "/read", io.MultiReader(strings.NewReader(strings.Repeat("x", 101))))
	r.ContentLength = -1
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 413 {
		t.Fatalf("streamed oversize body answered %d", w.Code)
	}

	// A request id from an untrusted peer is not believed.
	r = httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Request-Id", "forged")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Header().Get("X-Request-Id") == "forged" {
		t.Fatal("untrusted X-Request-Id kept")
	}
}

// Limit keys on what the caller verified: credentials each have their
// budget, requests without a valid one share their address's.
func TestLimit(t *testing.T) {
	stack := httpmw.New(httpmw.Options{RatePerSecond: 1, RateBurst: 3})
	try := func(peer, key string) int {
		w := httptest.NewRecorder()
		stack.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if stack.Limit(w, r, key) {
				w.WriteHeader(204)
			}
		})).ServeHTTP(w, func() *http.Request { r := httptest.NewRequest("GET", "/", nil); r.RemoteAddr = peer; return r }())
		if w.Code == 429 && w.Header().Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		return w.Code
	}
	for i := range 3 {
		if c := try("192.0.2.1:1", ""); c != 204 {
			t.Fatalf("anonymous request %d: %d", i, c)
		}
	}
	if c := try("192.0.2.1:2", ""); c != 429 {
		t.Fatalf("4th anonymous request from one address: %d, want 429", c)
	}
	if c := try("192.0.2.2:1", ""); c != 204 {
		t.Fatalf("another address: %d", c)
	}
	if c := try("192.0.2.1:3", "room:a/"); c != 204 {
		t.Fatalf("a verified credential from the limited address: %d", c)
	}
	if off := httpmw.New(httpmw.Options{RatePerSecond: -1}); !off.Limit(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), "") {
		t.Fatal("negative rate did not disable limiting")
	}
}

// With several processes sharing the limits, each allows its share of the
// rate and burst, and follows the count as it changes.
func TestLimiterShares(t *testing.T) {
	peers := &httpmw.Peers{}
	lim := httpmw.NewLimiter(0.001, 30, peers) // no refill within the test
	allowed := func(key string, n int) int {
		ok := 0
		for range n {
			if _, yes := lim.Allow(key); yes {
				ok++
			}
		}
		return ok
	}
	if got := allowed("alone", 40); got != 30 {
		t.Fatalf("one process allowed %d of a burst of 30", got)
	}
	peers.Set(3)
	if got := allowed("shared", 40); got != 10 {
		t.Fatalf("one of three processes allowed %d, want its share of 10", got)
	}
	peers.Set(0) // never fewer than this process
	if peers.N() != 1 {
		t.Fatalf("N = %d", peers.N())
	}
}

// Every response carries the stack's headers however it starts (a write,
// a status alone, a flush, nothing at all, a panic), a handler's own value
// wins, and a request that has not started its response (a wait, a long
// poll) holds no header map meanwhile: ten thousand waits held ten
// thousand, each set on arrival.
func TestWrapHeadersAtTheResponsesStart(t *testing.T) {
	stack := httpmw.New(httpmw.Options{HSTS: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	want := map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
		"Strict-Transport-Security": "max-age=31536000", "Access-Control-Allow-Origin": "*"}
	for _, tc := range []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		own     map[string]string // headers the handler set itself
	}{
		{"write", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("hi")) }, nil},
		{"status alone", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }, nil},
		{"flush first", func(w http.ResponseWriter, r *http.Request) { _ = http.NewResponseController(w).Flush() }, nil},
		{"nothing written", func(w http.ResponseWriter, r *http.Request) {}, nil},
		{"http.Error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusTeapot) }, nil},
		{"panic", func(w http.ResponseWriter, r *http.Request) { panic("boom") }, nil},
		{"handler's own value", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Referrer-Policy", "same-origin")
			_, _ = w.Write([]byte("hi"))
		}, map[string]string{"Referrer-Policy": "same-origin"}},
		{"handler's own value of an extra header", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "https://app.example")
			_, _ = w.Write([]byte("hi"))
		}, map[string]string{"Access-Control-Allow-Origin": "https://app.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			var before int
			// The extra header's key as a caller may spell it: the stack
			// sends it once, under its canonical name.
			h := stack.WrapWithHeaders(map[string]string{"access-control-allow-origin": "*"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				before = len(rec.Header())
				tc.handler(w, r)
			}))
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			if before != 0 {
				t.Errorf("%d headers set before the response started", before)
			}
			got := rec.Result().Header
			for k, v := range want {
				if own, ok := tc.own[k]; ok {
					v = own
				}
				if got.Get(k) != v {
					t.Errorf("%s: %q, want %q", k, got.Get(k), v)
				}
			}
			if got.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id")
			}
			for k, v := range got {
				if k != http.CanonicalHeaderKey(k) {
					t.Errorf("header %q: %q sent under a non-canonical key", k, v)
				}
			}
		})
	}
}
