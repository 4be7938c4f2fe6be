// Package collab is seed 002's instruct collaborator that runs itself: it
// embodies an agent of a room, calls an OpenAI-compatible chat endpoint,
// and lives the rhythm wait → perceive → reason → act on one branch of a
// loom tree, so a room can hold the seed's three parties (a person, a base
// model behind → continue, an instruct collaborator) without a person
// driving the instruct model.
//
// It reaches the room only through the loom's operations (substrate/loom):
// Perceive for what each call is assembled from, ForModel for the → lines
// its model writes (the operation sync_loom runs), CollabUpdate for its
// state and spend. So it has its agent's permissions and no more, takes
// turns on the branch as everyone does, and its memory follows the rules a
// model over MCP gets.
package collab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// Config is one collaborator.
type Config struct {
	// Room and Agent: the agent it embodies, which must exist and be
	// allowed loom_aware (room authority: → permit <agent> loom_write
	// loom_generate to let it write and ask the base model).
	Room, Agent string
	// Tree and Branch it follows (0 / "": where the agent is, else tree 1,
	// branch 1).
	Tree   int64
	Branch string
	// ChatURL is an OpenAI-compatible endpoint: …/v1/chat/completions, or
	// a base URL it is appended to. ChatModel is sent as "model"; ChatKey,
	// when set, as a bearer token (it is never logged nor written to the
	// room).
	ChatURL, ChatModel, ChatKey string
	// System is the base system prompt; the loom-aware addendum follows.
	System string
	// The budget: calls, tokens (prompt + completion, as the endpoint
	// reports them, else the loom's estimate; the base model's for the
	// continuations it asks for count too), continuations (texts the
	// base model generates for its → continue) and wall time. Zero takes
	// the default (50 calls, 200,000 tokens, 40 continuations, 30
	// minutes); there is no unlimited.
	MaxCalls       int
	MaxTokens      int64
	MaxGenerations int
	MaxTime        time.Duration
	// ModelTurns is how many turns in a row it takes in answer to nodes
	// written by models only (another collaborator, the base model):
	// then it waits for a person's node on its branch, so two
	// collaborators on one branch do not talk to each other until their
	// budgets are spent. Default 3.
	ModelTurns int
	// Lease is how long its record shows it alive without news from it;
	// it renews the lease every third of it. Default loom's 90 s.
	Lease time.Duration
	// ReplyTokens is max_tokens per call. Default 1,024.
	ReplyTokens int
	// ContextTokens bounds the conversation (the branch's text and the
	// collaborator's earlier words); over it, older parts are summarised
	// or dropped, with a notice. Default 6,000.
	ContextTokens int
	// TurnCalls is how many calls one turn may take before the turn ends
	// (the branch is yielded). Default 8.
	TurnCalls int
	// CallTimeout bounds one chat call. Default 2 minutes.
	CallTimeout time.Duration
	// Client makes the calls. Default http.DefaultClient.
	Client *http.Client
	// Log is where it logs. Default slog.Default().
	Log *slog.Logger
	// OnWait, when set, is called whenever the collaborator starts
	// waiting for a change (tests and supervisors).
	OnWait func()
}

// Limits on what a model's answer may hold: beyond them the answer is
// refused whole (nothing in it runs) and the model is told why.
const (
	maxReplyChars    = 32_000
	maxReplyCommands = 24
	maxFailures      = 3
)

func (c *Config) fill() error {
	if c.Room == "" || c.Agent == "" {
		return errors.New("a collaborator needs a room and an agent (-room, -agent)")
	}
	if c.ChatURL == "" || c.ChatModel == "" {
		return errors.New("a collaborator needs a chat endpoint and model (-chat-url, -chat-model)")
	}
	if c.MaxCalls < 0 || c.MaxTokens < 0 || c.MaxGenerations < 0 || c.MaxTime < 0 || c.ModelTurns < 0 {
		return errors.New("budgets are positive (0 takes the default: 50 calls, 200000 tokens, 40 continuations, 30m, 3 turns answering models)")
	}
	if c.MaxGenerations == 0 {
		c.MaxGenerations = 40
	}
	if c.ModelTurns == 0 {
		c.ModelTurns = 3
	}
	if c.Lease <= 0 {
		c.Lease = loom.DefaultCollabLease
	}
	if c.MaxCalls == 0 {
		c.MaxCalls = 50
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 200_000
	}
	if c.MaxTime == 0 {
		c.MaxTime = 30 * time.Minute
	}
	if c.ReplyTokens <= 0 {
		c.ReplyTokens = 1024
	}
	if c.ContextTokens <= 0 {
		c.ContextTokens = 6000
	}
	if c.TurnCalls <= 0 {
		c.TurnCalls = 8
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 2 * time.Minute
	}
	if c.Client == nil {
		c.Client = http.DefaultClient
	}
	c.Client = noRedirects(c.Client)
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.System == "" {
		c.System = "You are a thoughtful writing collaborator: you read closely, suggest directions, and write when it helps the work."
	}
	return nil
}

