// Package httpmw is the HTTP middleware every surface of the server shares
// (the REST API, /mcp and the authorization server's pages): panic
// recovery, a request id, access logging, the client address behind
// trusted proxies, the request body limit and rate limits.
//
// Rate limits are keyed on what the server verified, never on what a
// client merely sent: a surface calls Limit after it has authenticated the
// request, with the credential's key, or with "" when the request carries
// no valid credential, which is then limited per client address. So random
// bearer strings neither escape the limit nor grow its memory.
package httpmw

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Options configure a Stack. Every field has a working default.
type Options struct {
	// MaxBodyBytes caps a request body. Default 1 MiB.
	MaxBodyBytes int64
	// RatePerSecond is the sustained requests per second allowed per
	// verified credential, and per client address for requests without
	// one. Default 100; negative disables rate limiting.
	RatePerSecond float64
	// RateBurst is the burst above the sustained rate. Default 2× the rate.
	RateBurst int
	// Peers, when set, is the number of syncd processes sharing the rate
	// limits: each allows its share. Default nil: this process alone.
	Peers *Peers
	// TrustedProxies are the addresses whose ClientIPHeader is believed.
	// Default none: the client is the TCP peer.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the one header that names the client behind a
	// trusted proxy: X-Forwarded-For (the default) or another list of
	// addresses such as X-Real-IP, or Forwarded (RFC 7239, its for=
	// parameters). Every other forwarding header is ignored: proxies
	// overwrite the header they set but pass the others on as the client
	// sent them, so believing two would let a client pick its address.
	ClientIPHeader string
	// HSTS sends Strict-Transport-Security (one year) on every response:
	// set it when the public URL is https. Default off.
	HSTS bool
	// AccessLog, when set, receives one record per request (method, path,
	// status, bytes, duration, client, request id). Default off.
	AccessLog *slog.Logger
	// Logger receives panics and internal failures. Default slog.Default().
	Logger *slog.Logger
	// Observe, when set, is called once per request after its response
	// (metrics): r.Pattern is then the pattern of the ServeMux that served
	// it ("" when none matched), never the raw path. Default none.
	Observe func(r *http.Request, status int, took time.Duration)
}

// Stack is one configured middleware chain, shared by the surfaces of one
// server so that a credential's budget is the same whichever surface it
// calls.
type Stack struct {
	opt      Options
	byCred   *Limiter
	byClient *Limiter
	// Requests refused over budget, per credential and per address.
	refusedCred, refusedAddr atomic.Int64
}

// Refusals reports how many requests Limit has refused, over a verified
// credential's budget and over an address's (no valid credential).
func (s *Stack) Refusals() (credential, address int64) {
	return s.refusedCred.Load(), s.refusedAddr.Load()
}

// New returns a stack with opt's defaults filled in.
func New(opt Options) *Stack {
	if opt.MaxBodyBytes <= 0 {
		opt.MaxBodyBytes = 1 << 20
	}
	if opt.RatePerSecond == 0 {
		opt.RatePerSecond = 100
	}
	if opt.RateBurst <= 0 {
		opt.RateBurst = int(2 * opt.RatePerSecond)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.ClientIPHeader == "" {
		opt.ClientIPHeader = "X-Forwarded-For"
	}
	opt.ClientIPHeader = http.CanonicalHeaderKey(opt.ClientIPHeader)
	s := &Stack{opt: opt}
	if opt.RatePerSecond > 0 {
		s.byCred = NewLimiter(opt.RatePerSecond, opt.RateBurst, opt.Peers)
		s.byClient = NewLimiter(opt.RatePerSecond, opt.RateBurst, opt.Peers)
	}
	return s
}

// Options returns the stack's settings, defaults filled in.
func (s *Stack) Options() Options { return s.opt }

// ParseProxies reads a comma-separated list of addresses and CIDR prefixes
// ("10.0.0.0/8, 127.0.0.1, ::1").
func ParseProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q is not an address or CIDR prefix", f)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is not an address or CIDR prefix", f)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

type ctxKey int

const (
	clientKey ctxKey = iota
	requestIDKey
)

// ClientIP is the request's client address: the TCP peer, or, when the
// peer is a trusted proxy, the address the proxies forwarded. Requests
// that did not pass a Stack get the TCP peer.
func ClientIP(r *http.Request) string {
	if ip, ok := r.Context().Value(clientKey).(string); ok {
		return ip
	}
	return peer(r).String()
}

// RequestID is the id Wrap gave the request ("" outside a Stack).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

