// Package salience is adaptive salience (seed 000 §VII): the substrate's
// opinion about attention, computed per read and per agent from metadata
// only. It adds to the envelope (_context._attention, the
// _vocabulary_health system view, annotations on actions) and never
// withholds: whatever it leaves out at lean is counted, with the read that
// shows it, and availability never changes.
//
// It reaches rooms only through the core's substrate.Read (the reader's
// room at the read's seq, the vocabulary's usage, the recent log), and a
// Service runs it when its Options.Features list Feature().
package salience

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
)

// Feature is adaptive salience as a Service runs it
// (substrate.Options.Features).
func Feature() substrate.Feature { return substrate.Feature{Name: "salience", Salience: feature{}} }

// feature is what the core asks (substrate.Salience).
type feature struct{}

// Decay is the room's usage decay (Config.Decay).
func (feature) Decay(config json.RawMessage) float64 { return configOf(config).Decay }

// Begin gathers the read's salience, nil when the room turns it off.
func (feature) Begin(ctx context.Context, r *substrate.Read) (substrate.SalienceRead, error) {
	cfg := configOf(r.Config())
	if cfg.Off {
		return nil, nil
	}
	u, err := r.Usage(ctx)
	if err != nil {
		return nil, err
	}
	sl := &salience{r: r, cfg: cfg, usage: u}
	sl.reads, sl.self = r.Reads()
	return sl, nil
}

// Config are the thresholds of adaptive salience. A room overrides
// any of them in the state entry _shared._config under "salience"; the
// help key vocabulary_review documents them.
type Config struct {
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
	// ContestWithin is how many room mutations apart two agents' claims
	// on one target may be to contest it (the same action with the same
	// arguments, or direct writes of the same entry). Default 20.
	ContestWithin int64 `json:"contest_within"`
}

func defaultConfig() Config {
	yes := true
	return Config{StaleAfterMutations: 50, StaleAfterMinutes: 60, StaleFraction: 0.3, MessageRatio: 3,
		Decay: 0.95, LowSalience: 0.2, FirstReadFull: &yes, PatternMin: 3, ContestWithin: 20}
}

// configOf is the room's configuration: the defaults with what
// _shared._config.salience sets (fields of the wrong type are ignored).
func configOf(config json.RawMessage) Config {
	c := defaultConfig()
	if config == nil {
		return c
	}
	var cfg struct {
		Salience json.RawMessage `json:"salience"`
	}
	if json.Unmarshal(config, &cfg) != nil || len(cfg.Salience) == 0 {
		return c
	}
	var o Config
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
	if o.ContestWithin > 0 {
		c.ContestWithin = o.ContestWithin
	}
	return c
}

// salience is what one read knows for adaptive salience.
type salience struct {
	r     *substrate.Read
	cfg   Config
	usage map[string]*substrate.Usage
	// reads is the room's context reads so far (the decay clock); self
	// the reader's marks (nil for a caller without an agent).
	reads int64
	self  *substrate.ReaderMarks

	// contests and blockedItems are found once per read (attention and
	// health both tell them).
	contests     *[]substrate.Contest
	blockedItems *[]substrate.Blocked
}

// FirstReadFull reports a reader on its first read of a room that reads
// it at depth full once.
func (sl *salience) FirstReadFull() bool {
	return sl.self != nil && sl.self.ContextReads == 0 && *sl.cfg.FirstReadFull
}

// score is an item's reinforcement now: its score at its last use,
// decayed by the room's reads since. An item without a usage row (made
// before usage was kept) counts as fresh.
func (sl *salience) score(kind, id string) float64 {
	u := sl.usage[substrate.UsageKey(kind, id)]
	if u == nil {
		return 1
	}
	return u.Score * math.Pow(sl.cfg.Decay, float64(max(sl.reads-u.ReadsAtUse, 0)))
}

func (sl *salience) low(kind, id string) bool { return sl.score(kind, id) < sl.cfg.LowSalience }

