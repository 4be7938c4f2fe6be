package loom

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// The loom's command language (seed 002 §Tool Syntax): one command per
// line, after an arrow (→, or -> for keyboards without one). The syntax is
// forgiving: synonyms map to one verb, filler words ("me", "node", "the")
// are skipped, a trailing "(…)" is a comment, and an unknown verb is
// answered with the nearest command.

// Command is one parsed command line.
type Command struct {
	// Verb is the canonical operation (view, list, tree, branch, …).
	Verb string `json:"verb"`
	// Refs are node references in order ("47", "8.2" for a branch).
	Refs []string `json:"refs,omitempty"`
	// Words are the bare option words (summary, full, continuations, as,
	// context, append, to, from…) in order.
	Words []string `json:"words,omitempty"`
	// Opts are key:value options (depth:3, doc:"notes", as:prose).
	Opts map[string]string `json:"opts,omitempty"`
	// Texts are the quoted strings in order.
	Texts []string `json:"texts,omitempty"`
	// Line is the command as written, without the arrow.
	Line string `json:"line"`
}

// Canon is the command in one canonical spelling (the parser table's
// expectation): verb, refs, words, sorted options, quoted texts.
func (c *Command) Canon() string {
	parts := []string{c.Verb}
	parts = append(parts, c.Refs...)
	parts = append(parts, c.Words...)
	keys := make([]string, 0, len(c.Opts))
	for k := range c.Opts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := c.Opts[k]
		if strings.ContainsAny(v, " \"") || v == "" {
			v = fmt.Sprintf("%q", v)
		}
		parts = append(parts, k+":"+v)
	}
	for _, t := range c.Texts {
		parts = append(parts, fmt.Sprintf("%q", t))
	}
	return strings.Join(parts, " ")
}

func (c *Command) opt(k string) (string, bool) { v, ok := c.Opts[k]; return v, ok }

func (c *Command) has(word string) bool {
	for _, w := range c.Words {
		if w == word {
			return true
		}
	}
	return false
}

// loomVerbs maps every accepted spelling to its verb.
var loomVerbs = map[string]string{
	"view": "view", "show": "view", "see": "view", "inspect": "view", "look": "view", "display": "view", "open": "view",
	"list": "list", "ls": "list",
	"preview": "preview", "peek": "preview",
	"tree": "tree", "overview": "tree", "map": "tree",
	"branch": "branch", "fork": "branch",
	"continue": "continue", "generate": "continue", "gen": "continue", "extend": "continue",
	"annotate": "annotate", "annotation": "annotate", "comment": "annotate",
	"link": "link", "connect": "link",
	"edit": "edit", "revise": "edit", "rewrite": "edit",
	"switch": "switch", "goto": "switch", "go": "switch", "move": "switch", "cd": "switch",
	"jump":  "jump",
	"read":  "read",
	"write": "write",
	"pin":   "pin", "keep": "pin",
	"stash": "stash", "save": "stash",
	"recall": "recall", "unstash": "recall", "restore": "recall",
	"drop": "drop", "forget": "drop", "unpin": "drop",
	"memory": "memory", "mem": "memory",
	"think": "think",
	"help":  "help", "?": "help",
	// Beyond the seed's list, needed to use the loom at all.
	"add": "add", "say": "add", "reply": "add", "append": "add",
	"new": "new", "create": "new", "plant": "new",
	"yield": "yield", "release": "yield",
	"bookmark": "bookmark", "mark": "bookmark", "bookmarks": "bookmarks",
	"fulfil": "fulfil", "fulfill": "fulfil",
	"permit": "permit", "allow": "permit",
	"deny": "deny", "disallow": "deny",
	"requests": "requests",
	"stop":     "stop",
}