func peer(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

func (s *Stack) trusted(a netip.Addr) bool {
	for _, p := range s.opt.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP walks the forwarding chain from the nearest hop back, past
// every trusted proxy: the first address not trusted is the client (the
// ones before it could have been written by anyone).
func (s *Stack) clientIP(r *http.Request) string {
	a := peer(r)
	if !a.IsValid() || !s.trusted(a) {
		if !a.IsValid() {
			return r.RemoteAddr
		}
		return a.String()
	}
	hops := forwardedFor(r, s.opt.ClientIPHeader)
	for i := len(hops) - 1; i >= 0; i-- {
		h, err := netip.ParseAddr(hops[i])
		if err != nil {
			// Some proxies write address:port ([v6]:port).
			ap, perr := netip.ParseAddrPort(hops[i])
			if perr != nil {
				break // a garbled chain: trust nothing further back
			}
			h = ap.Addr()
		}
		a = h.Unmap()
		if !s.trusted(a) {
			break
		}
	}
	return a.String()
}

// ValidClientIPHeader reports whether name can be a ClientIPHeader: a
// header field name, and not one a client controls end to end.
func ValidClientIPHeader(name string) error {
	if name == "" {
		return fmt.Errorf("client address header is empty")
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("client address header %q is not a header name (letters, digits and -)", name)
		}
	}
	switch http.CanonicalHeaderKey(name) {
	case "Host", "Authorization", "Cookie", "Origin", "Referer", "User-Agent", "Content-Type", "Content-Length":
		return fmt.Errorf("client address header %q is not a forwarding header; use X-Forwarded-For, X-Real-Ip or Forwarded", name)
	}
	return nil
}

// forwardedFor lists the client addresses of header, oldest first: the
// for= parameters of Forwarded (RFC 7239), or the comma-separated
// addresses of any other header (X-Forwarded-For, X-Real-IP).
func forwardedFor(r *http.Request, header string) []string {
	var out []string
	if header == "Forwarded" {
		for _, line := range r.Header.Values("Forwarded") {
			for _, elem := range strings.Split(line, ",") {
				for _, pair := range strings.Split(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if !ok || !strings.EqualFold(k, "for") {
						continue
					}
					v = strings.Trim(v, `"`)
					if strings.HasPrefix(v, "[") { // [v6]:port
						if end := strings.IndexByte(v, ']'); end > 0 {
							v = v[1:end]
						}
					} else if host, _, err := net.SplitHostPort(v); err == nil {
						v = host
					}
					out = append(out, v)
				}
			}
		}
		return out
	}
	for _, line := range r.Header.Values(header) {
		for _, v := range strings.Split(line, ",") {
			out = append(out, strings.TrimSpace(v))
		}
	}
	return out
}

// Wrap puts next behind the stack. Order, outermost first: the request id
// and the client address go into the context first so that everything
// after can log them; the access log then sees every response, including
// the recovered panic's 500; the body limit refuses oversized requests
// before any work.
func (s *Stack) Wrap(next http.Handler) http.Handler {
	return s.WrapWithHeaders(nil, next)
}

// WrapWithHeaders is Wrap that also sets headers on every response (the
// REST API's Access-Control-Allow-Origin).
//
// The stack's headers are set when the response starts (its first
// WriteHeader, Write or Flush), not when the request arrives, unless the
// handler set them itself: a request that waits (a long poll, an event
// stream) then holds no header map while it waits; ten thousand waits
// held ten thousand.
func (s *Stack) WrapWithHeaders(headers map[string]string, next http.Handler) http.Handler {
	// Canonical once here, so that a handler's own value (set under the
	// canonical key) wins and no header goes out twice.
	if len(headers) > 0 {
		canon := make(map[string]string, len(headers))
		for k, v := range headers {
			canon[http.CanonicalHeaderKey(k)] = v
		}
		headers = canon
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := s.requestID(r)
		client := s.clientIP(r)
		ctx := context.WithValue(context.WithValue(r.Context(), requestIDKey, id), clientKey, client)
		r = r.WithContext(ctx)
		rec := &recorder{ResponseWriter: w, stack: s, id: id, extra: headers}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.opt.Logger.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "request_id", id, "panic", v)
				if !rec.wrote {
					Fail(rec, r, errs.New(errs.Internal, "the server failed on this request (request id %s)", id).WithHint("retry; if it persists, report the request id"))
				}
			}
			if !rec.wrote {
				// A handler that wrote nothing: net/http sends its 200
				// once this returns, with the headers as they are now.
				rec.stamp()
			}
			if s.opt.Observe != nil {
				s.opt.Observe(r, rec.status(), time.Since(start))
			}
			if s.opt.AccessLog != nil {
				s.opt.AccessLog.LogAttrs(ctx, slog.LevelInfo, "request", slog.String("method", r.Method), slog.String("path", r.URL.Path),
					slog.Int("status", rec.status()), slog.Int64("bytes", rec.n), slog.Duration("took", time.Since(start)),
					slog.String("client", client), slog.String("request_id", id))
			}
		}()
		if r.ContentLength > s.opt.MaxBodyBytes {
			Fail(rec, r, errs.New(errs.BodyTooLarge, "request body is %d bytes, over the limit of %d", r.ContentLength, s.opt.MaxBodyBytes).
				WithHint("send less per request; split batches").With("limit", s.opt.MaxBodyBytes))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(rec, r.Body, s.opt.MaxBodyBytes)
		}
		next.ServeHTTP(rec, r)
	})
}

