// Documents (_loom.doc): → read and → write doc:"name".

package loom

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// doc: read doc:"name" [summary] [lines:a-b] · write doc:"name" append|at:end|at:start "text"
func (r *loomRun) doc(c *Command) (string, error) {
	name, ok := c.opt("doc")
	if !ok || name == "" {
		return "", loomErr(errs.InvalidField, "%s needs doc:\"name\"", c.Verb).WithHint("usage: → %s", loomUsage[c.Verb]).With("nearest", c.Verb)
	}
	if err := substrate.ValidKey(name, 200); err != nil {
		return "", err
	}
	var d struct {
		Lines []string `json:"lines"`
		By    string   `json:"by"`
	}
	found, err := r.get(scopeLoomDoc, "d:"+name, &d)
	if err != nil {
		return "", err
	}
	if c.Verb == "read" {
		if err := r.need(PermDocRead); err != nil {
			return "", err
		}
		if !found {
			return "", loomErr(errs.NotFound, "doc %q does not exist", name).WithHint("write it: → write doc:%q append \"text\"", name)
		}
		if c.has("summary") {
			sum, stop := r.summaryOf(strings.Join(d.Lines, "\n"))
			if stop {
				return "", nil
			}
			return fmt.Sprintf("doc %q: %d lines, last written by %s (→ read doc:%q for the text)\n%s", name, len(d.Lines), d.By, name, sum), nil
		}
		from, to := 1, len(d.Lines)
		if v, ok := c.opt("lines"); ok {
			a, b, _ := strings.Cut(v, "-")
			if x, err := strconv.Atoi(a); err == nil {
				from = max(1, x)
			}
			if y, err := strconv.Atoi(b); err == nil {
				to = min(to, y)
			} else if b == "" {
				to = min(to, from)
			}
		}
		var out []string
		for i := from; i <= to; i++ {
			out = append(out, fmt.Sprintf("%d  %s", i, d.Lines[i-1]))
		}
		text := fmt.Sprintf("doc %q lines %d–%d of %d", name, from, to, len(d.Lines))
		if len(out) > 0 {
			text += "\n" + strings.Join(out, "\n")
		}
		lim := r.l.opt.ResultChars
		if utf8.RuneCountInString(text) > lim {
			text = clip(text, lim, fmt.Sprintf("→ read doc:%q lines:<from>-<to>", name))
		}
		return text, nil
	}
	if err := r.needWrite(PermDocWrite); err != nil {
		return "", err
	}
	text, err := firstText(c, "the text to write")
	if err != nil {
		return "", err
	}
	add := strings.Split(text, "\n")
	if c.Opts["at"] == "start" {
		d.Lines = append(add, d.Lines...)
	} else {
		d.Lines = append(d.Lines, add...)
	}
	d.By = r.actor
	r.put(scopeLoomDoc, "d:"+name, d)
	return fmt.Sprintf("✓ doc %q: %d lines", name, len(d.Lines)), nil
}