// loomUsage is one example per verb: help, and the nearest command.
var loomUsage = map[string]string{
	"view":      "view 23 [summary|full|with-annotations|with-links] · view branch:8 as:prose|as:nodes",
	"list":      "list 47 continuations|annotations|links",
	"preview":   "preview 47 depth:3",
	"tree":      "tree [from:20] [depth:5] [summary]",
	"branch":    `branch from 47 [as context|instruction] ["content"]`,
	"continue":  "continue from 47 [n:3] [tokens:40]",
	"annotate":  `annotate 47 "note"`,
	"link":      `link 47 to 23 | link 47 to doc:"notes" [note:"why"]`,
	"edit":      `edit 47 "revised content"`,
	"switch":    "switch to 23 | switch to branch 8.2",
	"jump":      "jump tree:7 node:23",
	"read":      `read doc:"notes" [summary] [lines:1-50]`,
	"write":     `write doc:"notes" append|at:end "text"`,
	"pin":       `pin 47 | pin doc:"notes" section:2`,
	"stash":     `stash "label" "content" | stash "label" content-of:47`,
	"recall":    `recall "label"`,
	"drop":      `drop 47 | drop stash:"label" | drop lines:3-7`,
	"memory":    "memory [trace|stashed|errors]",
	"think":     "think … ← (read by you and the room's owners, never by other agents)",
	"help":      "help [command]",
	"add":       `add "content" (a child of where you are)`,
	"new":       `new tree "name" ["root content"]`,
	"yield":     "yield (release your turn on this branch)",
	"bookmark":  `bookmark 47 "label"`,
	"bookmarks": "bookmarks",
	"fulfil":    `fulfil g12 "generated text"`,
	"permit":    "permit alice loom_write doc_write (room authority)",
	"deny":      "deny alice loom_write (room authority)",
	"requests":  "requests (open generation requests)",
	"stop":      "stop [agent] (ask a collaborator that runs itself to stop; yourself without an agent)",
}

// loomFiller are words skipped anywhere: "show me node 23" is "view 23".
var loomFiller = map[string]bool{"me": true, "node": true, "the": true, "please": true, "at": true, "of": true, "on": true, "for": true, "a": true}

// Parse splits text into commands: all of them, or the first line that
// does not parse as the error (with the commands before it).
func Parse(text string) ([]*Command, error) {
	lines, err := ParseLines(text)
	var out []*Command
	for _, l := range lines {
		if l.Err != nil {
			return out, l.Err
		}
		out = append(out, l.Cmd)
	}
	return out, err
}

// Parsed is one command line: its command, or why it did not parse.
type Parsed struct {
	Cmd *Command
	Err error
	// Line is the line as written, without the arrow.
	Line string
}

// ParseLines splits text into command lines, each parsed on its own, so
// that a caller can report every line in order. Lines not starting with
// an arrow are ignored (a model's prose around its commands), except
// inside a think block, which runs from "→ think" to a line "←" (or a "←"
// ending the think line) and keeps its text verbatim. The error is text
// without any command line.
func ParseLines(text string) ([]Parsed, error) {
	var out []Parsed
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line, ok := arrowLine(lines[i])
		if !ok {
			continue
		}
		if w := firstWord(line); w == "think" {
			body := strings.TrimSpace(line[len(w):])
			if strings.HasSuffix(body, "←") {
				out = append(out, Parsed{Cmd: &Command{Verb: "think", Texts: []string{strings.TrimSpace(strings.TrimSuffix(body, "←"))}, Line: line}, Line: line})
				continue
			}
			var buf []string
			if body != "" {
				buf = append(buf, body)
			}
			closed := false
			for i++; i < len(lines); i++ {
				l := strings.TrimRight(lines[i], " \t")
				if t := strings.TrimSpace(l); t == "←" || t == "<-" {
					closed = true
					break
				}
				if strings.HasSuffix(l, "←") {
					buf = append(buf, strings.TrimSuffix(l, "←"))
					closed = true
					break
				}
				buf = append(buf, l)
			}
			if !closed {
				out = append(out, Parsed{Line: "think (not closed)", Err: errs.New(errs.InvalidField, "✗ think block is not closed: it took every line after it").
					WithHint("end it with a line holding ← alone").With("nearest", "think … ←").With("line", "think (not closed)")})
				break
			}
			out = append(out, Parsed{Cmd: &Command{Verb: "think", Texts: []string{strings.TrimSpace(strings.Join(buf, "\n"))}, Line: "think"}, Line: "think"})
			continue
		}
		c, err := parseLoomLine(line)
		out = append(out, Parsed{Cmd: c, Err: err, Line: line})
	}
	if len(out) == 0 {
		return nil, errs.New(errs.InvalidField, "✗ no command: put each command on its own line after →").
			WithHint("for example: → view 23, → tree, → help").With("nearest", "help").With("line", "(no → command)")
	}
	return out, nil
}