// requestID keeps a trusted proxy's X-Request-Id (so one id follows the
// request through both logs) and makes a new one otherwise.
func (s *Stack) requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 && s.trusted(peer(r)) && printable(id) {
		return id
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Limit takes one request from the budget of key: a verified credential
// (any stable string that names it), or "" for a request with no valid
// credential, limited per client address. Over budget it answers 429 with
// Retry-After and reports false; the caller then stops.
func (s *Stack) Limit(w http.ResponseWriter, r *http.Request, key string) bool {
	if s.byCred == nil {
		return true
	}
	lim, what, refused := s.byCred, "with this credential", &s.refusedCred
	if key == "" {
		lim, what, key, refused = s.byClient, "from this address without a valid credential", AddressKey(ClientIP(r)), &s.refusedAddr
	}
	wait, ok := lim.Allow(key)
	if ok {
		return true
	}
	refused.Add(1)
	secs := int(wait/time.Second) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	Fail(w, r, errs.New(errs.RateLimited, "more than %g requests per second %s", s.opt.RatePerSecond, what).
		WithHint("retry after %d s, and spread requests out (wait for changes instead of polling)", secs).With("retry_after_ms", wait.Milliseconds()))
	return false
}

// Bearer returns the request's bearer token ("" without one).
func Bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// AddressKey is the budget an address draws on: an IPv4 address, or the
// /64 an IPv6 address belongs to (one host commonly holds a whole /64, so
// keying on full addresses would give it endless fresh budgets).
func AddressKey(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil || a.Unmap().Is4() {
		return ip
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// Fail writes err as the API's JSON error body with its code's status.
func Fail(w http.ResponseWriter, r *http.Request, err error) {
	e := errs.From(err)
	if e.Code == errs.Unavailable {
		w.Header().Set("Retry-After", strconv.Itoa(errs.RetryAfter))
	}
	if w.Header().Get("Retry-After") == "" {
		SetRetryAfter(w, e)
	}
	WriteJSON(w, e.Code.Status(), e.Body())
}

// SetRetryAfter sets Retry-After for a 429 the domain timed (room_busy:
// retry_after_ms), in whole seconds rounded up; other errors set nothing.
// The API and the pages both answer with it.
func SetRetryAfter(w http.ResponseWriter, e *errs.Error) {
	if ms, ok := e.Details["retry_after_ms"].(int64); ok && e.Code.Status() == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.FormatInt((ms+999)/1000, 10))
	}
}

// Encoded is a value that encodes itself as valid, compact JSON.
type Encoded interface {
	EncodeJSON() ([]byte, error)
}

// WriteJSON writes v as the response, never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if e, ok := v.(Encoded); ok {
		// Its own encoding (large and partly cached: a context envelope),
		// written as it is rather than scanned again by encoding/json.
		if b, err := e.EncodeJSON(); err == nil {
			w.WriteHeader(status)
			_, _ = w.Write(append(b, '\n'))
			return
		}
	}
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// recorder notes the status and size of a response for the access log.
type recorder struct {
	http.ResponseWriter
	code  int
	n     int64
	wrote bool

	// What the response starts with (stamp).
	stack *Stack
	id    string
	extra map[string]string
}

// stamp sets the stack's headers on a response about to start, where the
// handler did not set them.
func (r *recorder) stamp() {
	h := r.ResponseWriter.Header()
	set := func(k, v string) {
		if _, ok := h[k]; !ok {
			h[k] = []string{v}
		}
	}
	set("X-Request-Id", r.id)
	// Responses are what they say they are, and no page leaks its URL
	// (an authorization code, a next=) to the next site.
	set("X-Content-Type-Options", "nosniff")
	set("Referrer-Policy", "no-referrer")
	if r.stack.opt.HSTS {
		set("Strict-Transport-Security", "max-age=31536000")
	}
	for k, v := range r.extra {
		set(k, v)
	}
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
		r.stamp()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.wrote = true
		r.stamp()
	}
	n, err := r.ResponseWriter.Write(b)
	r.n += int64(n)
	return n, err
}

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// Unwrap lets http.ResponseController reach Flush and deadlines (the MCP
// handler streams; a wait extends its write deadline).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Flush forwards to the underlying writer (SSE responses).
func (r *recorder) Flush() {
	if !r.wrote {
		// Flushing starts the response (200) without a WriteHeader.
		r.wrote = true
		r.stamp()
	}
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
