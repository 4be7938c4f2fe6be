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

// extractive is sentences of text, up to summaryChars, labelled as
// extractive with why: the first sentence of each line (part), then, when
// that leaves room (text of few, long lines: a paragraph, prose joined on
// one line), more sentences spread evenly over the rest, in text order,
// "…" marking what was skipped. It stays well shorter than the text: at
// most a quarter of it beyond the first sentences.
func extractive(text, why string) string {
	type part struct {
		sents []string
		pick  []bool
	}
	var parts []part
	total := 0
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			ss := sentences(line)
			parts = append(parts, part{sents: ss, pick: make([]bool, len(ss))})
			total += utf8.RuneCountInString(line)
		}
	}
	used, shown := 0, 0
	for i := range parts {
		n := utf8.RuneCountInString(parts[i].sents[0])
		if used+n > summaryChars {
			break
		}
		parts[i].pick[0] = true
		used += n + 1
		shown++
	}
	spread := false
	if shown == len(parts) {
		// The rest of the budget, spread over the sentences not shown.
		budget := min(summaryChars, max(used, total/4))
		type at struct{ p, s int }
		var rest []at
		restChars := 0
		for i, pt := range parts {
			for j := 1; j < len(pt.sents); j++ {
				rest = append(rest, at{i, j})
				restChars += utf8.RuneCountInString(pt.sents[j]) + 1
			}
		}
		if room := budget - used; room > 0 && len(rest) > 0 {
			want := max(1, room*len(rest)/restChars)
			step := float64(len(rest)) / float64(want)
			for k := 0; k < want; k++ {
				x := rest[min(len(rest)-1, int(step*(float64(k)+0.5)))]
				n := utf8.RuneCountInString(parts[x.p].sents[x.s])
				if parts[x.p].pick[x.s] || used+n > budget {
					continue
				}
				parts[x.p].pick[x.s] = true
				used += n + 1
				spread = true
			}
		}
	}
	var out []string
	for _, pt := range parts[:shown] {
		var b strings.Builder
		for j, s := range pt.sents {
			switch {
			case pt.pick[j]:
				if b.Len() > 0 {
					b.WriteString(" ")
				}
				b.WriteString(s)
			case j > 0 && pt.pick[j-1]:
				b.WriteString(" …")
			}
		}
		out = append(out, b.String())
	}
	if shown < len(parts) {
		out = append(out, fmt.Sprintf("… (%d more lines)", len(parts)-shown))
	}
	how := "first sentence of each part"
	if spread {
		how = "sentences spread over the text"
	}
	return fmt.Sprintf("extractive summary (%s; %s):\n%s", how, why, strings.Join(out, "\n"))
}

// sentences splits a line at sentence ends (., ! or ? before a space),
// each at most 160 characters.
func sentences(s string) []string {
	var out []string
	start := 0
	for i, r := range s {
		if (r == '.' || r == '!' || r == '?') && (i+1 == len(s) || s[i+1] == ' ') {
			if t := strings.TrimSpace(s[start : i+1]); t != "" {
				out = append(out, clip(t, 160, ""))
			}
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, clip(t, 160, ""))
	}
	return out
}