// arrowLine returns the command after a leading arrow.
func arrowLine(l string) (string, bool) {
	l = strings.TrimSpace(l)
	for _, a := range []string{"→", "->"} {
		if strings.HasPrefix(l, a) {
			return strings.TrimSpace(l[len(a):]), true
		}
	}
	return "", false
}

func firstWord(l string) string {
	if i := strings.IndexFunc(l, unicode.IsSpace); i >= 0 {
		return strings.ToLower(l[:i])
	}
	return strings.ToLower(l)
}

// token is one lexical unit of a command line.
type token struct {
	word   string // bare word (lowercased unless it is a ref)
	key    string // for key:value
	value  string
	quoted bool // a quoted string (word holds its text)
}

func tokenize(line string) ([]token, error) {
	var toks []token
	rs := []rune(line)
	i := 0
	for i < len(rs) {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case isQuote(r):
			s, next, err := readQuoted(rs, i)
			if err != nil {
				return nil, err
			}
			i = next
			toks = append(toks, token{word: s, quoted: true})
		case r == '(':
			// A trailing parenthetical is a comment: "memory trace (show action history)".
			return toks, nil
		default:
			t, next, err := readWord(rs, i)
			if err != nil {
				return nil, err
			}
			i = next
			toks = append(toks, t)
		}
	}
	return toks, nil
}

func isQuote(r rune) bool { return r == '"' || r == '“' }

// readQuoted reads the quoted text opening at rs[i]; next is the index
// past its closing quote.
func readQuoted(rs []rune, i int) (s string, next int, err error) {
	open := rs[i]
	closeR := '"'
	switch open {
	case '“':
		closeR = '”'
	case '\'':
		closeR = '\''
	}
	i++
	var b strings.Builder
	for i < len(rs) && rs[i] != closeR && !(open == '"' && rs[i] == '”') {
		if rs[i] == '\\' && i+1 < len(rs) && (rs[i+1] == '"' || rs[i+1] == '\\') {
			i++
		}
		b.WriteRune(rs[i])
		i++
	}
	if i >= len(rs) {
		return "", i, fmt.Errorf("a quoted text is not closed")
	}
	i++
	return b.String(), i, nil
}

// readWord reads the word starting at rs[i]: a bare word, key:value or
// key:"quoted value"; next is the index past it.
func readWord(rs []rune, i int) (t token, next int, err error) {
	start := i
	for i < len(rs) && !unicode.IsSpace(rs[i]) && !(rs[i] == ':' && i+1 < len(rs) && isQuote(rs[i+1])) {
		i++
	}
	w := string(rs[start:i])
	if i < len(rs) && rs[i] == ':' { // key:"quoted value"
		i++
		s, next, err := readQuoted(rs, i)
		if err != nil {
			return token{}, next, err
		}
		return token{key: strings.ToLower(w), value: s}, next, nil
	}
	// key:value, when key is one of the commands' options; any
	// other word with a colon is a word (agent ids such as
	// alice:claude-ai, in → permit).
	if k, v, ok := strings.Cut(w, ":"); ok && loomOptKeys[strings.ToLower(k)] {
		return token{key: strings.ToLower(k), value: v}, i, nil
	}
	return token{word: w}, i, nil
}

// loomOptKeys are the options the commands read (key:value).
var loomOptKeys = map[string]bool{
	"tree": true, "node": true, "branch": true, "doc": true, "as": true, "depth": true, "from": true,
	"n": true, "tokens": true, "lines": true, "section": true, "stash": true, "content-of": true,
	"summary-of": true, "note": true, "at": true, "pin": true,
	// Refused (parseLoomLine): recognised so that it is never taken as a word.
	"room": true,
}

// isRef reports a node or branch reference: 47, 8.2, g12 is not one.
func isRef(w string) bool {
	if w == "" {
		return false
	}
	dot := false
	for i, r := range w {
		switch {
		case r >= '0' && r <= '9':
		case r == '.' && i > 0 && !dot && i < len(w)-1:
			dot = true
		default:
			return false
		}
	}
	return true
}