// stale reports an action registered long enough ago (in mutations or
// minutes) and not invoked since.
func (sl *salience) stale(id string) bool {
	a, ok := sl.r.Action(id)
	if !ok {
		return false
	}
	if u := sl.usage[substrate.UsageKey("action", id)]; u != nil && u.LastUsedSeq > a.Revision {
		return false
	}
	old := sl.r.Seq()-a.Revision > sl.cfg.StaleAfterMutations
	if !a.UpdatedAt.IsZero() && sl.r.Now().Sub(a.UpdatedAt) > time.Duration(sl.cfg.StaleAfterMinutes*float64(time.Minute)) {
		old = true
	}
	return old
}

// brokenViews are the views this reader sees whose value is an error,
// sorted: mine those the reader is to fix (its own, and the room's: a
// view registered with room authority is everyone's; room counts those),
// others' those another agent registered. An agent's broken view is that
// agent's mistake, not the room's: it is counted in _vocabulary_health
// and told to its registrar, but it neither outranks the room's findings
// for others nor rates the room degenerating (unless several agents'
// views break and are a large part of the room's views).
func brokenViews(r *substrate.Read) (mine, others []string, room int) {
	views := r.Views()
	for _, v := range r.ViewDefs() {
		id := v.Def.ID
		m, ok := views[id].(map[string]any)
		if !ok || m["_error"] == nil || strings.HasPrefix(id, "_") {
			continue
		}
		if owner := substrate.ViewOwner(v.Def); owner == "" || owner == r.Self() {
			mine = append(mine, id)
			if owner == "" {
				room++
			}
		} else {
			others = append(others, id)
		}
	}
	sort.Strings(mine)
	sort.Strings(others)
	return mine, others, room
}

// since computes what changed after the reader's last read, from the
// snapshot's revisions and the usage's last uses. A view changed when its
// definition did, a state entry it reads (by path) did, or something the
// snapshot's revisions do not show may have (Read.ViewsChangedUnseen).
func (sl *salience) since(ctx context.Context) *substrate.SinceLastRead {
	if sl.self == nil || sl.self.ContextReads == 0 {
		return nil
	}
	r := sl.r
	from := sl.self.LastContextSeq
	out := &substrate.SinceLastRead{FromSeq: from, NewActions: []string{}, ActionsInvoked: []string{}, ViewsChanged: []string{}}
	// Only entries this reader sees: a change to one its gate hides (or
	// whose timer ran out) is not its news, and counting it would tell it
	// the hidden entry moved.
	// Nothing in the snapshot is newer than its seq: a reader whose last
	// read was at it (the common read of an unchanged room) has no state
	// change, new action or invocation to count, and no view whose
	// entries changed; only what revisions do not show (the clock,
	// presence, timers: ViewsChangedUnseen) is left to look at.
	moved := from < r.Seq()
	if moved {
		r.EachShown(func(scope string) bool { return !strings.HasPrefix(scope, "_") || scope == substrate.ScopeShared },
			func(_, _ string, revision int64) {
				if revision > from {
					out.StateChanges++
				}
			})
	}
	if moved {
		// Only the actions the reader's list shows: naming, or counting, an
		// action hidden from it (invoked by another) tells it it exists.
		for _, id := range r.ShownActions() {
			if a, _ := r.Action(id); a.Revision > from {
				out.NewActions = append(out.NewActions, id)
			}
			if u := sl.usage[substrate.UsageKey("action", id)]; u != nil && u.LastUsedSeq > from {
				out.ActionsInvoked = append(out.ActionsInvoked, id)
			}
		}
	}
	changed := map[string]bool{}
	unseen := r.ViewsChangedUnseen(ctx, from)
	for _, v := range r.ViewDefs() { // the views shown, in dependency order
		if v.Revision > from || unseen[v.Def.ID] || moved && readsChangedState(r, v.Def, from) {
			changed[v.Def.ID] = true
		}
		for _, id := range substrate.ViewRefs(v.Def.Expr) {
			if changed[id] {
				changed[v.Def.ID] = true
			}
		}
	}
	for id := range changed {
		out.ViewsChanged = append(out.ViewsChanged, id)
	}
	sort.Strings(out.ViewsChanged)
	return out
}

