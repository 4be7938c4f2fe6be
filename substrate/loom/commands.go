// Running a call of → commands: each in its own transaction, stopping at
// the first that fails and saying which ran.

package loom

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Run runs one or more → command lines (seed 002) as p in roomID. Each
// command is its own mutation (or, for a read-only credential, its own
// read): a failing command changes nothing and is recorded in the caller's
// trace, and the commands after it do not run (batchFailure: the error
// says which line failed and which ran). A call in which a line does not
// parse runs nothing (refuseUnparsed). The call carries the caller's
// position from command to command (callState).
func (l *Loom) Run(ctx context.Context, p *substrate.Principal, roomID, text string) (*Result, error) {
	return l.RunAt(ctx, p, roomID, text, Place{})
}

// Place is a node of a tree.
type Place struct {
	Tree, Node int64
}

// RunAt is Run for commands issued against a node on screen (the loom
// page's command box, a REST call that names tree and node): the call
// starts at at instead of where the caller's agent stands, so a plain
// → add lands under the node the person looks at, whatever the agent did
// elsewhere since the page was drawn. The caller's stored position moves
// only as the commands move it. A zero Place is Run.
func (l *Loom) RunAt(ctx context.Context, p *substrate.Principal, roomID, text string, at Place) (*Result, error) {
	if err := l.svc.RequireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	lines, perr := ParseLines(text)
	if perr == nil {
		if res, err := l.refuseUnparsed(ctx, p, roomID, lines); res != nil || err != nil {
			return res, err
		}
	}
	cmds := make([]*Command, 0, len(lines))
	for _, pl := range lines {
		cmds = append(cmds, pl.Cmd)
	}
	var start *loomPos
	if at.Tree > 0 && at.Node > 0 {
		start = &loomPos{Tree: at.Tree, Node: at.Node}
	}
	return l.run(ctx, p, roomID, cmds, perr, start)
}

// RunParsed runs commands Parse returned, through the same steps as Run:
// a page composes a command as a line, parses it, then puts back into its
// Texts what a line cannot carry (a node's paragraphs, line breaks).
func (l *Loom) RunParsed(ctx context.Context, p *substrate.Principal, roomID string, cmds []*Command) (*Result, error) {
	if err := l.svc.RequireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		return nil, errs.New(errs.InvalidField, "✗ no command").WithHint("for example: → view 23, → tree, → help")
	}
	return l.run(ctx, p, roomID, cmds, nil, nil)
}

func (l *Loom) run(ctx context.Context, p *substrate.Principal, roomID string, cmds []*Command, perr error, start *loomPos) (*Result, error) {
	res := &Result{}
	var firstErr error
	var texts []string
	onboard := ""
	record := func(st Step, err error) {
		if err != nil {
			e := errs.From(err)
			if e.Code == errs.Internal || e.Code == errs.Unavailable {
				l.log.Error("loom command failed", "room", roomID, "err", err)
			}
			st.OK, st.Error, st.Text = false, e.Code, e.Message
			if e.Hint != "" {
				st.Text += "\n  " + e.Hint
			}
			res.Errors++
			if firstErr == nil {
				firstErr = err
			}
		}
		res.Steps = append(res.Steps, st)
		texts = append(texts, "→ "+st.Command+"\n"+st.Text)
	}
	// A call carries its position from command to command: "→ jump 5"
	// then "→ add" attaches under 5 even while another call of the same
	// agent moves it elsewhere, and a credential that is not an agent
	// (which has no stored position) has one for the call.
	call := &callState{pos: start}
	failed := -1
	for i, c := range cmds {
		if failed >= 0 {
			// The lines after a failed one do not run: they were written
			// for where it would have left the caller ("→ jump 99" that
			// failed, then "→ add" at the old place).
			st := Step{Command: c.Line, Verb: c.Verb, Error: notRun, Text: fmt.Sprintf("· not run (line %d failed before it)", failed+1)}
			res.Steps = append(res.Steps, st)
			texts = append(texts, "→ "+st.Command+"\n"+st.Text)
			continue
		}
		st, pos, ob, err := l.step(ctx, p, roomID, c, call)
		if ob != "" && onboard == "" {
			onboard = ob
		}
		if pos != nil {
			res.Position = pos
		}
		record(st, err)
		if err != nil {
			failed = i
		}
	}
	if perr != nil && failed < 0 {
		line, verb := parseFailure(perr)
		l.traceError(ctx, p, roomID, verb, line, perr)
		record(Step{Command: line, Verb: verb}, perr)
	}
	if firstErr != nil {
		if len(res.Steps) == 1 {
			return nil, firstErr
		}
		return nil, batchFailure(firstErr, res.Steps, texts)
	}
	res.Text = strings.Join(texts, "\n\n")
	res.onboard = onboard
	if onboard != "" {
		res.Text = onboard + "\n\n" + res.Text
	}
	if res.Position != nil {
		res.Text = res.Position.Ambient + "\n" + res.Text
	}
	return res, nil
}