func parseLoomLine(line string) (*Command, error) {
	toks, err := tokenize(line)
	if err != nil {
		return nil, errs.New(errs.InvalidField, "✗ %v in: %s", err, line).WithHint("close the quote").With("line", line)
	}
	c := &Command{Line: line, Opts: map[string]string{}}
	// The verb: the first bare word that is a known spelling, after filler.
	j := 0
	for j < len(toks) && toks[j].word != "" && !toks[j].quoted && loomFiller[strings.ToLower(toks[j].word)] {
		j++
	}
	if j >= len(toks) || toks[j].quoted || toks[j].word == "" {
		return nil, unknownCommand(line, "")
	}
	w := strings.ToLower(toks[j].word)
	verb, ok := loomVerbs[w]
	if !ok {
		return nil, unknownCommand(line, w)
	}
	c.Verb = verb
	for _, t := range toks[j+1:] {
		if err := c.read(t); err != nil {
			return nil, err
		}
	}
	if err := c.normalise(); err != nil {
		return nil, err
	}
	if len(c.Opts) == 0 {
		c.Opts = nil
	}
	if err := checkWords(c); err != nil {
		return nil, err
	}
	return c, nil
}

// read takes one token after the verb: a text, an option, a node, a word.
func (c *Command) read(t token) error {
	switch {
	case t.quoted:
		c.Texts = append(c.Texts, t.word)
	case strings.EqualFold(t.key, "room"):
		// Options are forgiving, but not this one: a command acts in
		// the room it was sent to, and one that names another room
		// must not act here as if it had gone there.
		return errs.New(errs.InvalidField, "✗ commands act in the room they are sent to; room:%s is not an option", t.value).
			WithHint("send the command to that room (sync_loom's room argument, or POST /rooms/<id>/loom)").With("line", c.Line).With("nearest", c.Verb)
	case t.key != "":
		c.Opts[t.key] = t.value
	case isRef(t.word):
		c.Refs = append(c.Refs, t.word)
	default:
		lw := strings.ToLower(t.word)
		if loomFiller[lw] {
			return nil
		}
		if strings.HasPrefix(lw, "g") && isRef(lw[1:]) && !strings.Contains(lw, ".") {
			c.Refs = append(c.Refs, lw) // a generation request
			return nil
		}
		c.Words = append(c.Words, lw)
	}
	return nil
}

// normalise reads the few two-word spellings ("tree new", "branch from
// 3", "view branch 8") as their one-word forms.
func (c *Command) normalise() error {
	if c.Verb == "tree" && c.has("new") {
		c.Verb = "new"
		c.Words = without(c.Words, "new")
	}
	if c.Verb == "new" {
		c.Words = without(c.Words, "tree")
	}
	if c.Verb == "switch" || c.Verb == "branch" || c.Verb == "continue" || c.Verb == "preview" || c.Verb == "jump" {
		if err := c.namesNode(); err != nil {
			return err
		}
		c.Words = without(c.Words, "to", "from")
	}
	if (c.Verb == "tree" || c.Verb == "add") && len(c.Refs) > 0 {
		// "tree from 20", "add from 3 "text"": the node is the ref.
		c.Words = without(c.Words, "from")
	}
	if c.Verb == "view" && len(c.Words) > 0 && c.Words[0] == "branch" && len(c.Refs) > 0 {
		// "view branch 8" = "view branch:8"
		c.Opts["branch"] = c.Refs[0]
		c.Refs = c.Refs[1:]
		c.Words = c.Words[1:]
	}
	return nil
}

// namesNode refuses "branch from" (or "switch to", …) with no node: it
// would act wherever the caller stands, and a model that meant a node and
// left it out must not branch somewhere it did not name.
func (c *Command) namesNode() error {
	_, node := c.Opts["node"]
	_, from := c.Opts["from"]
	if (c.has("from") || c.has("to")) && len(c.Refs) == 0 && !node && !from && c.Opts["branch"] == "" && !c.has("branch") {
		w := "from"
		if !c.has("from") {
			w = "to"
		}
		return errs.New(errs.InvalidField, "✗ %s %s needs a node: %s", c.Verb, w, c.Line).
			WithHint("name it: → %s", loomUsage[c.Verb]).With("line", c.Line).With("nearest", c.Verb)
	}
	return nil
}

