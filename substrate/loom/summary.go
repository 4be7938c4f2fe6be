package loom

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
)

// Summaries (seed 002: "results over N tokens are auto-summarised",
// "summary-of:12-34", "read doc … summary"). With a configured generator
// the summary is the generator's, asked with no connection held; without
// one (or when it fails) it is extractive, and says so: a model must not
// take a first-sentences digest for a reading of the text.

// summaryChars bounds a summary, generated or extracted.
const summaryChars = 600

func wantsSummary(c *Command) bool {
	_, of := c.opt("summary-of")
	return (c.Verb == "stash" && of) || (c.Verb == "read" && c.has("summary"))
}

// summaryStep reads the text the command summarises, summarises it with
// no connection held, then runs the command with the summary.
func (l *Loom) summaryStep(ctx context.Context, p *substrate.Principal, roomID string, c *Command, call *callState) (Step, *Position, string, error) {
	if l.opt.GeneratorURL == "" {
		return l.exec(ctx, p, roomID, c, &stepIn{call: call})
	}
	var src string
	if st, pos, ob, err := l.exec(ctx, p, roomID, c, &stepIn{call: call, collect: true, collected: &src}); err != nil {
		return st, pos, ob, err
	}
	sum := l.Summarise(ctx, src)
	return l.exec(ctx, p, roomID, c, &stepIn{call: call, summary: &sum})
}

// summaryOf is the summary of src for the running command: the one
// summaryStep brought, else an extractive one. In collect mode it records
// src and reports true: the command stops there.
func (r *loomRun) summaryOf(src string) (string, bool) {
	if r.in != nil && r.in.collect {
		*r.in.collected = src
		return "", true
	}
	if r.in != nil && r.in.summary != nil {
		return *r.in.summary, false
	}
	return extractive(src, "no generator is configured"), false
}

// Summarise summarises text with the configured generator, else
// extractively; either way the summary says which it is.
func (l *Loom) Summarise(ctx context.Context, text string) string {
	if strings.TrimSpace(text) == "" {
		return "(nothing to summarise)"
	}
	if l.opt.GeneratorURL == "" {
		return extractive(text, "no generator is configured")
	}
	prompt := clip(text, 12_000, "") + "\n\nA summary of the text above, in at most three sentences:\n"
	out, err := l.generate(ctx, prompt, 1, 160)
	if err != nil || len(out) == 0 || strings.TrimSpace(out[0]) == "" {
		l.log.Warn("loom summary: generator failed; extractive summary instead", "err", err)
		return extractive(text, "the generator did not answer")
	}
	return "summary by " + l.opt.GeneratorModel + ": " + clip(strings.TrimSpace(out[0]), summaryChars, "")
}

// extractive is the first sentence of each line of text, up to
// summaryChars, labelled as extractive with why.
func extractive(text, why string) string {
	var parts []string
	n := 0
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		s := firstSentence(line)
		if n+utf8.RuneCountInString(s) > summaryChars {
			parts = append(parts, fmt.Sprintf("… (%d more lines)", len(lines)-i))
			break
		}
		n += utf8.RuneCountInString(s) + 1
		parts = append(parts, s)
	}
	return fmt.Sprintf("extractive summary (first sentence of each part; %s):\n%s", why, strings.Join(parts, "\n"))
}

// firstSentence is s up to its first sentence end, at most 160 characters.
func firstSentence(s string) string {
	for i, r := range s {
		if (r == '.' || r == '!' || r == '?') && (i+1 == len(s) || s[i+1] == ' ') {
			return clip(s[:i+1], 160, "")
		}
	}
	return clip(s, 160, "")
}
