package salience

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/syncsubstrate/sync/substrate"
)

// Pattern is a recurring message pattern that suggests a vocabulary gap,
// found from metadata only (kind, sender, timing, which state keys a
// message names), never from what it says.
type Pattern struct {
	Pattern    string `json:"pattern"`
	Kind       string `json:"kind,omitempty"`
	Action     string `json:"action,omitempty"`
	Key        string `json:"key,omitempty"`
	Count      int    `json:"count"`
	Suggestion string `json:"suggestion"`
}

// logWindow is the room's recent log (messages and audit), summarised for
// pattern detection; computed once per snapshot.
type logWindow struct {
	messages int
	// invoked are the successful invocations by action: each reader
	// counts those of the actions it sees.
	invoked map[string]int
	entries []logEntry
	// claims are the window's claims on targets (claimsOf), in seq order.
	claims []claim

	// found are the patterns, found once (they depend on the snapshot
	// and the room's configuration only).
	patMu sync.Mutex
	found map[int][]Pattern
}

// patternsOnce is patterns, computed once per window and threshold.
func (w *logWindow) patternsOnce(r *substrate.Read, min int) []Pattern {
	w.patMu.Lock()
	defer w.patMu.Unlock()
	if p, ok := w.found[min]; ok {
		return p
	}
	if w.found == nil {
		w.found = map[int][]Pattern{}
	}
	w.found[min] = w.patterns(r, min)
	return w.found[min]
}

type logEntry struct {
	seq    int64
	audit  bool
	kind   string // message kind, or invoke/…
	by     string
	action string
	ok     bool
	body   string // a message's body as JSON text (only for key names)
}

// maxWindows bounds the windows kept per snapshot: one per set of
// messages readers see (LogKey), which timers and gates multiply. Past
// it a read computes its own.
const maxWindows = 64

// windows are a snapshot's log windows by LogKey.
type windows struct {
	mu sync.Mutex
	by map[string]*windowOnce
}

type windowOnce struct {
	once sync.Once
	w    *logWindow
}

// window reads the recent log as the reader sees it (RecentLog: messages
// whose timer ended or has not started, or whose gate hides them from the
// reader, are not in it), once per snapshot and set of messages seen
// (LogKey): the log only changes with the seq, which messages a reader
// sees with the time and the reader. A read that fails leaves an empty
// window: salience is advice, never a reason to fail a read.
func window(ctx context.Context, r *substrate.Read) *logWindow {
	ws := r.Memo("salience.windows", func() any { return &windows{by: map[string]*windowOnce{}} }).(*windows)
	key := r.LogKey()
	ws.mu.Lock()
	e := ws.by[key]
	if e == nil {
		e = &windowOnce{}
		if len(ws.by) < maxWindows {
			ws.by[key] = e
		}
	}
	ws.mu.Unlock()
	e.once.Do(func() { e.w = readWindow(ctx, r) })
	return e.w
}

// readWindow reads and summarises the log window for r.
func readWindow(ctx context.Context, r *substrate.Read) *logWindow {
	w := &logWindow{}
	rows, err := r.RecentLog(ctx)
	if err != nil && len(rows) == 0 {
		r.Warn("salience: log window", "err", err)
		return w
	}
	for _, row := range rows {
		e := logEntry{seq: row.Seq}
		scope, raw, writer := row.Scope, row.Value, row.Writer
		// Only the top level is decoded, and of it the few fields read:
		// an audit entry holds whole values written and definitions
		// registered, and decoding 1,000 of them whole at every read was
		// the room page's largest cost at real size (issue 42).
		var v map[string]json.RawMessage
		_ = json.Unmarshal(raw, &v)
		e.audit = scope == substrate.ScopeAudit
		e.by = writer
		if e.audit {
			// The window's audit values are small (sqlLogWindow sends
			// only the fields read), so the claims' decode is cheap.
			var full map[string]any
			_ = json.Unmarshal(raw, &full)
			w.claims = append(w.claims, claimsOf(row.Seq, writer, full)...)
			e.kind = field[string](v, "kind")
			e.ok = field[bool](v, "ok")
			if field[bool](v, "builtin") || e.kind != "invoke" {
				e.kind = "other" // builtins (messages, registrations) are not vocabulary use
			} else {
				e.action = field[string](v, "action")
				if e.ok && e.action != "" {
					if w.invoked == nil {
						w.invoked = map[string]int{}
					}
					w.invoked[e.action]++
				}
			}
		} else {
			e.kind = field[string](v, "kind")
			if e.kind == "" {
				e.kind = "chat"
			}
			if e.kind != "action_invocation" {
				w.messages++
				b, _ := json.Marshal(field[any](v, "body"))
				e.body = string(b)
				// A thread is about what its subject names: every
				// message in it (replies carry the subject) counts as
				// a message about that key, whatever its body says.
				if subj := field[string](v, "subject"); subj != "" {
					e.body += " " + subj
				}
			}
		}
		w.entries = append(w.entries, e)
	}
	sort.Slice(w.entries, func(i, j int) bool { return w.entries[i].seq < w.entries[j].seq })
	sort.SliceStable(w.claims, func(i, j int) bool { return w.claims[i].seq < w.claims[j].seq })
	return w
}

// field is v's field name as a T, the zero T when it is absent or not
// one.
func field[T any](v map[string]json.RawMessage, name string) T {
	var out T
	if raw, ok := v[name]; ok && json.Unmarshal(raw, &out) != nil {
		var zero T
		return zero
	}
	return out
}

