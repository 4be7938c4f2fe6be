// The loom page's commands: the command box, and each form composed into
// the → command it stands for.

package web

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// loomRun acts as the person's own agent: a form's operation, composed
// into the → command it stands for, or the command box's commands.
func (wb *Web) loomRun(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, ok := wb.actor(w, r, roomID)
	if !ok {
		return
	}
	q, err := parseLoomQuery(r.PostFormValue)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	commands := strings.TrimSpace(r.PostFormValue("commands"))
	op := r.PostFormValue("op")
	moves := op == "" || slices.Contains([]string{"continue", "branch", "edit", "switch", "new"}, op)
	if op != "" {
		if commands, err = loomCommand(op, q, r.PostFormValue); err != nil {
			wb.fail(w, r, err)
			return
		}
	}
	if commands == "" {
		wb.fail(w, r, errs.New(errs.InvalidField, "no command").WithHint("type a command such as → tree, or → help for the list"))
		return
	}
	var res *loom.Result
	if op == "" {
		// The command box acts on the node on screen (its form names it),
		// not wherever the person's agent last stood: a plain → add typed
		// under node 4 of tree 1 lands there.
		res, err = loom.Of(wb.opt.Substrate).RunAt(r.Context(), p, roomID, commands, loom.Place{Tree: q.Tree, Node: q.Node})
	} else {
		// A form's command: parsed as the line it composed, then given
		// back the line breaks its texts had.
		cmds, perr := loom.Parse(commands)
		if perr != nil {
			wb.fail(w, r, perr)
			return
		}
		for _, c := range cmds {
			for i := range c.Texts {
				c.Texts[i] = restoreText.Replace(c.Texts[i])
			}
			for k, v := range c.Opts {
				c.Opts[k] = restoreText.Replace(v)
			}
			c.Line = restoreText.Replace(c.Line)
		}
		commands = restoreText.Replace(commands)
		res, err = loom.Of(wb.opt.Substrate).RunParsed(r.Context(), p, roomID, cmds)
	}
	status := http.StatusOK
	var ranErr *errs.Error
	if err != nil {
		e := errs.From(err)
		if e.Code == errs.Internal {
			wb.fail(w, r, err)
			return
		}
		status = e.Code.Status()
		ranErr = e
		res = nil
	}
	// Land where the command put the person (a new node, a move): where
	// the call left them, which is the node on screen unless a command
	// moved them. Anything else stays on the node the form was on.
	if res != nil && moves {
		if res.Position != nil {
			q.Tree, q.Node = res.Position.Tree, res.Position.Node
		} else {
			q.Tree, q.Node = 0, 0
		}
	}
	userID, username, _ := wb.opt.SignedIn(r)
	rp, access, err := wb.opt.Lobby.PersonPrincipal(r.Context(), userID, username, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	if op != "" {
		commands = ""
	}
	wb.renderLoom(w, r, status, loomPageIn{room: roomID, reader: rp, who: username + " (" + access + ")", access: access, me: username + ":web",
		q: q, commands: commands, ran: res, ranErr: ranErr})
}

func hintOf(e *errs.Error) string {
	if e.Hint == "" {
		return ""
	}
	return " (" + e.Hint + ")"
}

// A form's text may hold what a command line cannot carry (line breaks,
// a closing curly quote): quote writes those as private-use stand-ins,
// and loomRun puts them back into the parsed command's texts.
const (
	standInBreak = "\ue000"
	standInQuote = "\ue001"
)

var restoreText = strings.NewReplacer(standInBreak, "\n", standInQuote, "”")

// quote writes text as a loom command's quoted text.
func quote(what, text string) (string, error) {
	text = strings.TrimSpace(strings.ReplaceAll(text, "\r\n", "\n"))
	if text == "" {
		return "", errs.New(errs.InvalidField, "%s is empty", what).WithHint("write the %s, then press the button again", what).With("field", "text")
	}
	if strings.ContainsAny(text, "\r"+standInBreak+standInQuote) {
		return "", errs.New(errs.InvalidField, "the %s holds a character a loom command cannot carry (a lone carriage return or a private-use character)", what).
			WithHint("remove it and send again").With("field", "text")
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", standInBreak, "”", standInQuote).Replace(text) + `"`, nil
}

// loomCommand composes the → command a form stands for. Every command
// that addresses a node names the tree too: a form acts on the node on
// screen, never on wherever the person's agent stands.
func loomCommand(op string, q loomQuery, get func(string) string) (string, error) {
	switch op {
	case "new":
		return newTreeCommand(get)
	case "write":
		return writeCommand(get)
	case "fulfil":
		return fulfilCommand(q, get)
	case "stop":
		return stopCommand(get)
	case "permit":
		return permitCommand(get)
	}
	if q.Tree == 0 || q.Node == 0 {
		return "", errs.New(errs.InvalidField, "%s needs a tree and a node", op).WithHint("open a node first; its forms name it").With("field", "node")
	}
	return nodeCommand(op, q, get)
}

// newTreeCommand is the form that plants a tree.
func newTreeCommand(get func(string) string) (string, error) {
	name, err := quote("tree's name", get("name"))
	if err != nil {
		return "", err
	}
	cmd := "→ new tree " + name
	if strings.TrimSpace(get("text")) != "" {
		root, err := quote("first words", get("text"))
		if err != nil {
			return "", err
		}
		cmd += " " + root
	}
	return cmd, nil
}

// writeCommand is the form that writes a line into a document.
func writeCommand(get func(string) string) (string, error) {
	doc := strings.TrimSpace(get("doc"))
	if doc == "" {
		return "", errs.New(errs.InvalidField, "write needs a document name").WithHint("name the document").With("field", "doc")
	}
	text, err := quote("text", get("text"))
	if err != nil {
		return "", err
	}
	at := "append"
	if get("at") == "start" {
		at = "at:start"
	}
	return `→ write doc:"` + doc + `" ` + at + " " + text, nil
}

// fulfilCommand is the form that answers a queued generation request.
func fulfilCommand(q loomQuery, get func(string) string) (string, error) {
	req := strings.TrimPrefix(strings.TrimSpace(get("req")), "g")
	if _, err := strconv.ParseUint(req, 10, 63); err != nil {
		return "", errs.New(errs.InvalidField, "request %q is not a generation request", get("req")).WithHint("pick one of the pending continuations").With("field", "req")
	}
	text, err := quote("continuation", get("text"))
	if err != nil {
		return "", err
	}
	// The request knows its tree; naming the tree on screen too
	// refuses a request of another tree rather than writing there.
	cmd := "→ fulfil g" + req + " " + text
	if q.Tree > 0 {
		cmd = fmt.Sprintf("→ fulfil g%s tree:%d %s", req, q.Tree, text)
	}
	return cmd, nil
}

// stopCommand is the form that stops a collaborator.
func stopCommand(get func(string) string) (string, error) {
	agent := strings.TrimSpace(get("agent"))
	if agent == "" || strings.ContainsAny(agent, " \t\n\r\"") {
		return "", errs.New(errs.InvalidField, "agent %q is not an agent id", agent).WithHint("pick a collaborator from the list").With("field", "agent")
	}
	return "→ stop " + agent, nil
}

// permitCommand is the form that sets an agent's loom permissions: the
// ticked ones permitted, the others denied.
func permitCommand(get func(string) string) (string, error) {
	agent := strings.TrimSpace(get("agent"))
	if agent == "" || strings.ContainsAny(agent, " \t\n\r\"") {
		return "", errs.New(errs.InvalidField, "agent %q is not an agent id", agent).WithHint("pick an agent from the list").With("field", "agent")
	}
	var on, off []string
	for _, perm := range loom.Permissions {
		if get("perm-"+perm) != "" {
			on = append(on, perm)
		} else {
			off = append(off, perm)
		}
	}
	lines := []string{}
	if len(on) > 0 {
		lines = append(lines, "→ permit "+agent+" "+strings.Join(on, " "))
	}
	if len(off) > 0 {
		lines = append(lines, "→ deny "+agent+" "+strings.Join(off, " "))
	}
	return strings.Join(lines, "\n"), nil
}

// nodeCommand is a form of the node on screen, q's.
func nodeCommand(op string, q loomQuery, get func(string) string) (string, error) {
	at := fmt.Sprintf("%d tree:%d", q.Node, q.Tree)
	switch op {
	case "continue":
		return continueCommand(at, get)
	case "branch":
		return branchCommand(at, get)
	case "edit":
		text, err := quote("revised text", get("text"))
		return "→ edit " + at + " " + text, err
	case "annotate":
		text, err := quote("annotation", get("text"))
		return "→ annotate " + at + " " + text, err
	case "bookmark":
		label := strings.TrimSpace(get("label"))
		if label == "" {
			return "→ bookmark " + at, nil
		}
		text, err := quote("label", label)
		return "→ bookmark " + at + " " + text, err
	case "switch":
		return "→ switch to " + at, nil
	case "yield":
		return fmt.Sprintf("→ yield tree:%d", q.Tree), nil
	case "link":
		return linkCommand(q, at, get)
	}
	return "", errs.New(errs.InvalidField, "%q is not a loom form", op).WithHint("use the node's forms, or the command box").With("field", "op")
}

// continueCommand asks for continuations of the node at at.
func continueCommand(at string, get func(string) string) (string, error) {
	n, err := small(get("n"), "n", 1)
	if err != nil {
		return "", err
	}
	tokens, err := small(get("tokens"), "tokens", 0)
	if err != nil {
		return "", err
	}
	cmd := fmt.Sprintf("→ continue from %s n:%d", at, n)
	if tokens > 0 {
		cmd += fmt.Sprintf(" tokens:%d", tokens)
	}
	return cmd, nil
}

// branchCommand starts a branch from the node at at.
func branchCommand(at string, get func(string) string) (string, error) {
	text, err := quote("text", get("text"))
	if err != nil {
		return "", err
	}
	edge := ""
	switch e := get("edge"); e {
	case "", "primary":
	case "context", "instruction":
		edge = " as " + e
	default:
		return "", errs.New(errs.InvalidField, "%q is not a kind of branch", e).WithHint("use primary, context or instruction").With("field", "edge")
	}
	return "→ branch from " + at + edge + " " + text, nil
}

// linkCommand links the node at at to another node of its tree or to a
// document.
func linkCommand(q loomQuery, at string, get func(string) string) (string, error) {
	target := strings.TrimSpace(get("target"))
	note := ""
	if t := strings.TrimSpace(get("note")); t != "" {
		qn, err := quote("note", t)
		if err != nil {
			return "", err
		}
		note = " " + qn
	}
	if doc, ok := strings.CutPrefix(target, "doc:"); ok {
		doc = strings.Trim(doc, `"`)
		if err := validDoc(doc); err != nil || doc == "" {
			return "", errs.New(errs.InvalidField, "document name %q cannot be linked from here", doc).WithHint("a name without quotes or backslashes").With("field", "target")
		}
		return fmt.Sprintf(`→ link %s doc:"%s"%s`, at, doc, note), nil
	}
	if _, err := strconv.ParseUint(target, 10, 63); err != nil {
		return "", errs.New(errs.InvalidField, "link target %q is neither a node number nor doc:name", target).WithHint("give a node number of this tree, or doc:name").With("field", "target")
	}
	return fmt.Sprintf("→ link %d %s tree:%d%s", q.Node, target, q.Tree, note), nil
}

func small(v, name string, def int) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 || n > 100_000 {
		return 0, errs.New(errs.InvalidField, "%s %q is not a positive number", name, v).WithHint("give a whole number such as 1, 2 or 4").With("field", name)
	}
	return n, nil
}
