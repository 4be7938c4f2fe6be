package collab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate/loom"
)

// Context assembly (seed 002 §Context Assembly), in the seed's order:
//
//	system:    the base system prompt, the loom-aware addendum, the rhythm
//	           of a collaborator's turns and its permissions
//	user:      the operational memory block (as ForModel gives a model over
//	           MCP), the ambient line, the conversation: the branch's text
//	           (loom.PathText, the assembly → continue gives the base
//	           model, in the collaborator's reading) and a pruning notice,
//	           then the first earlier exchange's input
//	assistant/user: the earlier exchanges (the model's words without its
//	           command lines; what was new then, without results)
//	user:      the current turn: what is new on the branch, the results of
//	           the last call's commands (shown once, then named as faded),
//	           the budget
//
// Messages alternate user and assistant after the system message, which
// every chat template accepts.

// news says what is new on the branch since the collaborator last looked.
func (c *collaborator) news(pc *loom.Perception) string {
	if c.seen == 0 {
		return fmt.Sprintf("You have joined as %s: you are at the end of branch %s (node %d). Read it, then act or say why you wait.", c.cfg.Agent, pc.Branch, pc.Head.ID)
	}
	after := -1
	for i, n := range pc.Path {
		if n.ID == c.seen {
			after = i
		}
	}
	var who []string
	if after >= 0 {
		for _, n := range pc.Path[after+1:] {
			if c.own(n) {
				continue
			}
			by := n.By
			if n.Model {
				by += "›"
			}
			if n.For != "" {
				by += " (asked by " + n.For + ")"
			}
			who = append(who, fmt.Sprintf("#%d by %s", n.ID, by))
		}
	}
	if len(who) == 0 {
		return ""
	}
	return "New on your branch since you last looked (at its end above): " + strings.Join(who, ", ") + "."
}

// assemble builds one call's messages.
func (c *collaborator) assemble(ctx context.Context, pc *loom.Perception, news string) []Message {
	sys := strings.Join([]string{c.cfg.System, c.l.Addendum(), loom.CollabAddendum(c.cfg.Agent, pc.Perms)}, "\n\n")
	branch, branchNote := c.branchText(ctx, pc)
	budget := c.cfg.ContextTokens - loom.Tokens(branchNote+branch)
	// The newest exchanges that fit what the branch left; older ones are
	// left out for good, and the model is told.
	keep := 0
	used := 0
	for i := len(c.history) - 1; i >= 0; i-- {
		t := loom.Tokens(c.history[i].in) + loom.Tokens(c.history[i].out) + 8
		if used+t > budget && keep > 0 {
			break
		}
		used += t
		keep++
	}
	if drop := len(c.history) - keep; drop > 0 {
		c.dropped += drop
		c.history = append([]exchange(nil), c.history[drop:]...)
	}
	histNote := ""
	if c.dropped > 0 {
		histNote = fmt.Sprintf("⟨pruned: %d earlier exchanges of yours left out to fit %d tokens; what you did is in your trace (→ memory trace)⟩", c.dropped, c.cfg.ContextTokens)
	}
	header := fmt.Sprintf("⟨branch %s of tree %d %q: %d nodes; you are at its end, node %d⟩", pc.Branch, pc.Tree, pc.TreeName, len(pc.Path), pc.Head.ID)
	head := strings.Join(nonEmpty(pc.Memory, pc.Ambient, header+"\n"+branchNote+branch, histNote), "\n\n")
	el := time.Since(c.start).Round(time.Second)
	current := strings.Join(nonEmpty(news, c.pending,
		fmt.Sprintf("⟨budget: call %d of %d · %d of %d tokens · %s of %s⟩", c.rec.Calls+1, c.cfg.MaxCalls, c.rec.Tokens(), c.cfg.MaxTokens, el, c.cfg.MaxTime)), "\n\n")
	c.pending = ""
	msgs := []Message{{Role: "system", Content: sys}}
	if len(c.history) == 0 {
		return append(msgs, Message{Role: "user", Content: head + "\n\n" + current})
	}
	for i, x := range c.history {
		in := x.in
		if in == "" {
			in = "(your turn went on)"
		}
		if i == 0 {
			in = head + "\n\n" + in
		}
		msgs = append(msgs, Message{Role: "user", Content: in}, Message{Role: "assistant", Content: x.out})
	}
	return append(msgs, Message{Role: "user", Content: current})
}

// branchText is the branch's text for the collaborator within two thirds
// of ContextTokens: over it, the beginning is summarised (by the loom's
// generator when one is configured, else extractively, saying so) with a
// notice naming what and how to read it.
func (c *collaborator) branchText(ctx context.Context, pc *loom.Perception) (text, note string) {
	limit := c.cfg.ContextTokens * 2 / 3
	full := loom.PathText(pc.Path, loom.ForCollaborator)
	if loom.Tokens(full) <= limit {
		return full, ""
	}
	// Keep the newest nodes that fit, leaving room for the summary.
	k, used := len(pc.Path), 0
	for k > 1 {
		t := loom.Tokens(pc.Path[k-1].Content) + 2
		if used+t > limit-200 {
			break
		}
		used += t
		k--
	}
	last := pc.Path[k-1].ID
	if c.sumUpTo != last {
		lines := make([]string, 0, k)
		for _, n := range pc.Path[:k] {
			lines = append(lines, fmt.Sprintf("#%d: %s", n.ID, strings.ReplaceAll(n.Content, "\n", " ")))
		}
		// The base model writes the summary: its spend is the collaborator's.
		c.sumUpTo, c.sumText = last, c.l.Summarise(loom.WithGenMeter(ctx, c), strings.Join(lines, "\n"))
	}
	note = fmt.Sprintf("⟨pruned to fit %d tokens: the branch's first %d nodes (#%d–#%d) are summarised; → view branch:%s as:prose full reads them⟩\n%s\n…",
		limit, k, pc.Path[0].ID, last, pc.Branch, c.sumText)
	return loom.PathText(pc.Path[k:], loom.ForCollaborator), note + " ︱ "
}
