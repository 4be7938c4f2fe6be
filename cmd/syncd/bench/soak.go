package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/passkeyclient"
)

// The soak's surfaces, in the order the report lists them. A page
// stream's "requests" are the updates it received.
const (
	surfInvoke     = "REST invoke"
	surfContext    = "REST context"
	surfWait       = "REST wait"
	surfState      = "REST state"
	surfMCPInvoke  = "MCP sync_invoke_action"
	surfMCPContext = "MCP sync_read_context"
	surfMCPWait    = "MCP sync_wait"
	surfPage       = "live page updates"
)

var surfaceOrder = []string{surfInvoke, surfContext, surfWait, surfState, surfMCPInvoke, surfMCPContext, surfMCPWait, surfPage}

// Surface is one kind of request of a mixed workload over its measured
// time: how many succeeded (for live page streams: updates received), how
// many failed, and the first failure.
type Surface struct {
	Name       string  `json:"name"`
	Requests   int64   `json:"requests"`
	Errors     int64   `json:"errors"`
	RPS        float64 `json:"rps"`
	FirstError string  `json:"first_error,omitempty"`
}

// Sample is the server as the soak saw it at one moment of its measured
// time. Zero fields were not available (no PID on this machine, no
// -metrics-url).
type Sample struct {
	AtS        float64 `json:"at_s"`
	RSSMiB     float64 `json:"rss_mib"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	Threads    int     `json:"threads"`
	PoolInUse  int32   `json:"pool_in_use"`
	PoolIdle   int32   `json:"pool_idle"`
	PoolMax    int32   `json:"pool_max"`
}

// stallAfter is how long a live page stream may go without an update
// after the room it shows changed before the soak counts it as stalled.
// The page re-renders at each change; ten seconds is far beyond any
// render, and well inside a minute's sample.
const stallAfter = 10 * time.Second

// tally counts a mixed workload's requests per surface.
type tally struct {
	mu       sync.Mutex
	from, to time.Time // the measured time
	s        map[string]*Surface
}

func newTally(from, to time.Time) *tally {
	t := &tally{from: from, to: to, s: map[string]*Surface{}}
	for _, n := range surfaceOrder {
		t.s[n] = &Surface{Name: n}
	}
	return t
}

// add counts one request begun at t0 (outside the measured time: not at
// all).
func (t *tally) add(name string, t0 time.Time, err error) {
	if t0.Before(t.from) || !t0.Before(t.to) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s[name]
	if err == nil {
		s.Requests++
		return
	}
	s.Errors++
	if s.FirstError == "" {
		s.FirstError = err.Error()
	}
}

// people are the soak's signed-in person, their MCP sessions (each its own
// OAuth grant, embodied in one room the person owns) and that room.
type people struct {
	base     string // the server's public URL
	person   *passkeyclient.Person
	room     string
	sessions []*sdk.ClientSession
}

func (pp *people) close() {
	for _, cs := range pp.sessions {
		_ = cs.Close()
	}
}

// publicURL is the server's public base URL as its protected resource
// metadata names it (the OAuth resource and the passkeys' origin are
// that, not the loopback address bench may reach it at). Without
// metadata, the URL bench drives.
func (b *bencher) publicURL(ctx context.Context) string {
	var meta struct{ Resource string }
	if err := b.doJSON(ctx, "GET", "/.well-known/oauth-protected-resource/mcp", "", nil, &meta); err == nil && strings.HasSuffix(meta.Resource, "/mcp") {
		return strings.TrimSuffix(meta.Resource, "/mcp")
	}
	return b.opt.URL
}

// signIn signs a person up the way a browser does (a software passkey
// through the WebAuthn endpoints), creates a room over MCP with a first
// grant and connects n MCP sessions, each with a grant of its own, each
// embodied in that room.
func (b *bencher) signIn(ctx context.Context, n int) (*people, error) {
	pp := &people{base: b.publicURL(ctx), room: b.prefix + "-people"}
	p, err := passkeyclient.SignUp(ctx, pp.base, b.prefix, b.opt.Invite, b.cli.Transport)
	if err != nil {
		return nil, fmt.Errorf("signing a person up at %s: %w (the soak's MCP clients and live pages need one: run the server with -signup open, or pass -invite with a token from `syncd invite`; -mcp-clients 0 -page-streams 0 leave them out)", pp.base, err)
	}
	pp.person = p
	connect := func(i int, rooms map[string]string) (*sdk.ClientSession, error) {
		tok, err := p.Token(ctx, fmt.Sprintf("bench %d", i), rooms)
		if err != nil {
			return nil, fmt.Errorf("OAuth grant for MCP client %d: %w", i, err)
		}
		cli := &http.Client{Transport: passkeyclient.Bearer{Token: tok["access_token"].(string), Base: b.cli.Transport}}
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "syncd-bench", Version: "1"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: pp.base + "/mcp", HTTPClient: cli}, nil)
		if err != nil {
			return nil, fmt.Errorf("MCP client %d: initialize: %w", i, err)
		}
		pp.sessions = append(pp.sessions, cs)
		return cs, nil
	}
	first, err := connect(0, nil)
	if err != nil {
		pp.close()
		return nil, err
	}
	for _, step := range []struct {
		tool string
		args map[string]any
	}{
		{"sync_create_room", map[string]any{"room": pp.room}},
		{"sync_embody", map[string]any{"room": pp.room, "context": "none"}},
		{"sync_register_action", map[string]any{"id": "move", "writes": []any{map[string]any{"key": "moves", "increment": 1}}}},
	} {
		if err := mcpCall(ctx, first, step.tool, step.args); err != nil {
			pp.close()
			return nil, fmt.Errorf("setting up the people's room: %w", err)
		}
	}
	for i := 1; i < n; i++ {
		cs, err := connect(i, map[string]string{pp.room: "write"})
		if err == nil {
			err = mcpCall(ctx, cs, "sync_embody", map[string]any{"room": pp.room, "context": "none"})
		}
		if err != nil {
			pp.close()
			return nil, err
		}
	}
	if n == 0 { // the room is made; no MCP clients run
		pp.close()
		pp.sessions = nil
	}
	return pp, nil
}

// mcpCall calls a tool; a result marked isError is an error too, with
// the text the model would read.
func mcpCall(ctx context.Context, cs *sdk.ClientSession, tool string, args map[string]any) error {
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return fmt.Errorf("%s: %w", tool, err)
	}
	if res.IsError {
		msg := "isError"
		if len(res.Content) > 0 {
			if t, ok := res.Content[0].(*sdk.TextContent); ok {
				msg = t.Text
			}
		}
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return fmt.Errorf("%s: %s", tool, msg)
	}
	return nil
}

// stream is one live room page's event stream as the soak follows it.
type stream struct {
	updates   atomic.Int64
	lastEvent atomic.Int64 // unix nanoseconds of the last update (or of connecting)
	stalled   atomic.Bool
}

// follow keeps the person's live stream of the people's room open until
// ctx ends, counting its updates; whatever ends it early (an error, the
// server closing it, "gone") is an error, and it reconnects as a browser
// does, from the last event it saw.
func (b *bencher) follow(ctx context.Context, pp *people, s *stream, t *tally) {
	last := ""
	for ctx.Err() == nil {
		t0 := time.Now()
		err := b.followOnce(ctx, pp, s, t, &last)
		if ctx.Err() != nil {
			return
		}
		t.add(surfPage, t0, fmt.Errorf("live stream: %w", err))
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (b *bencher) followOnce(ctx context.Context, pp *people, s *stream, t *tally, last *string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", pp.base+"/live/rooms/"+url.PathEscape(pp.room), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	res, err := pp.person.Client().Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 300))
		return fmt.Errorf("HTTP %d %s: %s", res.StatusCode, res.Header.Get("Content-Type"), raw)
	}
	s.lastEvent.Store(time.Now().UnixNano())
	sc := bufio.NewScanner(res.Body)
	// An update carries the page's main section when patches would not be
	// smaller: tens of kilobytes, more for a busy room.
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	event, id, data := "", "", false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			switch event {
			case "change":
				if !data {
					return errors.New("a change without data")
				}
				s.updates.Add(1)
				s.lastEvent.Store(time.Now().UnixNano())
				s.stalled.Store(false)
				t.add(surfPage, time.Now(), nil)
				*last = id
			case "gone":
				return errors.New(`the server said "gone": the person can no longer read the room`)
			}
			event, id, data = "", "", false
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = true
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the server ended the stream")
}

// watchStalls counts a stream as stalled (once per episode) when the room
// changed more than stallAfter ago and the stream has had no update since:
// changed is when the latest successful invocation was sent, so any
// render that reflects it comes after.
// It looks every period (stallAfter a multiple of it).
func watchStalls(ctx context.Context, streams []*stream, changed *atomic.Int64, t *tally, stallAfter, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	var history []int64 // changed, once a period
	lag := int(stallAfter / period)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		history = append(history, changed.Load())
		if len(history) <= lag {
			continue
		}
		history = history[1:]
		ref := history[0] // a change at least stallAfter old
		if ref == 0 {
			continue
		}
		for i, s := range streams {
			if s.lastEvent.Load() < ref && !s.stalled.Swap(true) {
				t.add(surfPage, time.Now(), fmt.Errorf("live stream %d: no update for %s after the room changed (last update %s ago)",
					i, stallAfter, time.Since(time.Unix(0, s.lastEvent.Load())).Round(time.Second)))
			}
		}
	}
}

// metricValues reads the named gauges or counters (without labels) from
// the server's /metrics; nil when there are none.
func (b *bencher) metricValues(ctx context.Context, names ...string) map[string]float64 {
	if b.opt.MetricsURL == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, "GET", b.opt.MetricsURL, nil)
	if err != nil {
		return nil
	}
	res, err := b.cli.Do(req)
	if err != nil {
		return nil
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(res.Body, 4<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for _, n := range names {
			if name == n {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					out[n] = f
				}
			}
		}
	}
	return out
}

// soak runs a mixed closed-loop load for the measured time. Of the REST
// clients (-clients, at least 4), in turn, one invokes "move" on a room,
// one reads its context, one waits (up to 2 s, context=none) for a coming
// move, and one reads a state key. Beside them a person signed up with a
// passkey runs MCP clients (-mcp-clients, each its own OAuth grant,
// embodied in a room the person made over MCP) that invoke, read the
// context and wait in turn, and keeps live room pages of that room open
// (-page-streams), counting their updates: a stream that ends, or gets
// no update for stallAfter while the room changes, is an error. Every
// interval (-intervals, default a minute) it samples the server: resident
// set, descriptors and threads from /proc, goroutines from /metrics, the
// database pool from /readyz.
func (b *bencher) soak(ctx context.Context) (*Result, error) {
	clients := max(4, b.opt.Clients)
	mcpClients, streams := max(0, b.opt.MCPClients), max(0, b.opt.PageStreams)
	res := &Result{Workload: Soak, Label: fmt.Sprintf("soak, %d REST + %d MCP clients, %d live pages", clients, mcpClients, streams), Clients: clients + mcpClients, Rooms: 1,
		Credential: agentTokens(clients)}
	if mcpClients > 0 {
		res.Credential += ", OAuth grants"
	}
	if streams > 0 {
		res.Credential += ", session cookie"
	}
	r, err := b.newRoom(ctx, "soak", clients)
	if err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	var pp *people
	if mcpClients > 0 || streams > 0 {
		if pp, err = b.signIn(ctx, mcpClients); err != nil {
			return nil, fmt.Errorf("setting up: %w", err)
		}
		defer pp.close()
		res.Rooms = 2
	}
	every := b.opt.Intervals
	if every <= 0 {
		every = time.Minute
	}
	measured := time.Now().Add(b.opt.Warmup)
	t := newTally(measured, measured.Add(b.opt.Duration))

	// The streams open before the load starts, so that the warm-up sees
	// them settle.
	sctx, stopStreams := context.WithCancel(ctx)
	var swg sync.WaitGroup
	ss := make([]*stream, streams)
	var changed atomic.Int64 // when the people's room last changed (see watchStalls)
	for i := range ss {
		ss[i] = &stream{}
		ss[i].lastEvent.Store(time.Now().UnixNano())
		swg.Add(1)
		go func() { defer swg.Done(); b.follow(sctx, pp, ss[i], t) }()
	}
	if streams > 0 {
		swg.Add(1)
		go func() { defer swg.Done(); watchStalls(sctx, ss, &changed, t, stallAfter, time.Second) }()
	}

	var points []Sample
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		sample := func() {
			st := readProc(b.opt.PID)
			var ready struct {
				Pool struct {
					Max   int32 `json:"max_conns"`
					InUse int32 `json:"in_use"`
					Idle  int32 `json:"idle"`
				}
			}
			_ = b.doJSON(ctx, "GET", "/readyz", "", nil, &ready)
			m := b.metricValues(ctx, "go_goroutines")
			points = append(points, Sample{AtS: time.Since(measured).Round(every / 10).Seconds(), RSSMiB: float64(st.rssKB) / 1024,
				Goroutines: int(m["go_goroutines"]), FDs: st.fds, Threads: procThreads(b.opt.PID),
				PoolInUse: ready.Pool.InUse, PoolIdle: ready.Pool.Idle, PoolMax: ready.Pool.Max})
		}
		select {
		case <-time.After(time.Until(measured)):
		case <-stop:
			return
		}
		sample()
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				sample()
			case <-stop:
				sample()
				return
			}
		}
	}()
	ctxPath := "/rooms/" + r.id + "/context?" + b.opt.ContextQuery
	b.loop(ctx, res, clients+mcpClients, func(ctx context.Context, c, i int) (int, error) {
		t0 := time.Now()
		if c >= clients {
			k := c - clients
			cs := pp.sessions[k]
			var err error
			// Each client starts at another call, so that a short run
			// sees all three.
			switch (i + k) % 3 {
			case 0:
				err = mcpCall(ctx, cs, "sync_invoke_action", map[string]any{"action": "move"})
				if err == nil {
					changed.Store(t0.UnixNano())
				}
				t.add(surfMCPInvoke, t0, err)
			case 1:
				err = mcpCall(ctx, cs, "sync_read_context", map[string]any{})
				t.add(surfMCPContext, t0, err)
			default:
				// Met now or at the next move (half the time each), so
				// the MCP clients, unlike the REST waiters, rarely wait
				// out the timeout.
				cond := fmt.Sprintf("has(state._shared.moves) && state._shared.moves %% 2 == %d", i%2)
				err = mcpCall(ctx, cs, "sync_wait", map[string]any{"condition": cond, "timeout_ms": 2000, "context": "none"})
				t.add(surfMCPWait, t0, err)
			}
			return 0, err
		}
		tok := r.agents[c%len(r.agents)]
		switch c % 4 {
		case 0:
			body := fmt.Appendf(nil, `{"params":{"n":%d}}`, i)
			out, err := b.do(ctx, "POST", "/rooms/"+r.id+"/actions/move/invoke", tok, body)
			t.add(surfInvoke, t0, err)
			return len(out), err
		case 1:
			out, err := b.do(ctx, "GET", ctxPath, tok, nil)
			t.add(surfContext, t0, err)
			return len(out), err
		case 2:
			// One of seven conditions, met within seven moves: few
			// distinct programs, as agents that wait on the same few
			// things (distinct ones fill the server's program cache,
			// which a leak would be hard to tell from).
			cond := url.QueryEscape(fmt.Sprintf("has(state._shared.moves) && state._shared.moves %% 7 == %d", i%7))
			var out struct{ Triggered, Timeout bool }
			err := b.doJSON(ctx, "GET", "/rooms/"+r.id+"/wait?timeout=2000&context=none&condition="+cond, tok, nil, &out)
			t.add(surfWait, t0, err)
			return 0, err
		default:
			out, err := b.do(ctx, "GET", "/rooms/"+r.id+"/state?scope=_shared&key=moves", tok, nil)
			t.add(surfState, t0, err)
			return len(out), err
		}
	})
	stopStreams()
	swg.Wait()
	close(stop)
	<-sampled
	res.Samples = points
	var notes []string
	for _, n := range surfaceOrder {
		s := t.s[n]
		if s.Requests == 0 && s.Errors == 0 {
			continue
		}
		if res.Seconds > 0 {
			s.RPS = float64(s.Requests) / res.Seconds
		}
		res.Surfaces = append(res.Surfaces, *s)
		notes = append(notes, fmt.Sprintf("%s %.1f/s (%d errors)", s.Name, s.RPS, s.Errors))
	}
	// The page streams' errors are not among the loop's requests.
	res.Errors += t.s[surfPage].Errors
	if res.FirstError == "" {
		res.FirstError = t.s[surfPage].FirstError
	}
	if streams > 0 {
		var per []string
		for _, s := range ss {
			per = append(per, strconv.FormatInt(s.updates.Load(), 10))
		}
		notes = append(notes, "updates per page stream "+strings.Join(per, ", "))
	}
	res.Note = strings.Join(notes, "; ") + "; server sampled every " + every.String()
	return res, nil
}

// writeSoak prints a soak's samples and surfaces as tables.
func writeSoak(w io.Writer, x *Result) {
	if len(x.Samples) > 0 {
		fmt.Fprintf(w, "  %8s %8s %10s %5s %7s %14s\n", "at", "rss MiB", "goroutines", "fds", "threads", "pool use/idle")
		for _, p := range x.Samples {
			g := "-"
			if p.Goroutines > 0 {
				g = strconv.Itoa(p.Goroutines)
			}
			fmt.Fprintf(w, "  %8s %8.1f %10s %5d %7d %9d/%d/%d\n", time.Duration(p.AtS*float64(time.Second)).Round(time.Millisecond), p.RSSMiB, g, p.FDs, p.Threads, p.PoolInUse, p.PoolIdle, p.PoolMax)
		}
	}
	if len(x.Surfaces) > 0 {
		fmt.Fprintf(w, "  %-24s %10s %9s %7s\n", "surface", "requests", "per s", "errors")
		for _, s := range x.Surfaces {
			fmt.Fprintf(w, "  %-24s %10d %9.1f %7d", s.Name, s.Requests, s.RPS, s.Errors)
			if s.FirstError != "" {
				fmt.Fprintf(w, "  first: %s", s.FirstError)
			}
			fmt.Fprintln(w)
		}
	}
}