// readsChangedState reports whether view def reads (by path) a state
// entry changed after seq: one in the scope it reads as state.self (its
// registrar's, which it reads with its registrar's authority:
// ViewSelfRevision), or one of the reader's state (Revision; the core
// gives no other: a view computes with the reader's state, so an entry
// hidden from the reader cannot change its value for it).
func readsChangedState(r *substrate.Read, def *substrate.ViewDef, after int64) bool {
	self := substrate.ViewSelf(def)
	for _, m := range substrate.StatePaths(def.Expr) {
		scope := m[0]
		if scope == substrate.ScopeSelf {
			if scope = self; scope == "" {
				continue
			}
		}
		var rev int64
		var ok bool
		if scope == self {
			rev, ok = r.ViewSelfRevision(def, m[1])
		} else {
			rev, ok = r.Revision(scope, m[1])
		}
		if ok && rev > after {
			return true
		}
	}
	return false
}

// attention assembles _context._attention for the envelope (Annotate
// adds what needs the log: new messages and you_elided).
func (sl *salience) attention(ctx context.Context, health *Health) *substrate.Attention {
	r := sl.r
	mine, _, _ := brokenViews(r)
	at := &substrate.Attention{BrokenViews: mine, VocabularyHealth: health.Assessment, Finding: health.strongest()}
	self, views, defs := r.Self(), r.Views(), r.ViewDefs()
	for _, id := range at.BrokenViews {
		for _, v := range defs {
			if v.Def.ID == id && self != "" && substrate.ViewOwner(v.Def) == self {
				if at.YourBrokenViews == nil {
					at.YourBrokenViews = map[string]any{}
				}
				at.YourBrokenViews[id] = views[id]
			}
		}
	}
	for _, id := range r.ShownActions() {
		if sl.stale(id) {
			at.StaleActions = append(at.StaleActions, id)
		}
		if sl.low("action", id) {
			at.LowSalience = append(at.LowSalience, id)
		}
	}
	// Views are not marked: a view's value is shown, and read, with every
	// context read, so reads that no action's expression used it are no
	// evidence that nobody does (a quiet, healthy view is not a signal).
	at.Contested = sl.contestedOnce(ctx)
	if b := sl.blockedOnce(); len(b) > maxBlocked {
		at.Blocked, at.BlockedMore = b[:maxBlocked], len(b)-maxBlocked
	} else {
		at.Blocked = b
	}
	at.SinceYourLastRead = sl.since(ctx)
	return at
}

// YouElided are the sections in elided that changed since the last read.
func (sl *salience) YouElided(since *substrate.SinceLastRead, elided []string) []string {
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
			if scope == substrate.ScopeSelf {
				scope = sl.r.Self()
			}
			changed = sl.r.ScopeChangedAfter(scope, since.FromSeq)
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
	TotalActions int `json:"total_actions"`
	TotalViews   int `json:"total_views"`
	BrokenViews  int `json:"broken_views"`
	// BrokenViewsBy are the broken views other agents registered, by
	// registrar: theirs to fix, counted in BrokenViews.
	BrokenViewsBy map[string][]string `json:"broken_views_by,omitempty"`
	// ContestedClaims and BlockedItems count _attention's contested and
	// blocked (all of them).
	ContestedClaims      int       `json:"contested_claims"`
	BlockedItems         int       `json:"blocked_items"`
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

	// mine counts the broken views the reader is to fix (its own and the
	// room's).
	mine int
}

