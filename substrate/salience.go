package substrate

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Adaptive salience (seed 000 §VII): the substrate's opinion about
// attention, computed per read and per agent from metadata only. It adds
// to the envelope (_context._attention, the _vocabulary_health system
// view, annotations on actions) and never withholds: whatever it leaves
// out at lean is counted, with the read that shows it, and availability
// never changes.

// SalienceConfig are the thresholds of adaptive salience. A room overrides
// any of them in the state entry _shared._config under "salience"; the
// help key vocabulary_review documents them.
type SalienceConfig struct {
	// Off turns adaptive salience off for the room. Default false.
	Off bool `json:"off"`
	// StaleAfterMutations: an action registered more than this many room
	// mutations ago and not invoked since is stale. Default 50.
	StaleAfterMutations int64 `json:"stale_after_mutations"`
	// StaleAfterMinutes: the same, in minutes since registration (either
	// makes it stale). Default 60.
	StaleAfterMinutes float64 `json:"stale_after_minutes"`
	// StaleFraction: stale actions over all actions past which the
	// vocabulary is degenerating and stale actions are listed at lean.
	// Default 0.3.
	StaleFraction float64 `json:"stale_fraction"`
	// MessageRatio: non-action messages per invocation (in the recent
	// window) past which the message channel is said to dominate.
	// Default 3.
	MessageRatio float64 `json:"message_ratio"`
	// Decay multiplies an item's reinforcement score on each context read
	// of the room that did not use it. Default 0.95.
	Decay float64 `json:"decay"`
	// LowSalience is the score under which an item is flagged
	// _low_salience. Default 0.2 (about 32 reads without use).
	LowSalience float64 `json:"low_salience"`
	// OmitLowAtLean leaves low-salience actions out of lean contexts
	// (counted in _attention, with the read that shows them). Default
	// false: annotate only.
	OmitLowAtLean bool `json:"omit_low_salience_at_lean"`
	// FirstReadFull reads an agent's first context at depth full, once.
	// Default true.
	FirstReadFull *bool `json:"first_read_full"`
	// PatternMin is how often a message pattern must recur to be
	// suggested as a vocabulary gap. Default 3.
	PatternMin int `json:"pattern_min"`
}

func defaultSalience() SalienceConfig {
	yes := true
	return SalienceConfig{StaleAfterMutations: 50, StaleAfterMinutes: 60, StaleFraction: 0.3, MessageRatio: 3,
		Decay: 0.95, LowSalience: 0.2, FirstReadFull: &yes, PatternMin: 3}
}

// salienceOf is the room's configuration: the defaults with what
// _shared._config.salience sets (fields of the wrong type are ignored).
func salienceOf(snap *snapshot) SalienceConfig {
	c := defaultSalience()
	r := snap.scopes[ScopeShared]["_config"]
	if r == nil {
		return c
	}
	var cfg struct {
		Salience json.RawMessage `json:"salience"`
	}
	if json.Unmarshal(r.Value, &cfg) != nil || len(cfg.Salience) == 0 {
		return c
	}
	var o SalienceConfig
	if json.Unmarshal(cfg.Salience, &o) != nil {
		return c
	}
	c.Off = o.Off
	c.OmitLowAtLean = o.OmitLowAtLean
	if o.FirstReadFull != nil {
		c.FirstReadFull = o.FirstReadFull
	}
	pos := func(dst *float64, v float64) {
		if v > 0 {
			*dst = v
		}
	}
	pos(&c.StaleAfterMinutes, o.StaleAfterMinutes)
	pos(&c.StaleFraction, o.StaleFraction)
	pos(&c.MessageRatio, o.MessageRatio)
	pos(&c.LowSalience, o.LowSalience)
	if o.Decay > 0 && o.Decay <= 1 {
		c.Decay = o.Decay
	}
	if o.StaleAfterMutations > 0 {
		c.StaleAfterMutations = o.StaleAfterMutations
	}
	if o.PatternMin > 0 {
		c.PatternMin = o.PatternMin
	}
	return c
}