// notRun marks a command that did not run because another line of its
// call did not parse, or failed before it.
const notRun errs.Code = "not_run"

// batchFailure is the error of a call of several lines in which one
// failed: the failed line's code (so REST answers with its status and MCP
// with isError), a message that says which line failed, which lines ran
// (their writes stand: sending them again would do them twice) and which
// did not run, then every line's outcome; its details the same as
// numbers (failed_line, done, not_run) and the steps.
func batchFailure(first error, steps []Step, texts []string) error {
	e := *errs.From(first)
	e.Details = maps.Clone(e.Details)
	failed := 0
	var done, skipped []int
	for i, st := range steps {
		switch {
		case st.OK:
			done = append(done, i+1)
		case st.Error == notRun:
			skipped = append(skipped, i+1)
		default:
			failed = i + 1
		}
	}
	head := fmt.Sprintf("✗ line %d of %d failed (→ %s)", failed, len(steps), steps[failed-1].Command)
	if len(done) == 0 {
		head += "; nothing was done"
	} else {
		head += fmt.Sprintf("; %s ran and stand%s", lineList(done), map[bool]string{true: "s", false: ""}[len(done) == 1])
	}
	if len(skipped) > 0 {
		head += fmt.Sprintf("; %s did not run", lineList(skipped))
	}
	e.Message = head + ".\n\n" + strings.Join(texts, "\n\n")
	switch {
	case len(done) == 0:
		e.Hint = fmt.Sprintf("fix line %d and send the call again", failed)
	case len(skipped) == 0:
		e.Hint = fmt.Sprintf("fix line %d and send it again; do not send %s again", failed, lineList(done))
	default:
		e.Hint = fmt.Sprintf("fix line %d and send it with the lines after it; do not send %s again", failed, lineList(done))
	}
	if done == nil {
		done = []int{}
	}
	if skipped == nil {
		skipped = []int{}
	}
	return e.With("failed_line", failed).With("done", done).With("not_run", skipped).With("steps", steps)
}

// lineList names line numbers: "line 2", "lines 1–3", "lines 1, 3".
func lineList(ns []int) string {
	if len(ns) == 1 {
		return fmt.Sprintf("line %d", ns[0])
	}
	if ns[len(ns)-1]-ns[0] == len(ns)-1 {
		return fmt.Sprintf("lines %d–%d", ns[0], ns[len(ns)-1])
	}
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return "lines " + strings.Join(parts, ", ")
}

