package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type bencher struct {
	opt Options
	cli *http.Client
	// waitCli is the waits workload's client: HTTP/2 without TLS (h2c)
	// unless Options.HTTP1, so ten thousand waits share a few connections
	// (each up to the server's streams per connection).
	waitCli *http.Client
	prefix  string // a per-run prefix, so runs against one server never share rooms
}

func newBencher(opt Options) *bencher {
	// One connection per concurrent request: the waits workload holds
	// Waits of them at once.
	tr := &http.Transport{MaxIdleConnsPerHost: max(opt.Waits, opt.Clients, opt.Readers) + 16, IdleConnTimeout: time.Minute}
	var b [4]byte
	_, _ = rand.Read(b[:])
	wcli := &http.Client{Transport: tr}
	if !opt.HTTP1 {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		// At most the connections the waits need (the server takes up to
		// 1,000 streams on each) and a few more: with no limit, each wait
		// that found every connection busy or still being dialled dialled
		// its own, and ten thousand waits opened at once made the server
		// accept thousands of connections it then closed.
		conns := opt.Waits/1000 + 4
		wcli = &http.Client{Transport: &http.Transport{Protocols: &p, IdleConnTimeout: time.Minute, MaxConnsPerHost: conns}}
	}
	return &bencher{opt: opt, cli: &http.Client{Transport: tr}, waitCli: wcli, prefix: "bench-" + hex.EncodeToString(b[:])}
}

// statusError is a response outside 2xx.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

// do sends one request and reads the whole response, returning its body.
func (b *bencher) do(ctx context.Context, method, path, token string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.opt.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := b.cli.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode >= 300 {
		msg := strings.TrimSpace(string(out))
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		return out, &statusError{res.StatusCode, msg}
	}
	return out, nil
}

func (b *bencher) doJSON(ctx context.Context, method, path, token string, body, into any) error {
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	out, err := b.do(ctx, method, path, token, raw)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if into != nil {
		return json.Unmarshal(out, into)
	}
	return nil
}

// room is a room made for a workload, with its agents' tokens.
type room struct {
	id, token, viewToken string
	agents               []string // agent tokens, agent0 first
}

// newRoom creates a room with the "move" action (an `if` and two writes,
// as the table measures) and agents agent0…agentN-1.
func (b *bencher) newRoom(ctx context.Context, name string, agents int) (*room, error) {
	r := &room{id: b.prefix + "-" + name}
	var created struct {
		Token     string
		ViewToken string `json:"view_token"`
	}
	if err := b.doJSON(ctx, "POST", "/rooms", b.opt.CreateToken, map[string]any{"id": r.id}, &created); err != nil {
		return nil, err
	}
	r.token, r.viewToken = created.Token, created.ViewToken
	if err := b.doJSON(ctx, "PUT", "/rooms/"+r.id+"/actions", r.token, map[string]any{
		"id": "move", "params": map[string]any{"n": map[string]any{"type": "integer"}},
		"if": `!has(state._shared.stop) || state._shared.stop == false`,
		"writes": []any{
			map[string]any{"key": "moves", "increment": 1},
			map[string]any{"scope": "${self}", "key": "last", "value": "${params.n}"},
		},
	}, nil); err != nil {
		return nil, err
	}
	r.agents = make([]string, agents)
	err := parallel(ctx, agents, 8, func(i int) error {
		var j struct{ Token string }
		if err := b.doJSON(ctx, "POST", "/rooms/"+r.id+"/agents", r.token, map[string]any{"id": fmt.Sprint("agent", i), "name": fmt.Sprint("Agent ", i)}, &j); err != nil {
			return err
		}
		r.agents[i] = j.Token
		return nil
	})
	return r, err
}

