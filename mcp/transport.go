package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/httpmw"
)

// What /mcp does around the SDK's handler at the HTTP level: it refuses
// JSON-RPC batches, makes a rate-limited tool call a tool result the model
// reads, and keeps event streams alive through proxies.

// rpcInfo is what peekRPC learnt of a POST body.
type rpcInfo struct {
	batch  bool
	method string
	id     json.RawMessage
}

type rpcInfoKey struct{}

// peekRPC reads a POST body (already capped by the shared stack) to learn
// whether it is a batch and, if not, its method and id, then hands the
// same bytes on. A tools/call refused by the per-grant rate limit (which
// runs next, in the bearer check) is answered as that call's isError
// result, so the model reads the limit and when to retry rather than the
// host showing an HTTP failure.
func peekRPC(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Without a bearer token the request goes no further than the
		// bearer check's 401: nothing to learn from its body.
		if r.Method != http.MethodPost || r.Body == nil || httpmw.Bearer(r) == "" {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		if err != nil { // over the body limit: the SDK answers 413
			next.ServeHTTP(w, r)
			return
		}
		var info rpcInfo
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '[' {
			info.batch = true
		} else {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if json.Unmarshal(body, &msg) == nil {
				info.method, info.id = msg.Method, msg.ID
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), rpcInfoKey{}, &info))
		if info.method == "tools/call" && len(info.id) > 0 && string(info.id) != "null" {
			lw := &limitedCall{ResponseWriter: w}
			next.ServeHTTP(lw, r)
			lw.finish(info.id)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errReader ends a replayed body with the error reading it ended with.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// refuseBatches answers a JSON-RPC batch with -32600. The protocol
// revision of 2025-06-18 removed batches, and one HTTP request carrying
// hundreds of tool calls passed the per-grant rate limit as one request.
// It runs after the bearer check, so a batch is still charged to its
// credential's (or address's) budget.
func refuseBatches(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info, _ := r.Context().Value(rpcInfoKey{}).(*rpcInfo); info != nil && info.batch {
			writeRPCError(w, http.StatusBadRequest, nil, -32600,
				"JSON-RPC batches are not supported (the MCP protocol removed them in 2025-06-18): send each request in its own HTTP POST")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, message string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id,
		"error": map[string]any{"code": code, "message": message}})
}

// limitedCall holds back a 429 answer to a tools/call (the rate limit's
// JSON error body) so that finish can answer the call with it instead.
type limitedCall struct {
	http.ResponseWriter
	held bool
	body bytes.Buffer
}

func (l *limitedCall) WriteHeader(code int) {
	if code == http.StatusTooManyRequests {
		l.held = true
		return
	}
	l.ResponseWriter.WriteHeader(code)
}

func (l *limitedCall) Write(b []byte) (int, error) {
	if l.held {
		return l.body.Write(b)
	}
	return l.ResponseWriter.Write(b)
}

func (l *limitedCall) Unwrap() http.ResponseWriter { return l.ResponseWriter }

func (l *limitedCall) Flush() {
	if !l.held {
		_ = http.NewResponseController(l.ResponseWriter).Flush()
	}
}

// finish answers a held 429 as the call's result: isError, with the text
// every tool error has (code, message, hint) and Retry-After kept.
func (l *limitedCall) finish(id json.RawMessage) {
	if !l.held {
		return
	}
	var b map[string]any
	if json.Unmarshal(l.body.Bytes(), &b) != nil || b["error"] == nil {
		b = errs.New(errs.RateLimited, "too many requests with this credential").WithHint("retry in a few seconds").Body()
	}
	raw, err := json.Marshal(&sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: Text(errorJSON(b))}}})
	if err != nil {
		return
	}
	h := l.ResponseWriter.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	l.ResponseWriter.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(l.ResponseWriter).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "result": json.RawMessage(raw)})
}

// keepAlive sends an SSE comment on an idle event stream every interval
// (the newest protocol revision's subscriptions/listen stream stays open
// until the client leaves): proxies close a response that is silent for
// their read timeout (nginx and Caddy cut it at 75 s, many hosts at 30 s
// or 60 s). X-Accel-Buffering: no keeps nginx from holding events back.
// When shutdown ends (the server's shutdown begins), an event stream's
// request is cancelled, so the stream ends cleanly and its client
// reconnects to another process; a response that is not a stream goes on.
func keepAlive(interval time.Duration, shutdown context.Context, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		kw := &aliveWriter{ResponseWriter: w, interval: interval, stop: make(chan struct{}), cancel: cancel}
		defer kw.close()
		if shutdown != nil {
			defer context.AfterFunc(shutdown, kw.shuttingDown)()
		}
		next.ServeHTTP(kw, r.WithContext(ctx))
	})
}

// aliveWriter writes an event stream and, between events, keep-alive
// comments; one lock orders both.
type aliveWriter struct {
	http.ResponseWriter
	interval time.Duration
	cancel   context.CancelFunc // ends the request: the stream's end at shutdown
	mu       sync.Mutex
	headed   bool
	stream   bool
	closing  bool // the server's shutdown began
	last     time.Time
	// tail is the end of what was written: a comment goes only where an
	// event ended (after a blank line), never inside one.
	tail    [2]byte
	stop    chan struct{}
	stopped sync.WaitGroup
}

// shuttingDown cancels the request when the shutdown begins, if by then
// (or later, in writeHeader) the response is an event stream.
func (a *aliveWriter) shuttingDown() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closing = true
	if a.stream {
		a.cancel()
	}
}

func (a *aliveWriter) WriteHeader(code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeHeader(code)
}

// writeHeader starts the beat when the response is an event stream.
func (a *aliveWriter) writeHeader(code int) {
	if a.headed {
		return
	}
	a.headed = true
	if code == http.StatusOK && strings.HasPrefix(a.Header().Get("Content-Type"), "text/event-stream") && !a.stream {
		a.stream = true
		a.Header().Set("X-Accel-Buffering", "no")
		a.tail = [2]byte{'\n', '\n'}
		a.last = time.Now()
		a.stopped.Add(1)
		go a.beat()
		if a.closing {
			a.cancel() // begun during the shutdown: end it at once
		}
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *aliveWriter) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeHeader(http.StatusOK) // as net/http does on a first Write
	n, err := a.ResponseWriter.Write(b)
	if n > 0 {
		if n >= 2 {
			a.tail = [2]byte{b[n-2], b[n-1]}
		} else {
			a.tail = [2]byte{a.tail[1], b[0]}
		}
		a.last = time.Now()
	}
	return n, err
}

func (a *aliveWriter) Flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writeHeader(http.StatusOK)
	_ = http.NewResponseController(a.ResponseWriter).Flush()
}

func (a *aliveWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func (a *aliveWriter) beat() {
	defer a.stopped.Done()
	t := time.NewTicker(a.interval / 4)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		a.mu.Lock()
		if time.Since(a.last) >= a.interval && a.tail == [2]byte{'\n', '\n'} {
			if _, err := io.WriteString(a.ResponseWriter, ": keep-alive\n\n"); err != nil {
				a.mu.Unlock()
				return
			}
			_ = http.NewResponseController(a.ResponseWriter).Flush()
			a.last = time.Now()
		}
		a.mu.Unlock()
	}
}

// close stops the beat before the handler returns: nothing may write to
// the response after that.
func (a *aliveWriter) close() {
	close(a.stop)
	a.stopped.Wait()
}