// refuseUnparsed answers a call in which some line does not parse: none
// of its commands runs (a model that mistyped one line of a plan should
// not have the rest of the plan run without it, from wherever the earlier
// lines left it), and every line is reported in order: the ones that did
// not parse with what was wrong and the nearest command, the others as
// not run. The error is the first failure's, its message every line's
// outcome, its details the steps. Nil, nil when every line parsed.
func (l *Loom) refuseUnparsed(ctx context.Context, p *substrate.Principal, roomID string, lines []Parsed) (*Result, error) {
	var first error
	bad := 0
	for _, pl := range lines {
		if pl.Err != nil {
			bad++
			if first == nil {
				first = pl.Err
			}
		}
	}
	if first == nil {
		return nil, nil
	}
	if len(lines) == 1 {
		line, verb := parseFailure(first)
		l.traceError(ctx, p, roomID, verb, line, first)
		return nil, first
	}
	steps := make([]Step, 0, len(lines))
	texts := []string{fmt.Sprintf("✗ nothing ran: %d of the %d commands did not parse. Fix %s and send the call again.",
		bad, len(lines), map[bool]string{true: "it", false: "them"}[bad == 1])}
	for _, pl := range lines {
		if pl.Err == nil {
			st := Step{Command: pl.Line, Verb: pl.Cmd.Verb, Error: notRun, Text: "· not run (another command of this call did not parse)"}
			steps = append(steps, st)
			texts = append(texts, fmt.Sprintf("→ %s\n%s", st.Command, st.Text))
			continue
		}
		line, verb := parseFailure(pl.Err)
		l.traceError(ctx, p, roomID, verb, line, pl.Err)
		e := errs.From(pl.Err)
		st := Step{Command: line, Verb: verb, Error: e.Code, Text: e.Message}
		if e.Hint != "" {
			st.Text += "\n  " + e.Hint
		}
		steps = append(steps, st)
		texts = append(texts, fmt.Sprintf("→ %s\n%s", st.Command, st.Text))
	}
	e := *errs.From(first)
	e.Details = maps.Clone(e.Details)
	e.Message = strings.Join(texts, "\n\n")
	e.Hint = "send the call again with every command line fixed; nothing in it ran"
	return nil, e.With("steps", steps)
}

// parseFailure is how a line that did not parse is traced: as written,
// an unknown verb as "unknown", anything else as "parse" (never as the
// suggestion).
func parseFailure(err error) (line, verb string) {
	line, verb = "(unparsed)", "parse"
	var e *errs.Error
	if errors.As(err, &e) {
		if v, ok := e.Details["line"].(string); ok {
			line = v
		}
		if e.Details["verb"] == "unknown" {
			verb = "unknown"
		}
	}
	return line, verb
}

// loomWrites are the verbs that change shared content.
var loomWrites = map[string]bool{"add": true, "branch": true, "annotate": true, "link": true, "edit": true, "write": true,
	"new": true, "fulfil": true, "yield": true, "bookmark": true, "permit": true, "deny": true, "continue": true, "stop": true}

// callState is what one Run carries from command to command.
type callState struct {
	// pos is the caller's position for the rest of the call: where the
	// call started (RunAt), else the agent's stored position as its first
	// command read it, then wherever the call's commands moved it. Each
	// command is its own transaction, and re-reading the stored position
	// in each let another call of the same agent move it in between (a
	// jump, then an add under the other call's node).
	pos *loomPos
}

// stepIn is what a command's mutation gets from work done before it with
// no connection held.
type stepIn struct {
	call *callState
	// gen are generated texts for a continue; running is the record of
	// their generation, which the nodes' mutation removes.
	gen     []string
	running string
	// summary, when set, is the summary a command asked for.
	summary *string
	// collect asks the command only to read the text it would summarise
	// (into collected) and stop.
	collect   bool
	collected *string
}

func (l *Loom) step(ctx context.Context, p *substrate.Principal, roomID string, c *Command, call *callState) (st Step, pos *Position, onboard string, err error) {
	switch {
	case c.Verb == "continue" && l.opt.GeneratorURL != "":
		st, pos, onboard, err = l.continueGen(ctx, p, roomID, c, call)
	case wantsSummary(c):
		st, pos, onboard, err = l.summaryStep(ctx, p, roomID, c, call)
	default:
		st, pos, onboard, err = l.exec(ctx, p, roomID, c, &stepIn{call: call})
	}
	if err != nil {
		l.traceError(ctx, p, roomID, c.Verb, c.Line, err)
	}
	return st, pos, onboard, err
}