// parallel runs fn(0…n-1) on at most workers goroutines, stopping at the
// first error.
func parallel(ctx context.Context, n, workers int, fn func(i int) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				mu.Lock()
				stop := first != nil
				mu.Unlock()
				if i >= n || stop || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// run runs workload w: one result, or for "context" one per credential.
func (b *bencher) run(ctx context.Context, w string) ([]*Result, error) {
	var res *Result
	var err error
	switch w {
	case Invoke1:
		res, err = b.invoke(ctx, w, "invoke, 1 client, one room", 1, 1, 1)
	case InvokeN:
		res, err = b.invoke(ctx, w, fmt.Sprintf("invoke, %d clients, one room", b.opt.Clients), b.opt.Clients, 1, b.opt.Clients)
	case Rooms:
		res, err = b.invoke(ctx, w, fmt.Sprintf("invoke, %d clients, %d rooms × %d", b.opt.Clients, b.opt.Rooms, b.opt.Agents), b.opt.Clients, b.opt.Rooms, b.opt.Agents)
	case Context:
		return b.context(ctx)
	case Wake:
		res, err = b.wake(ctx)
	case Waits:
		res, err = b.waits(ctx)
	case Soak:
		res, err = b.soak(ctx)
	default:
		return nil, fmt.Errorf("unknown workload %q", w)
	}
	if res == nil {
		return nil, err
	}
	return []*Result{res}, err
}

// agentTokens names n agents' tokens as a Result's credential.
func agentTokens(n int) string {
	if n == 1 {
		return "agent token"
	}
	return fmt.Sprintf("%d agent tokens", n)
}

// sample is one measured request.
type sample struct {
	at  time.Duration // since the measured time began
	dur time.Duration
}

// loop runs fn on clients goroutines back to back (a closed loop) for the
// warm-up and the measured time, and measures the second.
func (b *bencher) loop(ctx context.Context, res *Result, clients int, fn func(ctx context.Context, client, i int) (int, error)) {
	start := time.Now()
	measured := start.Add(b.opt.Warmup)
	end := measured.Add(b.opt.Duration)
	proc := b.watch(measured, end)
	var mu sync.Mutex
	var all []sample
	var bytesRead int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []sample
			var n int64
			var errCount int64
			first := ""
			for i := 0; ; i++ {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				size, err := fn(ctx, c, i)
				d := time.Since(t0)
				if t0.Before(measured) {
					continue
				}
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					errCount++
					if first == "" {
						first = err.Error()
					}
					continue
				}
				mine = append(mine, sample{t0.Sub(measured), d})
				n += int64(size)
			}
			mu.Lock()
			all = append(all, mine...)
			bytesRead += n
			res.Errors += errCount
			if res.FirstError == "" {
				res.FirstError = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	proc.finish(res)
	res.Seconds = b.opt.Duration.Seconds()
	b.summarise(res, all)
	if res.Requests > 0 && bytesRead > 0 {
		res.AvgBytes = bytesRead / res.Requests
	}
}

// summarise fills the rate, the percentiles and the intervals.
func (b *bencher) summarise(res *Result, all []sample) {
	res.Requests = int64(len(all))
	if res.Seconds > 0 {
		res.RPS = float64(len(all)) / res.Seconds
	}
	durs := make([]time.Duration, len(all))
	for i, s := range all {
		durs[i] = s.dur
	}
	res.P50ms, res.P99ms, res.MaxMs = pct(durs, 0.50), pct(durs, 0.99), pct(durs, 1)
	if res.Seconds >= 120 { // issue 17: the last minute against the first
		var first, last int
		for _, s := range all {
			switch {
			case s.at < time.Minute:
				first++
			case s.at.Seconds() >= res.Seconds-60:
				last++
			}
		}
		res.FirstMinuteRPS, res.LastMinuteRPS = float64(first)/60, float64(last)/60
	}
	if b.opt.Intervals <= 0 || res.Seconds <= 0 {
		return
	}
	n := int((time.Duration(res.Seconds*float64(time.Second)) + b.opt.Intervals - 1) / b.opt.Intervals)
	buckets := make([][]time.Duration, n)
	for _, s := range all {
		if k := int(s.at / b.opt.Intervals); k >= 0 && k < n {
			buckets[k] = append(buckets[k], s.dur)
		}
	}
	for k, bk := range buckets {
		length := min(b.opt.Intervals, time.Duration(res.Seconds*float64(time.Second))-time.Duration(k)*b.opt.Intervals)
		res.Intervals = append(res.Intervals, Interval{StartS: (time.Duration(k) * b.opt.Intervals).Seconds(),
			RPS: float64(len(bk)) / length.Seconds(), P50ms: pct(bk, 0.5)})
	}
}

// pct is the q-quantile of ds in milliseconds (it sorts ds).
func pct(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	if !sort.SliceIsSorted(ds, func(i, j int) bool { return ds[i] < ds[j] }) {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	}
	return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000
}

// invoke measures clients invoking "move" across rooms × agents: client c
// takes pair c, c+clients, … in turn, so with as many clients as pairs
// each client keeps to one agent (8 clients on 8 rooms), and with more
// pairs (10,000 rooms × 20 agents) the clients sweep every room.
func (b *bencher) invoke(ctx context.Context, name, label string, clients, rooms, agents int) (*Result, error) {
	res := &Result{Workload: name, Label: label, Credential: agentTokens(min(clients, rooms*agents)), Clients: clients, Rooms: rooms}
	rs := make([]*room, rooms)
	if err := parallel(ctx, rooms, 8, func(i int) error {
		r, err := b.newRoom(ctx, fmt.Sprintf("%s-%d", name, i), agents)
		rs[i] = r
		return err
	}); err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	pairs := rooms * agents
	before := b.groupCommits(ctx)
	defer func() {
		if before == nil {
			return
		}
		if after := b.groupCommits(ctx); after != nil && after[0] > before[0] {
			tx, inv := after[0]-before[0], after[1]-before[1]
			res.Note = fmt.Sprintf("group commit: %.0f transactions carried %.0f invocations (%.2f a transaction, largest so far %.0f; the leader waits 0)", tx, inv, inv/tx, after[2])
			if rounds := after[3] - before[3]; rounds > 0 {
				res.Note += fmt.Sprintf("; %.2f rounds of reads a transaction", rounds/tx)
			}
		}
	}()
	b.loop(ctx, res, clients, func(ctx context.Context, c, i int) (int, error) {
		p := (c + i*clients) % pairs
		r := rs[p/agents]
		body := fmt.Appendf(nil, `{"params":{"n":%d}}`, i)
		out, err := b.do(ctx, "POST", "/rooms/"+r.id+"/actions/move/invoke", r.agents[p%agents], body)
		return len(out), err
	})
	return res, nil
}

// context measures readers reading the lean context of a room of 500 keys
// (about 52 KB of values), 10 agents and 20 views, once for each
// credential of Options.ContextAs in turn, on the same room.
func (b *bencher) context(ctx context.Context) ([]*Result, error) {
	r, err := b.newRoom(ctx, "context", max(10, b.opt.Readers))
	if err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	for batch := range 5 {
		writes := make([]any, 100)
		for i := range writes {
			writes[i] = map[string]any{"scope": "_shared", "key": fmt.Sprintf("key-%03d", batch*100+i),
				"value": map[string]any{"n": i, "label": "some short text", "done": i%2 == 0}}
		}
		if err := b.doJSON(ctx, "PUT", "/rooms/"+r.id+"/state/batch", r.token, map[string]any{"writes": writes}, nil); err != nil {
			return nil, fmt.Errorf("setting up: %w", err)
		}
	}
	for i := range 20 {
		if err := b.doJSON(ctx, "PUT", "/rooms/"+r.id+"/views", r.token, map[string]any{"id": fmt.Sprint("view", i),
			"expr": fmt.Sprintf(`state._shared["key-%03d"].n + %d`, i, i)}, nil); err != nil {
			return nil, fmt.Errorf("setting up: %w", err)
		}
	}
	path := "/rooms/" + r.id + "/context?" + b.opt.ContextQuery
	var results []*Result
	for _, as := range b.opt.ContextAs {
		if len(b.opt.ContextAs) > 1 {
			// One profile per credential, not each overwriting the last.
			b.opt.workload = Context + "-" + as
		}
		res := &Result{Workload: Context, Label: fmt.Sprintf("context of 500 keys, %d readers", b.opt.Readers), Clients: b.opt.Readers, Rooms: 1}
		// Each run's warm-up is its own: what the reader authority's first
		// read builds is not counted in its rate.
		b.loop(ctx, res, b.opt.Readers, func(ctx context.Context, c, _ int) (int, error) {
			out, err := b.do(ctx, "GET", path, contextToken(r, as, c), nil)
			return len(out), err
		})
		res.Credential = contextCredential(as, min(b.opt.Readers, len(r.agents)))
		res.Note = fmt.Sprintf("GET /rooms/:id/context?%s, %d bytes a read", b.opt.ContextQuery, res.AvgBytes)
		res.Load1 = load1()
		results = append(results, res)
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
	}
	return results, nil
}

// contextToken is the token reader c of the context workload reads with.
func contextToken(r *room, as string, c int) string {
	switch as {
	case "room":
		return r.token
	case "view":
		return r.viewToken
	}
	return r.agents[c%len(r.agents)]
}

// contextCredential names a context run's credential: agents readers
// read with their own agents' tokens, or all with the room's or the view's.
func contextCredential(as string, agents int) string {
	switch as {
	case "room":
		return "room token"
	case "view":
		return "view token"
	}
	return agentTokens(agents)
}

// waitingAgents counts the room's agents whose status is waiting.
func (b *bencher) waitingAgents(ctx context.Context, r *room) (int, error) {
	var list struct {
		Agents []struct{ Status string } `json:"agents"`
	}
	if err := b.doJSON(ctx, "GET", "/rooms/"+r.id+"/agents", r.token, nil, &list); err != nil {
		return 0, err
	}
	n := 0
	for _, a := range list.Agents {
		if a.Status == "waiting" {
			n++
		}
	}
	return n, nil
}

// untilWaiting polls until n agents of r wait (or the context ends).
func (b *bencher) untilWaiting(ctx context.Context, r *room, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		got, err := b.waitingAgents(ctx, r)
		if err != nil {
			return err
		}
		if got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d agents waiting after %s", got, n, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// untilOpen waits until the server counts n waits open (its
// sync_waits_open on /metrics); false without the server's metrics.
// Listing ten thousand agents every millisecond until all showed
// waiting, as untilWaiting does, made the server allocate megabytes a
// list while the workload measured its memory.
func (b *bencher) untilOpen(ctx context.Context, n int, limit time.Duration) (bool, error) {
	deadline := time.Now().Add(limit)
	for {
		open, ok := b.metricValues(ctx, "sync_waits_open")["sync_waits_open"]
		if !ok {
			return false, nil
		}
		if int(open) >= n {
			return true, nil
		}
		if time.Now().After(deadline) {
			return true, fmt.Errorf("%.0f of %d waits open after %s", open, n, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wake measures, round after round, how long after an invocation's
// response a waiter whose condition it satisfied gets its own.
func (b *bencher) wake(ctx context.Context) (*Result, error) {
	res := &Result{Workload: Wake, Label: "wait wake-up after the invocation", Credential: agentTokens(2), Clients: 2, Rooms: 1}
	r, err := b.newRoom(ctx, "wake", 2)
	if err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	if err := b.doJSON(ctx, "PUT", "/rooms/"+r.id+"/state", r.token, map[string]any{"scope": "_shared", "key": "moves", "value": 0}, nil); err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	start := time.Now()
	measured := start.Add(b.opt.Warmup)
	end := measured.Add(b.opt.Duration)
	proc := b.watch(measured, end)
	var all []sample
	var invokes []time.Duration
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		type woke struct {
			at  time.Time
			err error
		}
		done := make(chan woke, 1)
		cond := url.QueryEscape(fmt.Sprintf("state._shared.moves > %d", i))
		go func() {
			var out struct{ Triggered bool }
			err := b.doJSON(ctx, "GET", "/rooms/"+r.id+"/wait?timeout=30000&context=none&condition="+cond, r.agents[0], nil, &out)
			if err == nil && !out.Triggered {
				err = errors.New("the wait ended without its condition")
			}
			done <- woke{time.Now(), err}
		}()
		if err := b.untilWaiting(ctx, r, 1, 10*time.Second); err != nil {
			return res, err
		}
		t0 := time.Now()
		ierr := b.doJSON(ctx, "POST", "/rooms/"+r.id+"/actions/move/invoke", r.agents[1], map[string]any{"params": map[string]any{"n": i}}, nil)
		t1 := time.Now()
		w := <-done
		if t0.Before(measured) {
			continue
		}
		if err := errors.Join(ierr, w.err); err != nil {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = err.Error()
			}
			if ierr != nil {
				return res, ierr // the counter no longer matches the conditions
			}
			continue
		}
		invokes = append(invokes, t1.Sub(t0))
		all = append(all, sample{t0.Sub(measured), max(0, w.at.Sub(t1))})
		// The next round's wait must not find this one still listed.
		if err := b.untilWaiting(ctx, r, 0, 10*time.Second); err != nil {
			return res, err
		}
	}
	proc.finish(res)
	res.Seconds = b.opt.Duration.Seconds()
	b.summarise(res, all)
	res.Note = fmt.Sprintf("latency from the invocation's response to the waiter's; rps is rounds/s; the invocations themselves: p50 %.2f ms, p99 %.2f ms",
		pct(invokes, 0.5), pct(invokes, 0.99))
	return res, nil
}

// waits opens Waits concurrent waits on one room (one per agent), then
// satisfies them all with one write, and measures how long after the
// write's response each waiter has its own, and the server's memory and
// descriptors while they wait.
func (b *bencher) waits(ctx context.Context) (*Result, error) {
	n := b.opt.Waits
	res := &Result{Workload: Waits, Label: fmt.Sprintf("%d waits woken by one write", n), Credential: agentTokens(n), Clients: n, Rooms: 1}
	r, err := b.newRoom(ctx, "waits", n)
	if err != nil {
		return nil, fmt.Errorf("setting up: %w", err)
	}
	before := readProc(b.opt.PID)
	cpu0 := before.cpu
	t00 := time.Now()
	cond := url.QueryEscape(`has(state._shared.go) && state._shared.go == true`)
	woke := make([]time.Time, n)
	errsOf := make([]error, n)
	wb := *b
	wb.cli = b.waitCli
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out struct{ Triggered bool }
			err := wb.doJSON(ctx, "GET", "/rooms/"+r.id+"/wait?timeout=120000&context=none&condition="+cond, r.agents[i], nil, &out)
			if err == nil && !out.Triggered {
				err = errors.New("the wait ended without its condition")
			}
			woke[i], errsOf[i] = time.Now(), err
		}()
	}
	counted, err := b.untilOpen(ctx, n, 2*time.Minute)
	if err != nil {
		return res, err
	}
	if !counted {
		if err := b.untilWaiting(ctx, r, n, 2*time.Minute); err != nil {
			return res, err
		}
	}
	// The server's memory with the waits open, before the list below
	// (the room's ten thousand agents, some megabytes of the server's
	// heap while it answers) adds the workload's own load to it: the
	// larger of two readings, as the count reaches n (the last waits
	// still starting) and a second later.
	during := readProc(b.opt.PID)
	mem := b.metricValues(ctx, "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes")
	if counted {
		time.Sleep(time.Second)
		if later := readProc(b.opt.PID); later.ok && later.rssKB > during.rssKB {
			during = later
			mem = b.metricValues(ctx, "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes")
		}
	}
	if counted {
		// Open and shown waiting, before the write that wakes them.
		if err := b.untilWaiting(ctx, r, n, 2*time.Minute); err != nil {
			return res, err
		}
	}
	t0 := time.Now()
	werr := b.doJSON(ctx, "PUT", "/rooms/"+r.id+"/state", r.token, map[string]any{"scope": "_shared", "key": "go", "value": true}, nil)
	t1 := time.Now()
	wg.Wait()
	if werr != nil {
		return res, werr
	}
	var all []sample
	var last time.Time
	for i := range n {
		if errsOf[i] != nil {
			res.Errors++
			if res.FirstError == "" {
				res.FirstError = errsOf[i].Error()
			}
			continue
		}
		all = append(all, sample{0, max(0, woke[i].Sub(t1))})
		if woke[i].After(last) {
			last = woke[i]
		}
	}
	after := readProc(b.opt.PID)
	res.Seconds = time.Since(t0).Seconds()
	b.summarise(res, all)
	res.RPS, res.Intervals = 0, nil // one burst: its rate means nothing
	res.Note = fmt.Sprintf("%d of %d woken, the last %.0f ms after the write's response (the write, with the room token, took %.1f ms)",
		len(all), n, max(0, last.Sub(t1)).Seconds()*1000, t1.Sub(t0).Seconds()*1000)
	if b.opt.PID > 0 && during.ok {
		res.ServerRSSMiB = float64(during.rssKB) / 1024
		res.ServerFDs = during.fds
		res.ServerCPU = 100 * float64(after.cpu-cpu0) / time.Since(t00).Seconds()
		res.Note += fmt.Sprintf("; server while waiting: RSS %.0f MiB (%.0f before, %.1f KiB a wait), %d file descriptors (%d before)",
			float64(during.rssKB)/1024, float64(before.rssKB)/1024, float64(during.rssKB-before.rssKB)/float64(n), during.fds, before.fds)
	}
	if st, ok := mem["go_memstats_stack_inuse_bytes"]; ok {
		res.Note += fmt.Sprintf(", goroutine stacks %.0f MiB, heap in use %.0f MiB", st/(1<<20), mem["go_memstats_heap_inuse_bytes"]/(1<<20))
	}
	if n <= 1000 && last.Sub(t1) > waitsTarget {
		res.Note += fmt.Sprintf("; over the target: up to 1,000 waits woken within %v", waitsTarget)
	}
	return res, nil
}

// waitsTarget is how soon after the write up to 1,000 waits should all be
// woken (cmd/syncd's TestThousandWaits checks they are, not how soon).
const waitsTarget = time.Second

// groupCommits reads the server's group commit counters from /metrics:
// transactions, invocations they carried, the largest batch, their
// rounds of reads (nil: no metrics, or a server without group commit).
func (b *bencher) groupCommits(ctx context.Context) []float64 {
	names := []string{"sync_group_commit_transactions_total", "sync_group_commit_invocations_total", "sync_group_commit_largest",
		"sync_group_commit_rounds_total"}
	m := b.metricValues(ctx, names...)
	if len(m) == 0 {
		return nil
	}
	v := make([]float64, len(names))
	for i, n := range names {
		v[i] = m[n]
	}
	return v
}