// usage is one action's or view's row of vocabulary_usage.
type usage struct {
	Uses        int64
	LastUsedSeq int64
	Score       float64
	ReadsAtUse  int64
}

// usageKey names an item of the vocabulary.
func usageKey(kind, id string) string { return kind + ":" + id }

// loadUsage reads the room's vocabulary usage (a few rows per action and
// view).
func loadUsage(ctx context.Context, q querier, roomID string) (map[string]*usage, error) {
	rows, err := q.Query(ctx, sqlUsage, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*usage{}
	for rows.Next() {
		var kind, id string
		var u usage
		var last *int64
		if err := rows.Scan(&kind, &id, &u.Uses, &last, &u.Score, &u.ReadsAtUse); err != nil {
			return nil, err
		}
		if last != nil {
			u.LastUsedSeq = *last
		}
		out[usageKey(kind, id)] = &u
	}
	return out, rows.Err()
}

// vocabTouch records, in a mutation, that an action or view was used
// (invoked, or read by an invoked action's expressions) or registered.
type vocabTouch struct {
	kind, id string
	use      bool
}

// touchVocabulary queues the mutation's vocabulary uses at seq: uses and
// last use move for what was used; every touched item's score is decayed
// to now and reinforced by one.
func (m *mutation) touchVocabulary(seq int64, decay float64) {
	if len(m.vocab) == 0 {
		return
	}
	kinds := make([]string, len(m.vocab))
	ids := make([]string, len(m.vocab))
	uses := make([]bool, len(m.vocab))
	for i, t := range m.vocab {
		kinds[i], ids[i], uses[i] = t.kind, t.id, t.use
	}
	m.batch.Queue(sqlTouchVocabulary, m.room, kinds, ids, uses, seq, m.now, decay)
}

// viewRefs finds views.<id> and views["id"] in an expression.
var viewRefs = regexp.MustCompile(`views(?:\.([A-Za-z_][A-Za-z0-9_]*)|\["([^"\\]+)"\])`)

// viewsReadBy are the ids of the views the action's expressions read.
func viewsReadBy(def *ActionDef) []string {
	srcs := []string{def.If, def.Enabled, def.Result}
	for _, w := range def.Writes {
		if w.Expr {
			raw, _ := json.Marshal(w.Value)
			srcs = append(srcs, string(raw))
			raw, _ = json.Marshal(w.Merge)
			srcs = append(srcs, string(raw))
		}
	}
	seen := map[string]bool{}
	var out []string
	for _, src := range srcs {
		for _, m := range viewRefs.FindAllStringSubmatch(src, -1) {
			id := m[1] + m[2]
			if !seen[id] && id != viewContested && id != viewHealth {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// Attention is _context._attention: what the substrate thinks deserves
// the reader's attention, from metadata only.
type Attention struct {
	// BrokenViews are the views whose value is an error.
	BrokenViews []string `json:"broken_views,omitempty"`
	// YourBrokenViews are the reader's own broken views with their
	// errors, shown whatever the request left out: its model of the room
	// is wrong, which is always worth knowing.
	YourBrokenViews map[string]any `json:"your_broken_views,omitempty"`
	// StaleActions are actions registered a while ago and never invoked
	// since.
	StaleActions []string `json:"stale_actions,omitempty"`
	// SinceYourLastRead is what changed since the reader's previous
	// context read (absent on its first).
	SinceYourLastRead *SinceLastRead `json:"since_your_last_read,omitempty"`
	// YouElided are sections this read left out (by request or budget)
	// that changed since the reader's last read.
	YouElided []string `json:"you_elided,omitempty"`
	// LowSalience are actions and views nobody has used for a long while
	// (they still work); Omitted counts those a lean read left out.
	LowSalience []string `json:"low_salience,omitempty"`
	Omitted     *Omitted `json:"low_salience_omitted,omitempty"`
	// VocabularyHealth is the room's assessment: progressive, stable or
	// degenerating (details in the _vocabulary_health view).
	VocabularyHealth string `json:"vocabulary_health,omitempty"`
	// Finding is the health's strongest finding, in one line, so that a
	// read whose budget cut the _vocabulary_health view still carries it.
	Finding string `json:"finding,omitempty"`
}

// Omitted counts what a lean read left out for low salience, and the read
// that shows it.
type Omitted struct {
	Actions int    `json:"actions"`
	Expand  string `json:"expand"`
}

// SinceLastRead is the room's change since the reader's last context read.
type SinceLastRead struct {
	FromSeq        int64    `json:"from_seq"`
	StateChanges   int      `json:"state_changes"`
	NewActions     []string `json:"new_actions"`
	ActionsInvoked []string `json:"actions_invoked"`
	ViewsChanged   []string `json:"views_changed"`
	NewMessages    int64    `json:"new_messages"`
}

// salience is what one read knows for adaptive salience.
type salience struct {
	cfg   SalienceConfig
	usage map[string]*usage
	// reads is the room's context reads so far (the decay clock); self
	// the reader's presence row (nil for a caller without an agent).
	reads int64
	self  *presence
}

// newSalience gathers the read's salience inputs, nil when it is off.
func (s *Service) newSalience(rc *roomCtx, u map[string]*usage) *salience {
	cfg := salienceOf(rc.snap)
	if s.noSalience || cfg.Off || u == nil {
		return nil
	}
	sl := &salience{cfg: cfg, usage: u}
	for i := range rc.agents {
		sl.reads += rc.agents[i].ContextReads
		if rc.agents[i].ID == rc.self {
			sl.self = &rc.agents[i]
		}
	}
	return sl
}

// score is an item's reinforcement now: its score at its last use,
// decayed by the room's reads since. An item without a usage row (made
// before usage was kept) counts as fresh.
func (sl *salience) score(kind, id string) float64 {
	u := sl.usage[usageKey(kind, id)]
	if u == nil {
		return 1
	}
	return u.Score * math.Pow(sl.cfg.Decay, float64(max(sl.reads-u.ReadsAtUse, 0)))
}

func (sl *salience) low(kind, id string) bool { return sl.score(kind, id) < sl.cfg.LowSalience }

// stale reports an action registered long enough ago (in mutations or
// minutes) and not invoked since.
func (sl *salience) stale(rc *roomCtx, id string) bool {
	a := rc.snap.actions[id]
	if a == nil {
		return false
	}
	if u := sl.usage[usageKey("action", id)]; u != nil && u.LastUsedSeq > a.r.Revision {
		return false
	}
	old := rc.snap.seq-a.r.Revision > sl.cfg.StaleAfterMutations
	if !a.r.UpdatedAt.IsZero() && rc.now.Sub(a.r.UpdatedAt) > time.Duration(sl.cfg.StaleAfterMinutes*float64(time.Minute)) {
		old = true
	}
	return old
}

// customActions are the room's live actions (not builtins), sorted.
func customActions(rc *roomCtx) []string {
	var out []string
	for id, a := range rc.snap.actions {
		if a.r.timer.live(rc.now) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// brokenViews are the views this reader sees whose value is an error.
func brokenViews(rc *roomCtx) []string {
	var out []string
	for id, v := range rc.views {
		if m, ok := v.(map[string]any); ok && m["_error"] != nil && !strings.HasPrefix(id, "_") {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// since computes what changed after the reader's last read, from the
// snapshot's revisions and the usage's last uses. A view changed when its
// definition did or a state entry it reads (by path) did; deletions are
// not counted.
func (sl *salience) since(rc *roomCtx) *SinceLastRead {
	if sl.self == nil || sl.self.ContextReads == 0 {
		return nil
	}
	from := sl.self.LastContextSeq
	out := &SinceLastRead{FromSeq: from, NewActions: []string{}, ActionsInvoked: []string{}, ViewsChanged: []string{}}
	for scope, rows := range rc.snap.scopes {
		if strings.HasPrefix(scope, "_") && scope != ScopeShared || !rc.visible(scope) {
			continue
		}
		// Only entries this reader sees: a change to one its gate hides
		// (or whose timer ran out) is not its news, and counting it
		// would tell it the hidden entry moved.
		seen, _ := rc.state[scope].(map[string]any)
		for key, r := range rows {
			if _, ok := seen[key]; ok && r.Revision > from {
				out.StateChanges++
			}
		}
	}
	for _, id := range customActions(rc) {
		if rc.snap.actions[id].r.Revision > from && rc.actEnabled[id] {
			out.NewActions = append(out.NewActions, id)
		}
		if u := sl.usage[usageKey("action", id)]; u != nil && u.LastUsedSeq > from {
			out.ActionsInvoked = append(out.ActionsInvoked, id)
		}
	}
	changed := map[string]bool{}
	for _, v := range rc.snap.views { // in dependency order
		if _, shown := rc.views[v.def.ID]; !shown {
			continue
		}
		if v.r.Revision > from || readsChangedState(rc, v.def.Expr, viewSelf(v.def), from) {
			changed[v.def.ID] = true
		}
		for _, m := range viewRefs.FindAllStringSubmatch(v.def.Expr, -1) {
			if changed[m[1]+m[2]] {
				changed[v.def.ID] = true
			}
		}
	}
	for id := range changed {
		out.ViewsChanged = append(out.ViewsChanged, id)
	}
	sort.Strings(out.ViewsChanged)
	return out
}

// readsChangedState reports whether src reads (by path) a state entry or
// scope changed after seq; self is the scope src reads as state.self (a
// view's registrar's).
func readsChangedState(rc *roomCtx, src, self string, after int64) bool {
	for _, m := range statePath.FindAllStringSubmatch(src, -1) {
		scope := m[1]
		if scope == ScopeSelf {
			if scope = self; scope == "" {
				continue
			}
		}
		if r := rc.snap.scopes[scope][m[2]]; r != nil && r.Revision > after {
			return true
		}
	}
	return false
}

// attention assembles _context._attention for the envelope (annotate
// adds what needs the log: new messages and you_elided).
func (s *Service) attention(rc *roomCtx, sl *salience, health *Health) *Attention {
	at := &Attention{BrokenViews: brokenViews(rc), VocabularyHealth: health.Assessment, Finding: health.strongest()}
	for _, id := range at.BrokenViews {
		for _, v := range rc.snap.views {
			if v.def.ID == id && rc.self != "" && (v.def.RegisteredBy == rc.self || v.def.Scope == rc.self) {
				if at.YourBrokenViews == nil {
					at.YourBrokenViews = map[string]any{}
				}
				at.YourBrokenViews[id] = rc.views[id]
			}
		}
	}
	for _, id := range customActions(rc) {
		if !rc.actEnabled[id] {
			continue
		}
		if sl.stale(rc, id) {
			at.StaleActions = append(at.StaleActions, id)
		}
		if sl.low("action", id) {
			at.LowSalience = append(at.LowSalience, id)
		}
	}
	for _, v := range rc.snap.views {
		if _, shown := rc.views[v.def.ID]; shown && sl.low("view", v.def.ID) {
			at.LowSalience = append(at.LowSalience, "views."+v.def.ID)
		}
	}
	at.SinceYourLastRead = sl.since(rc)
	return at
}

// youElided are the sections in elided that changed since the last read.
func youElided(rc *roomCtx, since *SinceLastRead, elided []string) []string {
	if since == nil {
		return nil
	}
	var out []string
	for _, sec := range elided {
		changed := false
		switch {
		case sec == "state":
			changed = since.StateChanges > 0
		case strings.HasPrefix(sec, "state."):
			scope := strings.TrimPrefix(sec, "state.")
			if scope == ScopeSelf {
				scope = rc.self
			}
			for _, r := range rc.snap.scopes[scope] {
				if r.Revision > since.FromSeq {
					changed = true
					break
				}
			}
		case sec == "views":
			changed = len(since.ViewsChanged) > 0
		case sec == "actions":
			changed = len(since.NewActions) > 0
		case sec == "messages":
			changed = since.NewMessages > 0
		}
		if changed {
			out = append(out, sec)
		}
	}
	return out
}

// Health is the _vocabulary_health system view: the room's vocabulary
// assessed as a theory of what the room is for (seed 000 §7.3).
type Health struct {
	TotalActions         int       `json:"total_actions"`
	TotalViews           int       `json:"total_views"`
	BrokenViews          int       `json:"broken_views"`
	StaleActions         int       `json:"stale_actions"`
	ContestedTargets     int       `json:"contested_targets"`
	MessageToActionRatio float64   `json:"message_to_action_ratio"`
	Assessment           string    `json:"assessment"`
	Reasons              []string  `json:"reasons"`
	Suggestions          []string  `json:"suggestions"`
	Patterns             []Pattern `json:"patterns,omitempty"`
	// OverlappingPurposes are pairs of actions whose descriptions and
	// intents say much the same (seed 000 §7.2).
	OverlappingPurposes [][2]string `json:"overlapping_purposes,omitempty"`
}

// strongest is the health's one finding most worth a reader's attention,
// or "": a broken view, else the strongest message pattern, else
// overlapping purposes, else why the vocabulary is degenerating.
func (h *Health) strongest() string {
	switch {
	case h.BrokenViews > 0:
		return h.Reasons[0]
	case len(h.Patterns) > 0:
		return h.Patterns[0].Suggestion
	case len(h.OverlappingPurposes) > 0:
		p := h.OverlappingPurposes[0]
		return fmt.Sprintf("%s and %s state overlapping purposes: merge them, or say how they differ", p[0], p[1])
	case h.Assessment == "degenerating" && len(h.Reasons) > 0:
		return h.Reasons[0]
	}
	return ""
}

// purposeWords are the words of an action's description and intent that
// say what it is for (short and common words left out).
func purposeWords(def *ActionDef) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(def.Description+" "+def.Intent), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_')
	}) {
		if len(w) >= 4 && !stopWords[w] {
			out[strings.TrimSuffix(w, "s")] = true
		}
	}
	return out
}

var stopWords = map[string]bool{"that": true, "this": true, "with": true, "from": true, "your": true, "their": true, "when": true, "which": true,
	"into": true, "them": true, "they": true, "what": true, "only": true, "each": true, "have": true, "will": true, "does": true, "about": true}

// overlappingPurposes pairs the actions whose purpose words mostly
// coincide (Jaccard index at least 0.6, three words or more in common).
func overlappingPurposes(rc *roomCtx, acts []string) [][2]string {
	words := make([]map[string]bool, len(acts))
	for i, id := range acts {
		words[i] = purposeWords(rc.snap.actions[id].def)
	}
	var out [][2]string
	for i := range acts {
		for j := i + 1; j < len(acts); j++ {
			common := 0
			for w := range words[i] {
				if words[j][w] {
					common++
				}
			}
			union := len(words[i]) + len(words[j]) - common
			if common >= 3 && float64(common) >= 0.6*float64(union) {
				out = append(out, [2]string{acts[i], acts[j]})
			}
		}
	}
	return out
}

// health assesses the room for the reader (broken views are those it
// sees).
func (s *Service) health(ctx context.Context, rc *roomCtx, sl *salience) *Health {
	h := &Health{Reasons: []string{}, Suggestions: []string{}}
	// Only the vocabulary the reader sees: an action or view its enabled
	// hides is not named, nor counted, in what the reader is told.
	var acts []string
	for _, id := range customActions(rc) {
		if rc.actEnabled[id] {
			acts = append(acts, id)
		}
	}
	h.TotalActions = len(acts)
	for id := range rc.views {
		if !strings.HasPrefix(id, "_") {
			h.TotalViews++
		}
	}
	h.BrokenViews = len(brokenViews(rc))
	recentUsed, recent := 0, 0
	for _, id := range acts {
		if sl.stale(rc, id) {
			h.StaleActions++
		}
		a := rc.snap.actions[id]
		if rc.snap.seq-a.r.Revision <= sl.cfg.StaleAfterMutations {
			recent++
			if u := sl.usage[usageKey("action", id)]; u != nil && u.LastUsedSeq > a.r.Revision {
				recentUsed++
			}
		}
	}
	if c, ok := rc.views[viewContested].(map[string]any); ok {
		h.ContestedTargets = len(c)
	}
	win := rc.snap.window(ctx, s)
	if win.invocations > 0 {
		h.MessageToActionRatio = math.Round(float64(win.messages)/float64(win.invocations)*10) / 10
	} else {
		h.MessageToActionRatio = float64(win.messages)
	}
	for _, p := range win.patternsOnce(rc, sl.cfg.PatternMin) {
		// Found once for every reader (from the log, _audit included);
		// one naming an action hidden from this reader is not its news.
		if p.Action == "" || rc.actEnabled[p.Action] {
			h.Patterns = append(h.Patterns, p)
		}
	}

	degenerating := false
	if h.BrokenViews > 0 {
		degenerating = true
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d views fail to evaluate: their model of the room is wrong", h.BrokenViews))
		h.Suggestions = append(h.Suggestions, "fix a broken view by registering it again with the same id and a corrected expression")
	}
	if h.TotalActions > 0 && float64(h.StaleActions)/float64(h.TotalActions) > sl.cfg.StaleFraction {
		degenerating = true
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d of %d actions were registered and never invoked since: the vocabulary is not load-bearing", h.StaleActions, h.TotalActions))
		h.Suggestions = append(h.Suggestions, "retire stale actions the room does not need (_delete_action)")
	}
	if win.messages >= 10 && h.MessageToActionRatio > sl.cfg.MessageRatio {
		degenerating = true
		h.Reasons = append(h.Reasons, fmt.Sprintf("%.1f messages per invocation recently: the informal channel dominates", h.MessageToActionRatio))
		h.Suggestions = append(h.Suggestions, "formalise what agents keep negotiating in messages as an action")
	}
	if h.ContestedTargets > 0 {
		h.Suggestions = append(h.Suggestions, "see help key contested_actions: several actions write the same keys")
	}
	for _, p := range h.Patterns {
		h.Suggestions = append(h.Suggestions, p.Suggestion)
	}
	h.OverlappingPurposes = overlappingPurposes(rc, acts)
	for _, pair := range h.OverlappingPurposes {
		h.Suggestions = append(h.Suggestions, fmt.Sprintf("%s and %s state overlapping purposes: merge them, or say in their descriptions how they differ", pair[0], pair[1]))
	}
	switch {
	case degenerating:
		h.Assessment = "degenerating"
	case recentUsed > 0:
		h.Assessment = "progressive"
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d recently registered actions are being invoked", recentUsed))
	default:
		h.Assessment = "stable"
		if h.TotalActions == 0 {
			h.Reasons = append(h.Reasons, "no actions yet: see help key vocabulary_bootstrap")
		} else if recent > 0 {
			h.Reasons = append(h.Reasons, fmt.Sprintf("%d recently registered actions are not invoked yet", recent))
		} else {
			h.Reasons = append(h.Reasons, "the vocabulary is established; no new actions recently")
		}
	}
	return h
}

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
	messages, invocations int
	entries               []logEntry

	// found are the patterns, found once (they depend on the snapshot
	// and the room's configuration only).
	patMu sync.Mutex
	found map[int][]Pattern
}

// patternsOnce is patterns, computed once per window and threshold.
func (w *logWindow) patternsOnce(rc *roomCtx, min int) []Pattern {
	w.patMu.Lock()
	defer w.patMu.Unlock()
	if p, ok := w.found[min]; ok {
		return p
	}
	if w.found == nil {
		w.found = map[int][]Pattern{}
	}
	w.found[min] = w.patterns(rc, min)
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

// windowSize is how many recent entries of each log pattern detection
// reads.
const windowSize = 500

// window reads the recent log once per snapshot (the log only changes
// with the seq). A read that fails leaves an empty window: salience is
// advice, never a reason to fail a read.
func (snap *snapshot) window(ctx context.Context, s *Service) *logWindow {
	snap.winOnce.Do(func() {
		w := &logWindow{}
		snap.win = w
		rows, err := s.db.Query(ctx, sqlLogWindow, snap.room, windowSize, snap.seq)
		if err != nil {
			s.log.Warn("salience: log window", "room", snap.room, "err", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var e logEntry
			var scope string
			var raw []byte
			var writer string
			var gated bool
			if err := rows.Scan(&scope, &e.seq, &raw, &writer, &gated); err != nil {
				return
			}
			if gated {
				// The window is every reader's, and a gated message is
				// hidden from some: its kind, sender and the keys it names
				// are not theirs to learn from a pattern. It still counts
				// as a message.
				w.messages++
				continue
			}
			var v map[string]any
			_ = json.Unmarshal(raw, &v)
			e.audit = scope == ScopeAudit
			e.by = writer
			if e.audit {
				e.kind, _ = v["kind"].(string)
				e.ok, _ = v["ok"].(bool)
				if v["builtin"] == true || e.kind != "invoke" {
					e.kind = "other" // builtins (messages, registrations) are not vocabulary use
				} else {
					e.action, _ = v["action"].(string)
					if e.ok {
						w.invocations++
					}
				}
			} else {
				e.kind, _ = v["kind"].(string)
				if e.kind == "" {
					e.kind = "chat"
				}
				if e.kind != "action_invocation" {
					w.messages++
					b, _ := json.Marshal(v["body"])
					e.body = string(b)
				}
			}
			w.entries = append(w.entries, e)
		}
		sort.Slice(w.entries, func(i, j int) bool { return w.entries[i].seq < w.entries[j].seq })
	})
	return snap.win
}

// patternGap is how many room entries after a message an invocation may
// come to count as following it.
const patternGap = 6

// patterns finds, in the window: messages of a kind that repeatedly
// precede the same invocation; messages after failed invocations; and
// frequent kinds of message naming the same shared key that no action
// writes.
func (w *logWindow) patterns(rc *roomCtx, least int) []Pattern {
	var out []Pattern
	precede := map[[2]string]int{}
	afterFail := map[string]int{}
	about := map[[2]string]int{}
	keys := rc.snap.scopes[ScopeShared]
	// The chance baseline: how many messages of a kind an invocation of an
	// action would follow within patternGap if the two were unrelated,
	// given how many of each the window holds over its span of seqs.
	sent := map[string]int{}    // kind → messages
	invoked := map[string]int{} // action → invocations
	var span int64 = 1
	if len(w.entries) > 1 {
		span = max(w.entries[len(w.entries)-1].seq-w.entries[0].seq, 1)
	}
	for _, e := range w.entries {
		switch {
		case e.audit && e.kind == "invoke" && e.ok && e.action != "":
			invoked[e.action]++
		case !e.audit && e.kind != "action_invocation":
			sent[e.kind]++
		}
	}
	for i, e := range w.entries {
		if e.audit || e.kind == "action_invocation" {
			continue
		}
		seen := map[string]bool{}
		for j := i + 1; j < len(w.entries) && w.entries[j].seq-e.seq <= patternGap; j++ {
			n := w.entries[j]
			if n.audit && n.kind == "invoke" && n.ok && n.action != "" && !seen[n.action] {
				seen[n.action] = true
				precede[[2]string{e.kind, n.action}]++
			}
		}
		for j := i - 1; j >= 0 && e.seq-w.entries[j].seq <= patternGap; j-- {
			p := w.entries[j]
			if p.audit && p.kind == "invoke" && !p.ok && p.by == e.by && p.action != "" {
				afterFail[p.action]++
				break
			}
		}
		for k := range keys {
			if len(k) >= 3 && !strings.HasPrefix(k, "_") && mentions(e.body, k) {
				about[[2]string{e.kind, k}]++
			}
		}
	}
	for pk, n := range precede {
		// More than chance: at least twice as many as unrelated messages
		// and invocations would give (chatter interleaved with work
		// precedes every action about as often as chance says).
		chance := float64(sent[pk[0]]) * min(1, float64(invoked[pk[1]])*patternGap/float64(span))
		if n >= least && float64(n) >= 2*chance {
			out = append(out, Pattern{Pattern: "messages_precede_action", Kind: pk[0], Action: pk[1], Count: n,
				Suggestion: fmt.Sprintf("%q messages often come just before %s is invoked: its precondition may need to carry what they settle", pk[0], pk[1])})
		}
	}
	for a, n := range afterFail {
		if n >= least {
			out = append(out, Pattern{Pattern: "messages_after_failure", Action: a, Count: n,
				Suggestion: fmt.Sprintf("agents message after %s fails: the vocabulary may not cover that case", a)})
		}
	}
	written := writtenKeys(rc)
	for pk, n := range about {
		if n >= least && !written[pk[1]] {
			out = append(out, Pattern{Pattern: "messages_about_key", Kind: pk[0], Key: ScopeShared + "." + pk[1], Count: n,
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

// writtenKeys are the _shared keys some action writes (by its templates'
// literal keys).
func writtenKeys(rc *roomCtx) map[string]bool {
	out := map[string]bool{}
	for _, a := range rc.snap.actions {
		for _, w := range a.def.Writes {
			if w.Scope == "" || w.Scope == ScopeShared {
				out[w.Key] = true
			}
		}
	}
	return out
}

// salienceFor loads what the read needs for adaptive salience (nil when it
// is off for the room or the service).
func (s *Service) salienceFor(ctx context.Context, rc *roomCtx, roomID string) (*salience, error) {
	if s.noSalience || salienceOf(rc.snap).Off {
		return nil, nil
	}
	snap := rc.snap
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage == nil {
		u, err := loadUsage(ctx, s.db, roomID)
		if err != nil {
			return nil, err
		}
		snap.usage = u
	}
	return s.newSalience(rc, snap.usage), nil
}

// annotate adds adaptive salience to an assembled envelope: the
// _vocabulary_health view, _context._attention, and the stale and
// low-salience marks on actions (low-salience actions left out of a lean
// read when the room asks, counted with the read that shows them).
func (s *Service) annotate(ctx context.Context, env *Envelope, rc *roomCtx, sl *salience, roomID string, req ContextRequest) {
	h := s.health(ctx, rc, sl)
	if env.Views != nil && wantsView(req, viewHealth) {
		env.Views[viewHealth] = h
	}
	at := s.attention(rc, sl, h)
	if at.SinceYourLastRead != nil {
		at.SinceYourLastRead.NewMessages = rc.snap.window(ctx, s).messagesAfter(at.SinceYourLastRead.FromSeq)
		at.YouElided = youElided(rc, at.SinceYourLastRead, env.Context.Elided)
	}
	omitted := 0
	for id, a := range env.Actions {
		if a.Builtin {
			continue
		}
		low := sl.low("action", id)
		if low && req.Depth == "lean" && sl.cfg.OmitLowAtLean {
			delete(env.Actions, id)
			omitted++
			continue
		}
		a.LowSalience = low
		a.Stale = req.Depth == "usage" && sl.stale(rc, id)
		env.Actions[id] = a
	}
	if omitted > 0 {
		at.Omitted = &Omitted{Actions: omitted, Expand: expand(rc, roomID, map[string]any{"only": "actions", "depth": "full"})}
	}
	if len(at.StaleActions) > 0 && req.Depth == "lean" && float64(len(at.StaleActions)) <= sl.cfg.StaleFraction*float64(max(len(customActions(rc)), 1)) {
		// At lean, stale actions are listed only when they are a large
		// part of the vocabulary (seed 000 §7.5); else counted.
		at.StaleActions = nil
	}
	if len(at.BrokenViews) > 0 || len(at.YouElided) > 0 {
		if !slices.Contains(env.Context.Help, "vocabulary_review") {
			env.Context.Help = append(env.Context.Help, "vocabulary_review")
		}
	}
	env.Context.Attention = at
}

// wantsView reports whether a read that has the views section asked for
// view id: all views, unless only names single views (views.<id>).
func wantsView(req ContextRequest, id string) bool {
	named := false
	for _, o := range req.Only {
		if o == "views" || o == "views."+id {
			return true
		}
		named = named || strings.HasPrefix(o, "views.")
	}
	return !named
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