// loomWords are the bare words each verb reads; any other is refused
// rather than ignored (a model that wrote "view 1 bogus" meant something
// the command would not do). Verbs naming agents (permit, deny, stop) and
// help check their words themselves.
var loomWords = map[string][]string{
	"view":   {"summary", "full", "with-annotations", "with-links", "branch"},
	"list":   {"continuations", "annotations", "links"},
	"tree":   {"summary"},
	"branch": {"as", "context", "instruction"},
	"add":    {"as", "context", "instruction"},
	"link":   {"to"},
	"switch": {"branch"},
	"read":   {"summary"},
	"write":  {"append"},
	"memory": {"trace", "stashed", "errors"},
}

func checkWords(c *Command) error {
	switch c.Verb {
	case "permit", "deny":
		return nil
	case "stop":
		if len(c.Words)+len(c.Refs) <= 1 {
			return nil
		}
		return errs.New(errs.InvalidField, "✗ stop takes one collaborator: %s", c.Line).
			WithHint("usage: → %s", loomUsage["stop"]).With("line", c.Line).With("nearest", "stop")
	case "help":
		if len(c.Words) == 0 {
			return nil
		}
		if _, ok := loomVerbs[c.Words[0]]; ok && len(c.Words) == 1 {
			return nil
		}
		w := c.Words[len(c.Words)-1]
		if _, ok := loomVerbs[c.Words[0]]; !ok {
			w = c.Words[0]
		}
		return unknownWord(c, w, slices.Sorted(maps.Keys(loomVerbs)))
	}
	allowed := loomWords[c.Verb]
	for _, w := range c.Words {
		if !slices.Contains(allowed, w) {
			return unknownWord(c, w, allowed)
		}
	}
	return nil
}

// unknownWord refuses a word the command does not take, with the
// command as it would most likely have been meant.
func unknownWord(c *Command, w string, allowed []string) error {
	best, bestD := "", 1<<30
	for _, a := range allowed {
		if d := loomDistance(w, a); d < bestD {
			best, bestD = a, d
		}
	}
	if bestD > max(2, len([]rune(w))/3) {
		best = ""
	}
	fixed := strings.Join(strings.Fields(replaceWord(c.Line, w, best)), " ")
	takes := "no bare words"
	if len(allowed) > 0 {
		takes = "only " + strings.Join(allowed, ", ")
	}
	return errs.New(errs.InvalidField, "✗ %s does not take %q (it takes %s). did you mean: → %s", c.Verb, w, takes, fixed).
		WithHint("usage: → %s", loomUsage[c.Verb]).With("line", c.Line).With("nearest", fixed).With("word", w)
}

// replaceWord is line with its first word equal (case-insensitively) to
// w replaced by with (or left out when with is empty).
func replaceWord(line, w, with string) string {
	f := strings.Fields(line)
	for i, x := range f {
		if strings.EqualFold(x, w) {
			if with == "" {
				return strings.Join(append(f[:i:i], f[i+1:]...), " ")
			}
			f[i] = with
			return strings.Join(f, " ")
		}
	}
	return line
}

func without(ws []string, drop ...string) []string {
	out := ws[:0:0]
	for _, w := range ws {
		keep := true
		for _, d := range drop {
			if w == d {
				keep = false
			}
		}
		if keep {
			out = append(out, w)
		}
	}
	return out
}

// unknownCommand names the nearest command.
func unknownCommand(line, w string) error {
	best, bestD := "help", 1<<30
	for spelling, verb := range loomVerbs {
		if d := loomDistance(w, spelling); d < bestD || (d == bestD && verb < best) {
			best, bestD = verb, d
		}
	}
	if w == "" || bestD > max(2, len(w)/2) {
		best = "help"
	}
	rest := ""
	if f := strings.Fields(line); len(f) > 1 && best != "help" {
		rest = " " + strings.Join(f[1:], " ")
	}
	return errs.New(errs.InvalidField, "✗ unknown command %q. did you mean: → %s%s", firstWord(line), best, rest).
		WithHint("usage: → %s", loomUsage[best]).With("nearest", best).With("line", line).With("verb", "unknown")
}

// loomDistance is the optimal-string-alignment distance: Levenshtein with
// a swap of two neighbouring letters counting once ("veiw" is one from
// "view").
func loomDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