// exchange is one call of the conversation as later calls see it: what
// was new then (never the results of commands) and the model's words
// (never its command lines).
type exchange struct {
	in, out string
}

type collaborator struct {
	svc   *substrate.Service
	l     *loom.Loom
	cfg   Config
	url   string
	rec   loom.CollabRecord
	start time.Time
	// seen is the branch's head as of the last call's perception; a turn
	// begins when the head moves past it by someone else's hand.
	seen    int64
	history []exchange
	dropped int
	// pending are the results of the last call's commands, for the next
	// call, once.
	pending string
	// replyTokens is the next call's max_tokens.
	replyTokens int
	// summary caches the summary of the branch's pruned beginning.
	sumUpTo int64
	sumText string
	// modelTurns counts its turns in a row that answered only
	// model-written nodes; paused says it stopped answering them.
	modelTurns int
	paused     bool
}

// errStop ends the run; its text is the reason, in the room's trace.
type errStop struct{ reason string }

func (e *errStop) Error() string { return e.reason }

func stopWith(format string, a ...any) error { return &errStop{reason: fmt.Sprintf(format, a...)} }

// Run runs the collaborator until it is told to stop (→ stop, ctx ending)
// or its budget is spent, then says why in the room and returns its final
// record. The error is nil for those ends; otherwise it says why it could
// not go on (the agent was removed, the room deleted).
func Run(ctx context.Context, svc *substrate.Service, cfg Config) (*loom.CollabRecord, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	u, err := chatURL(cfg.ChatURL)
	if err != nil {
		return nil, err
	}
	c := &collaborator{svc: svc, l: loom.Of(svc), cfg: cfg, url: u, start: time.Now()}
	p, err := c.principal(ctx)
	if err != nil {
		return nil, err
	}
	g, err := c.l.Glance(ctx, p, cfg.Room, cfg.Tree, cfg.Branch)
	if err != nil {
		return nil, fmt.Errorf("agent %s cannot follow a branch in room %s: %w", cfg.Agent, cfg.Room, err)
	}
	c.cfg.Tree, c.cfg.Branch = g.Tree, g.Branch
	c.rec = loom.CollabRecord{Model: cfg.ChatModel, State: "starting", Tree: g.Tree, Branch: g.Branch,
		MaxCalls: cfg.MaxCalls, MaxTokens: cfg.MaxTokens, MaxGenerations: cfg.MaxGenerations, MaxSeconds: int64(cfg.MaxTime / time.Second),
		Lease: cfg.Lease}
	if err := c.update(ctx, p, fmt.Sprintf("collaborating with model %s on tree %d branch %s; budget %d calls, %d tokens, %d continuations, %s",
		cfg.ChatModel, g.Tree, g.Branch, cfg.MaxCalls, cfg.MaxTokens, cfg.MaxGenerations, cfg.MaxTime)); err != nil {
		return nil, err
	}
	stopBeat := c.heartbeat(ctx)
	defer stopBeat()
	c.cfg.Log.Info("collaborator started", "room", cfg.Room, "agent", cfg.Agent, "model", cfg.ChatModel, "tree", g.Tree, "branch", g.Branch)
	changes, stopWatch, err := svc.WatchCommits(ctx, p, cfg.Room)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	rctx, cancel := context.WithDeadline(ctx, c.start.Add(cfg.MaxTime))
	defer cancel()
	runErr := c.loop(rctx, changes)
	var st *errStop
	reason := ""
	switch {
	case errors.As(runErr, &st):
		reason, runErr = st.reason, nil
	case ctx.Err() != nil:
		reason, runErr = "stopped: interrupted (signal or shutdown)", nil
	case rctx.Err() != nil:
		reason, runErr = fmt.Sprintf("stopped: budget spent: %s of wall time", cfg.MaxTime), nil
	default:
		reason = "stopped: " + runErr.Error()
	}
	// What it says on the way out is written even when ctx has ended.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer fcancel()
	if p, err := c.principal(fctx); err == nil {
		c.yield(fctx, p)
		c.rec.State, c.rec.Reason = "stopped", reason
		if err := c.update(fctx, p, fmt.Sprintf("%s · %d calls, %d prompt + %d completion tokens, %d base-model tokens", reason, c.rec.Calls, c.rec.PromptTokens, c.rec.CompletionTokens, c.rec.GenTokens)); err != nil {
			c.cfg.Log.Warn("collaborator: recording its stop failed", "room", cfg.Room, "agent", cfg.Agent, "err", err)
		}
	}
	c.cfg.Log.Info("collaborator stopped", "room", cfg.Room, "agent", cfg.Agent, "reason", reason, "calls", c.rec.Calls, "tokens", c.rec.Tokens())
	return &c.rec, runErr
}