// exec runs c on one connection: a mutation for agents (whose every
// command lands in their trace) and for writes, a read transaction
// otherwise. gen, when set, are generated texts for a continue.
func (l *Loom) exec(ctx context.Context, p *substrate.Principal, roomID string, c *Command, in *stepIn) (st Step, pos *Position, onboard string, err error) {
	e := &execution{l: l, c: c, in: in, roomID: roomID, st: Step{Command: c.Line, Verb: c.Verb, OK: true}}
	write := (p.Kind == substrate.KindAgent || (loomWrites[c.Verb] && !p.ReadOnly())) && !in.collect
	if !write {
		err = l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
			return e.body(&loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()})
		})
		return e.st, e.pos, e.onboard, err
	}
	_, err = l.svc.MutateRoom(ctx, p, roomID, e.mutate)
	if err == nil && e.pos == nil && e.moved != nil && !in.collect {
		e.readPosition(ctx, p)
	}
	return e.st, e.pos, e.onboard, err
}

// execution is one command's run through its transaction (run again
// when the transaction is): what it has found so far for the step.
type execution struct {
	l      *Loom
	c      *Command
	in     *stepIn
	roomID string
	st     Step
	// pos is where the caller is after the command; onboard the
	// orientation an agent's first command brings.
	pos     *Position
	onboard string
	// moved is where a write moved the caller (loomRun.newPos).
	moved *loomPos
}

// body runs the command in r's transaction.
func (e *execution) body(r *loomRun) error {
	in := e.in
	if err := e.begin(r); err != nil {
		return err
	}
	text, err := r.exec(e.c, in.gen)
	if err != nil {
		return err
	}
	if in.collect {
		return nil
	}
	if r.newPos != nil && in.call != nil {
		np := *r.newPos
		in.call.pos = &np
	}
	e.st.Text = text
	e.st.Nodes = r.nodes
	return e.settle(r)
}

// begin reads the caller, places it where the call stands, and onboards
// an agent at its first command.
func (e *execution) begin(r *loomRun) error {
	in := e.in
	if err := r.loadCaller(); err != nil {
		return err
	}
	r.in = in
	if in.call != nil {
		if in.call.pos != nil {
			r.pos = *in.call.pos
		} else if !in.collect {
			np := r.pos
			in.call.pos = &np
		}
	}
	if r.p.Kind == substrate.KindAgent && r.tx.Writes() && !in.collect {
		var seen bool
		if ok, err := r.get(r.p.AgentID, "loom:onboarded", &seen); err != nil {
			return err
		} else if !ok {
			if e.onboard, err = r.onboarding(); err != nil {
				return err
			}
			r.put(r.p.AgentID, "loom:onboarded", true)
		}
	}
	return nil
}

// settle reads the position the command left the caller at, and stores
// an agent's when the command moved it.
func (e *execution) settle(r *loomRun) error {
	np := r.newPos
	if np == nil && r.pos.Tree <= 0 {
		return nil
	}
	at := r.pos
	if np != nil {
		at = *np
	}
	if t, err := r.tree(at.Tree); err == nil {
		if n, err := r.node(t, strconv.FormatInt(at.Node, 10)); err == nil {
			if e.pos, err = r.position(t, n); err != nil {
				return err
			}
		}
	}
	if np != nil && r.p.Kind == substrate.KindAgent && *np != r.stored {
		r.put(r.p.AgentID, "loom:pos", np)
	}
	return nil
}