// strongest is the health's one finding most worth a reader's attention,
// or "": a broken view the reader is to fix, else the strongest message
// pattern, else overlapping purposes, else why the vocabulary is
// degenerating.
func (h *Health) strongest() string {
	switch {
	case h.mine > 0:
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
func purposeWords(def *substrate.ActionDef) map[string]bool {
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
func overlappingPurposes(r *substrate.Read, acts []string) [][2]string {
	words := make([]map[string]bool, len(acts))
	for i, id := range acts {
		a, _ := r.Action(id)
		words[i] = purposeWords(a.Def)
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

// Health is the _vocabulary_health view's value.
func (sl *salience) Health(ctx context.Context) any { return sl.health(ctx) }

// health assesses the room for the reader (broken views are those it
// sees).
func (sl *salience) health(ctx context.Context) *Health {
	r := sl.r
	h := &Health{Reasons: []string{}, Suggestions: []string{}}
	// Only the vocabulary the reader sees: an action or view its enabled
	// hides is not named, nor counted, in what the reader is told.
	acts := r.ShownActions()
	h.TotalActions = len(acts)
	views := r.Views()
	for id := range views {
		if !strings.HasPrefix(id, "_") {
			h.TotalViews++
		}
	}
	room := h.countBroken(r)
	recentUsed, recent := sl.countActions(h, acts)
	if c, ok := views[substrate.ViewContested].(map[string]any); ok {
		h.ContestedTargets = len(c)
	}
	win := window(ctx, r)
	// Invocations of the actions the reader sees: the window is read from
	// _audit, which it may not read, and counting the invocations of an
	// action hidden from it would tell it how often that one is invoked.
	h.MessageToActionRatio = messageRatio(win, acts)
	h.Patterns = sl.shownPatterns(acts, win)
	degenerating, roomWide := sl.findings(ctx, h, room, win)
	sl.suggest(h, acts, roomWide)
	h.assess(degenerating, recentUsed, recent)
	return h
}

// countBroken counts the views that fail to evaluate, the reader's and
// the others' by owner; room is how many are the room's.
func (h *Health) countBroken(r *substrate.Read) (room int) {
	mine, others, room := brokenViews(r)
	h.mine, h.BrokenViews = len(mine), len(mine)+len(others)
	for _, id := range others {
		for _, v := range r.ViewDefs() {
			if v.Def.ID == id {
				if h.BrokenViewsBy == nil {
					h.BrokenViewsBy = map[string][]string{}
				}
				owner := substrate.ViewOwner(v.Def)
				h.BrokenViewsBy[owner] = append(h.BrokenViewsBy[owner], id)
			}
		}
	}
	return room
}

// countActions counts the stale actions, and the recently registered
// ones (recent) and those of them invoked since (recentUsed).
func (sl *salience) countActions(h *Health, acts []string) (recentUsed, recent int) {
	r := sl.r
	for _, id := range acts {
		if sl.stale(id) {
			h.StaleActions++
		}
		a, _ := r.Action(id)
		if r.Seq()-a.Revision <= sl.cfg.StaleAfterMutations {
			recent++
			if u := sl.usage[substrate.UsageKey("action", id)]; u != nil && u.LastUsedSeq > a.Revision {
				recentUsed++
			}
		}
	}
	return recentUsed, recent
}

// messageRatio is the window's messages per invocation of the actions
// acts.
func messageRatio(win *logWindow, acts []string) float64 {
	invocations := 0
	for _, id := range acts {
		invocations += win.invoked[id]
	}
	if invocations > 0 {
		return math.Round(float64(win.messages)/float64(invocations)*10) / 10
	}
	return float64(win.messages)
}

// shownPatterns are the window's patterns that are the reader's news.
func (sl *salience) shownPatterns(acts []string, win *logWindow) []Pattern {
	r := sl.r
	var found []Pattern
	var shown map[string]bool     // the _shared keys the reader is shown
	var written func(string) bool // the _shared keys an action it sees writes
	for _, p := range win.patternsOnce(r, sl.cfg.PatternMin) {
		// Found once for every reader (from the log, _audit included);
		// one naming an action hidden from this reader is not its news,
		// nor one naming a key it is not shown (an entry gated from it:
		// the pattern would tell it the entry exists).
		if p.Key != "" && shown == nil {
			shown = map[string]bool{}
			r.EachShown(func(scope string) bool { return scope == substrate.ScopeShared }, func(scope, key string, _ int64) {
				shown[scope+"."+key] = true
			})
		}
		if p.Key != "" && !shown[p.Key] {
			continue
		}
		// "No action writes" is said of the actions the reader sees:
		// whether it is said must not tell it of a hidden action that
		// writes the key.
		if p.Pattern == "messages_about_key" {
			if written == nil {
				written = writtenKeys(r, acts, win)
			}
			if written(strings.TrimPrefix(p.Key, substrate.ScopeShared+".")) {
				continue
			}
		}
		if p.Action == "" || r.ActionEnabled(p.Action) {
			found = append(found, p)
		}
	}
	return found
}

// findings gives the reasons the vocabulary is degenerating, if it is;
// roomWide when the broken views are the room's problem.
func (sl *salience) findings(ctx context.Context, h *Health, room int, win *logWindow) (degenerating, roomWide bool) {
	// The room's broken views say its model is wrong; an agent's (the
	// reader's own included) say that agent's is, unless the views of
	// several agents break and are a large part of the room's views. The
	// reader's own lead its findings either way.
	registrars := len(h.BrokenViewsBy)
	if h.mine > room {
		registrars++
	}
	roomWide = room > 0 || registrars > 1 && float64(h.BrokenViews)/float64(max(h.TotalViews, 1)) > sl.cfg.StaleFraction
	if roomWide {
		degenerating = true
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d views fail to evaluate: their model of the room is wrong", h.BrokenViews))
		h.Suggestions = append(h.Suggestions, "fix a broken view by registering it again with the same id and a corrected expression")
	} else if h.mine > 0 {
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d of your views fail to evaluate: your model of the room is wrong (your_broken_views)", h.mine))
		h.Suggestions = append(h.Suggestions, "fix a broken view by registering it again with the same id and a corrected expression")
	}
	h.ContestedClaims = len(sl.contestedOnce(ctx))
	h.BlockedItems = len(sl.blockedOnce())
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
	return degenerating, roomWide
}

// suggest adds the suggestions that follow from the contested targets,
// the patterns, overlapping purposes, and others' broken views.
func (sl *salience) suggest(h *Health, acts []string, roomWide bool) {
	r := sl.r
	if h.ContestedTargets > 0 {
		h.Suggestions = append(h.Suggestions, "see help key contested_actions: several actions write the same keys")
	}
	for _, p := range h.Patterns {
		h.Suggestions = append(h.Suggestions, p.Suggestion)
	}
	h.OverlappingPurposes = overlappingPurposes(r, acts)
	for _, pair := range h.OverlappingPurposes {
		h.Suggestions = append(h.Suggestions, fmt.Sprintf("%s and %s state overlapping purposes: merge them, or say in their descriptions how they differ", pair[0], pair[1]))
	}
	if h.BrokenViews > h.mine && !roomWide {
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d views of other agents fail to evaluate: theirs to fix (broken_views_by)", h.BrokenViews-h.mine))
	}
}

// assess is the health's assessment, with its reason.
func (h *Health) assess(degenerating bool, recentUsed, recent int) {
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
}

// Annotate adds adaptive salience to an assembled envelope: the
// _vocabulary_health view, _context._attention, and the stale and
// low-salience marks on actions (low-salience actions left out of a lean
// read when the room asks, counted with the read that shows them).
func (sl *salience) Annotate(ctx context.Context, env *substrate.Envelope, req substrate.ContextRequest) {
	h := sl.health(ctx)
	if env.Views != nil && wantsView(req, substrate.ViewHealth) {
		env.Views[substrate.ViewHealth] = h
	}
	at := sl.attention(ctx, h)
	if at.SinceYourLastRead != nil {
		at.SinceYourLastRead.NewMessages = window(ctx, sl.r).messagesAfter(at.SinceYourLastRead.FromSeq)
		at.YouElided = sl.YouElided(at.SinceYourLastRead, env.Context.Elided)
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
		a.Stale = req.Depth == "usage" && sl.stale(id)
		env.Actions[id] = a
	}
	if omitted > 0 {
		at.Omitted = &substrate.Omitted{Actions: omitted, Expand: sl.r.Expand(map[string]any{"only": "actions", "depth": "full"})}
	}
	if len(at.StaleActions) > 0 && req.Depth == "lean" && float64(len(at.StaleActions)) <= sl.cfg.StaleFraction*float64(max(len(sl.r.ShownActions()), 1)) {
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
func wantsView(req substrate.ContextRequest, id string) bool {
	named := false
	for _, o := range req.Only {
		if o == "views" || o == "views."+id {
			return true
		}
		named = named || strings.HasPrefix(o, "views.")
	}
	return !named
}