// patternGap is how many room entries after a message an invocation may
// come to count as following it.
const patternGap = 6

// patterns finds, in the window: messages of a kind that repeatedly
// precede the same invocation; messages after failed invocations; and
// frequent kinds of message naming the same shared key. They are found
// once for every reader: each reader keeps those that name only what it
// sees, and of the messages about a key, those about one no action it
// sees writes (Salience.health).
func (w *logWindow) patterns(r *substrate.Read, least int) []Pattern {
	c := w.cooccurrences(r.Keys(substrate.ScopeShared))
	out := c.precedingPatterns(least)
	for a, n := range c.afterFail {
		if n >= least {
			out = append(out, Pattern{Pattern: "messages_after_failure", Action: a, Count: n,
				Suggestion: fmt.Sprintf("agents message after %s fails: the vocabulary may not cover that case", a)})
		}
	}
	for pk, n := range c.about {
		if n >= least {
			out = append(out, Pattern{Pattern: "messages_about_key", Kind: pk[0], Key: substrate.ScopeShared + "." + pk[1], Count: n,
				Suggestion: fmt.Sprintf("agents often send %q messages about _shared.%s, which no action writes: a concept without vocabulary", pk[0], pk[1])})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Suggestion < out[j].Suggestion
	})
	return out
}

// cooccurrence is what the window's messages come near: the actions
// invoked after them, the failures before them, the keys they name, with
// the counts that give chance its baseline.
type cooccurrence struct {
	precede   map[[2]string]int // (kind, action) → messages just before an invocation
	afterFail map[string]int    // action → messages just after its failure, by the one who failed
	about     map[[2]string]int // (kind, key) → messages naming the key
	// The chance baseline: how many messages of a kind an invocation of an
	// action would follow within patternGap if the two were unrelated,
	// given how many of each the window holds over its span of seqs.
	sent    map[string]int // kind → messages
	invoked map[string]int // action → invocations
	span    int64
}

// cooccurrences counts, for each message of the window, what comes near it.
func (w *logWindow) cooccurrences(keys []string) *cooccurrence {
	c := &cooccurrence{precede: map[[2]string]int{}, afterFail: map[string]int{}, about: map[[2]string]int{},
		sent: map[string]int{}, invoked: map[string]int{}, span: 1}
	if len(w.entries) > 1 {
		c.span = max(w.entries[len(w.entries)-1].seq-w.entries[0].seq, 1)
	}
	for _, e := range w.entries {
		switch {
		case e.audit && e.kind == "invoke" && e.ok && e.action != "":
			c.invoked[e.action]++
		case !e.audit && e.kind != "action_invocation":
			c.sent[e.kind]++
		}
	}
	for i, e := range w.entries {
		if e.audit || e.kind == "action_invocation" {
			continue
		}
		w.near(c, i)
		for _, k := range keys {
			if len(k) >= 3 && !strings.HasPrefix(k, "_") && mentions(e.body, k) {
				c.about[[2]string{e.kind, k}]++
			}
		}
	}
	return c
}

// near counts the invocations just after the message at i and the
// failure of its sender just before it.
func (w *logWindow) near(c *cooccurrence, i int) {
	e := w.entries[i]
	seen := map[string]bool{}
	for j := i + 1; j < len(w.entries) && w.entries[j].seq-e.seq <= patternGap; j++ {
		n := w.entries[j]
		if n.audit && n.kind == "invoke" && n.ok && n.action != "" && !seen[n.action] {
			seen[n.action] = true
			c.precede[[2]string{e.kind, n.action}]++
		}
	}
	for j := i - 1; j >= 0 && e.seq-w.entries[j].seq <= patternGap; j-- {
		p := w.entries[j]
		if p.audit && p.kind == "invoke" && !p.ok && p.by == e.by && p.action != "" {
			c.afterFail[p.action]++
			break
		}
	}
}

// precedingPatterns are the kinds of message that precede an action more
// than chance: at least twice as many as unrelated messages and
// invocations would give (chatter interleaved with work precedes every
// action about as often as chance says).
func (c *cooccurrence) precedingPatterns(least int) []Pattern {
	var out []Pattern
	for pk, n := range c.precede {
		chance := float64(c.sent[pk[0]]) * min(1, float64(c.invoked[pk[1]])*patternGap/float64(c.span))
		if n >= least && float64(n) >= 2*chance {
			out = append(out, Pattern{Pattern: "messages_precede_action", Kind: pk[0], Action: pk[1], Count: n,
				Suggestion: fmt.Sprintf("%q messages often come just before %s is invoked: its precondition may need to carry what they settle", pk[0], pk[1])})
		}
	}
	return out
}

// mentions reports whether body names key as a whole word.
func mentions(body, key string) bool {
	for i := 0; ; {
		j := strings.Index(body[i:], key)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || !isWordByte(body[j-1])
		after := j+len(key) == len(body) || !isWordByte(body[j+len(key)])
		if before && after {
			return true
		}
		i = j + 1
	}
}

func isWordByte(b byte) bool {
	return b == '_' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// messagesAfter counts the window's messages after seq (a lower bound
// when seq is older than the window).
func (w *logWindow) messagesAfter(seq int64) int64 {
	var n int64
	for _, e := range w.entries {
		if !e.audit && e.seq > seq {
			n++
		}
	}
	return n
}