// principal is the agent's authority, read again before each step: a
// grant taken away or the agent removed takes effect at once.
func (c *collaborator) principal(ctx context.Context) (*substrate.Principal, error) {
	return c.svc.AgentPrincipal(ctx, c.cfg.Room, c.cfg.Agent)
}

func (c *collaborator) update(ctx context.Context, p *substrate.Principal, line string) error {
	c.rec.Lease = c.cfg.Lease
	got, err := c.l.CollabUpdate(ctx, p, c.cfg.Room, c.rec, line)
	if err != nil {
		return err
	}
	c.rec = *got
	c.rec.Lease = c.cfg.Lease
	return nil
}

// heartbeat renews the record's lease every third of it until the
// returned func is called (on the way out, before the stop is recorded):
// apart from the loop, so a long model call or a long wait keeps it
// alive, and only a dead process lets it lapse.
func (c *collaborator) heartbeat(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(c.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			p, err := c.principal(ctx)
			if err == nil {
				err = c.l.CollabHeartbeat(ctx, p, c.cfg.Room, c.cfg.Lease)
			}
			if err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("collaborator: renewing its lease failed", "room", c.cfg.Room, "agent", c.cfg.Agent, "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Allow and Spent are the collaborator's loom.GenMeter: the base model's
// calls its answers ask for (→ continue) are counted against its budget,
// and one that would pass it is refused before it is made. They run on
// the loop's goroutine (inside ForModel).
func (c *collaborator) Allow(n, maxTokens, promptTokens int) error {
	if left := c.cfg.MaxGenerations - c.rec.Generations; n > left {
		return errs.New(loom.GenBudgetSpent, "the base model was not called: this asks for %d continuation(s) and your budget has %d left (%d of %d used)",
			n, max(left, 0), c.rec.Generations, c.cfg.MaxGenerations).WithHint("write the text yourself with → add, or ask for fewer with n:%d", max(left, 1))
	}
	if need := int64(promptTokens + n*maxTokens); c.rec.Tokens()+need > c.cfg.MaxTokens {
		return errs.New(loom.GenBudgetSpent, "the base model was not called: it could take ~%d tokens (prompt %d + %d × %d) and your budget has %d left",
			need, promptTokens, n, maxTokens, max(c.cfg.MaxTokens-c.rec.Tokens(), 0)).WithHint("write the text yourself with → add, or ask for fewer or shorter continuations (n:1 tokens:64)")
	}
	return nil
}

func (c *collaborator) Spent(sp loom.GenSpend) {
	c.rec.GenCalls++
	c.rec.Generations += sp.Completions
	c.rec.GenTokens += sp.PromptTokens + sp.CompletionTokens
}

// loop waits for a change on the branch, then takes a turn.
func (c *collaborator) loop(ctx context.Context, changes <-chan struct{}) error {
	for {
		p, err := c.principal(ctx)
		if err != nil {
			return err
		}
		g, err := c.l.Glance(ctx, p, c.cfg.Room, c.cfg.Tree, c.cfg.Branch)
		if err != nil {
			return err
		}
		if g.Stop != "" {
			return stopWith("stopped: asked by %s", g.Stop)
		}
		if err := c.budget(0); err != nil {
			return err
		}
		var until time.Time
		switch {
		case g.Holder != "":
			// Someone else's turn: wait for it to end (a yield is a
			// change; a lease running out is not, hence the deadline).
			// The lease's end is the database's clock; a little margin
			// and a floor keep a skewed local clock from spinning.
			until = g.Until.Add(50 * time.Millisecond)
			if floor := time.Now().Add(100 * time.Millisecond); until.Before(floor) {
				until = floor
			}
		case g.Head.ID == c.seen:
		case c.own(g.Head):
			// Its agent wrote it (another session of the same agent) or
			// it is a continuation it asked for, fulfilled later: not
			// news, so no call.
			c.seen = g.Head.ID
		default:
			if err := c.turn(ctx, p); err != nil {
				return err
			}
			continue
		}
		if c.rec.State != "waiting" {
			c.rec.State = "waiting"
			if err := c.update(ctx, p, ""); err != nil {
				return err
			}
		}
		if c.cfg.OnWait != nil {
			c.cfg.OnWait()
		}
		if err := wait(ctx, changes, until); err != nil {
			return err
		}
	}
}

// wait returns on a change in the room, at until (when set), or when ctx
// ends.
func wait(ctx context.Context, changes <-chan struct{}, until time.Time) error {
	var timer <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-changes:
	case <-timer:
	}
	return nil
}

// budget refuses the next call when the budget is spent or the call's
// estimated prompt would pass it.
func (c *collaborator) budget(prompt int) error {
	switch {
	case c.rec.Calls >= c.cfg.MaxCalls:
		return stopWith("stopped: budget spent: %d of %d calls", c.rec.Calls, c.cfg.MaxCalls)
	case c.rec.Tokens() >= c.cfg.MaxTokens:
		return stopWith("stopped: budget spent: %d of %d tokens", c.rec.Tokens(), c.cfg.MaxTokens)
	case prompt > 0 && c.rec.Tokens()+int64(prompt) > c.cfg.MaxTokens:
		return stopWith("stopped: budget spent: the next call (~%d tokens) would pass %d tokens (%d used)", prompt, c.cfg.MaxTokens, c.rec.Tokens())
	}
	return nil
}

// turn is calls to the model while it writes commands, at most TurnCalls;
// the branch's turn is then yielded.
func (c *collaborator) turn(ctx context.Context, p *substrate.Principal) error {
	failures := 0
	defer c.yield(ctx, p)
	for i := 0; i < c.cfg.TurnCalls; i++ {
		if i > 0 {
			var err error
			if p, err = c.principal(ctx); err != nil {
				return err
			}
		}
		news, msgs, est, done, err := c.prepareCall(ctx, p, i == 0)
		if done || err != nil {
			return err
		}
		ans, err := c.chat(ctx, msgs)
		c.rec.Calls++
		if err != nil {
			if err := c.callFailed(ctx, p, err, est, &failures); err != nil {
				return err
			}
			continue
		}
		failures = 0
		if done, err := c.act(ctx, p, ans, est, news); done || err != nil {
			return err
		}
	}
	return c.update(ctx, p, fmt.Sprintf("turn ended after %d calls (the turn's limit); the branch is yielded", c.cfg.TurnCalls))
}

// prepareCall perceives the branch and assembles the next call's prompt
// within the budget; done says the turn ends here (err nil: another holds
// the branch, or the models' questions ended it).
func (c *collaborator) prepareCall(ctx context.Context, p *substrate.Principal, first bool) (news string, msgs []Message, est int, done bool, err error) {
	pc, err := c.l.Perceive(ctx, p, c.cfg.Room, c.cfg.Tree, c.cfg.Branch)
	if err != nil {
		return "", nil, 0, true, err
	}
	if pc.Stop != "" {
		return "", nil, 0, true, stopWith("stopped: asked by %s", pc.Stop)
	}
	if pc.Holder != "" {
		// Another took the branch meanwhile: its writes will wake
		// this collaborator again when the branch is free.
		return "", nil, 0, true, nil
	}
	if first {
		if ok, err := c.answerModels(ctx, p, pc); err != nil || !ok {
			return "", nil, 0, true, err
		}
	}
	news = c.news(pc)
	msgs = c.assemble(ctx, pc, news)
	for _, m := range msgs {
		est += loom.Tokens(m.Content)
	}
	if err := c.budget(est); err != nil {
		return "", nil, 0, true, err
	}
	// The answer may take what the budget has left, up to
	// ReplyTokens: a call never spends past the budget by more than
	// the error of the prompt's estimate.
	c.replyTokens = int(min(int64(c.cfg.ReplyTokens), c.cfg.MaxTokens-c.rec.Tokens()-int64(est)))
	if c.replyTokens < 16 {
		return "", nil, 0, true, stopWith("stopped: budget spent: %d of %d tokens, and the next call (~%d tokens) leaves no room for an answer", c.rec.Tokens(), c.cfg.MaxTokens, est)
	}
	c.seen = pc.Head.ID
	c.rec.State = "calling"
	if err := c.update(ctx, p, ""); err != nil {
		return "", nil, 0, true, err
	}
	return news, msgs, est, false, nil
}

// callFailed records a failed chat call and waits before the next; an
// error ends the turn.
func (c *collaborator) callFailed(ctx context.Context, p *substrate.Principal, err error, est int, failures *int) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	*failures++
	c.rec.PromptTokens += int64(est)
	if uerr := c.update(ctx, p, fmt.Sprintf("call %d failed: %v", c.rec.Calls, err)); uerr != nil {
		return uerr
	}
	c.cfg.Log.Warn("collaborator: chat call failed", "room", c.cfg.Room, "agent", c.cfg.Agent, "err", err)
	if *failures >= maxFailures {
		// The record is read by everyone with loom_aware: the
		// endpoint's address and the network's words stay in the
		// trace (room authority) and the log.
		return stopWith("stopped: the chat endpoint failed %d times in a row (the errors are in the collaborator's trace)", *failures)
	}
	if errors.Is(err, errTooLarge) {
		c.pending = "⟨your last answer was over 1 MiB and was refused: nothing in it ran⟩"
	}
	return sleep(ctx, time.Duration(*failures)*time.Second)
}

// act records an answer's spend and runs its commands; done says the turn
// ends here.
func (c *collaborator) act(ctx context.Context, p *substrate.Principal, ans *chatAnswer, est int, news string) (done bool, err error) {
	if ans.PromptTokens == 0 && ans.CompletionTokens == 0 {
		ans.PromptTokens, ans.CompletionTokens = int64(est), int64(loom.Tokens(ans.Text))
	}
	c.rec.PromptTokens += ans.PromptTokens
	c.rec.CompletionTokens += ans.CompletionTokens
	c.rec.State = "acting"
	if err := c.update(ctx, p, fmt.Sprintf("call %d: %d prompt + %d completion tokens (spent %d of %d calls, %d of %d tokens)",
		c.rec.Calls, ans.PromptTokens, ans.CompletionTokens, c.rec.Calls, c.cfg.MaxCalls, c.rec.Tokens(), c.cfg.MaxTokens)); err != nil {
		return true, err
	}
	if c.rec.Stop != "" {
		// Asked to stop while the call was in flight: its answer is
		// not acted on (the update above read the stored record).
		c.remember(news, "(an answer not acted on: you were asked to stop)")
		return true, stopWith("stopped: asked by %s (the answer in flight was not acted on)", c.rec.Stop)
	}
	reply := ans.Text
	n := loom.CommandLines(reply)
	if r := []rune(reply); len(r) > maxReplyChars || n > maxReplyCommands {
		c.remember(news, "(an answer refused as too long)")
		c.pending = fmt.Sprintf("⟨your last answer (%d characters, %d command lines) was refused: at most %d characters and %d commands an answer; nothing in it ran⟩",
			len(r), n, maxReplyChars, maxReplyCommands)
		if err := c.update(ctx, p, fmt.Sprintf("call %d: answer refused (%d characters, %d command lines)", c.rec.Calls, len(r), n)); err != nil {
			return true, err
		}
		return false, nil
	}
	words := loom.Prose(reply)
	if strings.TrimSpace(words) == "" && n == 0 {
		words = "(an empty answer)"
	}
	c.remember(news, words)
	if n == 0 {
		return true, nil // prose alone ends the turn
	}
	return c.runCommands(ctx, p, reply)
}

// runCommands runs an answer's commands in the loom and keeps what they
// said for the next prompt; done says the turn ends here.
func (c *collaborator) runCommands(ctx context.Context, p *substrate.Principal, reply string) (done bool, err error) {
	gens, genTokens := c.rec.GenCalls, c.rec.GenTokens
	res, err := c.l.ForModel(loom.WithGenMeter(ctx, c), p, c.cfg.Room, reply)
	if c.rec.GenCalls > gens {
		if uerr := c.update(ctx, p, fmt.Sprintf("call %d: the base model: %d call(s), %d tokens (spent %d of %d continuations, %d of %d tokens)",
			c.rec.Calls, c.rec.GenCalls-gens, c.rec.GenTokens-genTokens, c.rec.Generations, c.cfg.MaxGenerations, c.rec.Tokens(), c.cfg.MaxTokens)); uerr != nil {
			return true, uerr
		}
	}
	switch {
	case err != nil:
		e := errs.From(err)
		if e.Code == errs.Internal || e.Code == errs.Unavailable || errors.Is(err, context.Canceled) {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
		}
		c.pending = e.Message
		if e.Hint != "" && !strings.Contains(e.Message, "\n") {
			c.pending += "\n  " + e.Hint
		}
	default:
		c.pending = strings.TrimSpace(strings.Join(nonEmpty(res.Parts.Faded, res.Parts.Body, res.Parts.Marker), "\n\n"))
	}
	if last := lastVerb(res); last == "yield" || last == "stop" {
		return true, nil
	}
	return false, nil
}

func lastVerb(res *loom.Result) string {
	if res == nil || len(res.Steps) == 0 {
		return ""
	}
	return res.Steps[len(res.Steps)-1].Verb
}

func nonEmpty(ss ...string) []string {
	return slices.DeleteFunc(ss, func(s string) bool { return s == "" })
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// yield gives the branch's turn back when this collaborator holds it,
// and counts its own writes as seen: they are not news to it.
func (c *collaborator) yield(ctx context.Context, p *substrate.Principal) {
	g, err := c.l.Glance(ctx, p, c.cfg.Room, c.cfg.Tree, c.cfg.Branch)
	if err != nil {
		return
	}
	if g.Mine {
		if _, err := c.l.Run(ctx, p, c.cfg.Room, "→ yield"); err != nil {
			c.cfg.Log.Warn("collaborator: yielding the branch failed", "room", c.cfg.Room, "agent", c.cfg.Agent, "err", err)
		}
	}
	if c.own(g.Head) {
		c.seen = g.Head.ID
	}
}

// own reports a node this collaborator wrote or asked the base model for.
func (c *collaborator) own(n loom.Node) bool {
	return n.By == c.cfg.Agent || n.For == c.cfg.Agent
}

// answerModels decides whether a turn answers what is new on the branch:
// a person's node (or its first look) always is answered; nodes written
// by models only are answered ModelTurns times in a row, then it waits
// for a person (two collaborators on a branch would otherwise answer each
// other until their budgets are spent). Not answering counts the head as
// seen.
func (c *collaborator) answerModels(ctx context.Context, p *substrate.Principal, pc *loom.Perception) (bool, error) {
	human := c.seen == 0
	for _, n := range pc.Path {
		if n.ID > c.seen && !n.Model && !c.own(n) {
			human = true
		}
	}
	if human {
		c.modelTurns, c.paused = 0, false
	}
	if c.modelTurns < c.cfg.ModelTurns {
		c.modelTurns++
		return true, nil
	}
	c.seen = pc.Head.ID
	if c.paused {
		return false, nil
	}
	c.paused = true
	return false, c.update(ctx, p, fmt.Sprintf("not answering: %d turns in a row answered only model-written nodes; a person's node on branch %s resumes it", c.cfg.ModelTurns, c.cfg.Branch))
}

// remember keeps one exchange of the conversation.
func (c *collaborator) remember(in, out string) {
	if strings.TrimSpace(out) == "" {
		out = "(commands only)"
	}
	c.history = append(c.history, exchange{in: in, out: strings.TrimSpace(out)})
	if len(c.history) > 200 {
		c.dropped += len(c.history) - 200
		c.history = slices.Delete(c.history, 0, len(c.history)-200)
	}
}