// mutate runs the command as a mutation: its writes, the agent's trace
// line, and the audit record.
func (e *execution) mutate(tx *substrate.RoomTx) error {
	c, in := e.c, e.in
	r := &loomRun{l: e.l, tx: tx, p: tx.Principal(), room: e.roomID, now: tx.Now(), actor: tx.Actor()}
	if err := e.body(r); err != nil {
		return err
	}
	e.moved = r.newPos
	if in.running != "" {
		r.ops = append(r.ops, substrate.Op{Scope: scopeLoomLive, Key: in.running, Delete: true})
	}
	line := r.trace
	if line == "" {
		line = c.Line
	}
	if r.p.Kind == substrate.KindAgent {
		r.appendEntry(r.p.AgentID, tracePrefix+r.uniq(), map[string]any{"line": line, "verb": c.Verb, "at": r.now})
	}
	audit, err := tx.Apply(r.ops, "loom")
	if err != nil {
		return e.l.inLoomWords(e.roomID, c, err)
	}
	for _, a := range audit {
		// Operational memory is the agent's alone: the audit log
		// records that it changed, not what it holds.
		if sc, _ := a["scope"].(string); !isLoomScope(sc) {
			delete(a, "value")
		}
	}
	tx.Audit(map[string]any{"kind": "loom", "command": c.Verb, "writes": audit})
	return nil
}

// readPosition reads the position of a node the command created: it is
// written at commit, so its position (the result's first line) is read
// once it exists.
func (e *execution) readPosition(ctx context.Context, p *substrate.Principal) {
	l, roomID, moved := e.l, e.roomID, e.moved
	perr := l.svc.ReadRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, p: p, room: roomID, now: tx.Now(), actor: p.Actor()}
		t, err := r.tree(moved.Tree)
		if err != nil {
			return err
		}
		n, err := r.node(t, strconv.FormatInt(moved.Node, 10))
		if err != nil {
			return err
		}
		e.pos, err = r.position(t, n)
		return err
	})
	if perr != nil {
		// The command committed: its result stands without the line.
		l.log.Warn("loom position after a write unread", "room", roomID, "err", perr)
	}
}

// inLoomWords is a refusal of the core's storage (which names scopes and
// keys: _loom.2/n:15) in the words of the person or model who ran c: what
// was too big or full, or, for records that disagree, a fault of sync's
// own, logged. Nothing of the command was written either way.
func (l *Loom) inLoomWords(roomID string, c *Command, err error) error {
	e := errs.From(err)
	switch e.Code {
	case errs.ValueTooLarge:
		return loomErr(errs.ValueTooLarge, "%s was not saved: its text is too long for one entry of this room's loom", c.Verb).
			WithHint("shorten it, or split it over several nodes (→ add, then → add again), and send it again")
	case errs.ScopeFull:
		return loomErr(errs.ScopeFull, "%s was not saved: this room's loom holds as many records as its limits allow", c.Verb).
			WithHint("ask the room's owner to raise the room's limits, or remove bookmarks and documents no longer needed")
	case errs.KeyExists, errs.AppendOnly, errs.VersionConflict, errs.NotMergeable:
		l.log.Error("loom records disagree", "room", roomID, "verb", c.Verb, "err", err)
		return loomErr(errs.Internal, "%s was not saved: the loom's records disagree, a fault in sync and not in the command; nothing was written", c.Verb).
			WithHint("send it again; if it fails again, tell the room's owner")
	}
	return err
}

// traceError appends a failed command to the agent's trace.
func (l *Loom) traceError(ctx context.Context, p *substrate.Principal, roomID, verb, line string, err error) {
	if p == nil || p.Kind != substrate.KindAgent {
		return
	}
	msg := errs.From(err).Message
	_, terr := l.svc.MutateRoom(ctx, p, roomID, func(tx *substrate.RoomTx) error {
		r := &loomRun{l: l, tx: tx, now: tx.Now()}
		raw, _ := json.Marshal(map[string]any{"line": line, "verb": verb, "error": msg, "at": tx.Now()})
		audit, err := tx.Apply([]substrate.Op{{Scope: p.AgentID, Key: tracePrefix + r.uniq(), Value: raw, Append: true}}, "loom")
		for _, a := range audit {
			delete(a, "value")
		}
		tx.Audit(map[string]any{"kind": "loom", "command": "error", "writes": audit})
		return err
	})
	if terr != nil {
		l.log.Warn("loom trace of an error failed", "room", roomID, "err", terr)
	}
}
