package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// The loom page (seed 002): the room's loom as a person sees and works it,
// through the same → commands the sync_loom tool runs (substrate.Loom), so
// people and models share one tree, one set of permissions and one
// presence. GET shows the tree and, with ?node=N, a node with its
// annotations and links, read with read-only authority (a read never
// moves anyone's position nor writes a trace). POST runs commands as the
// person's own agent: typed in the command box, or composed by the node's
// forms (continue, branch, annotate).

// loomReads are the commands the page reads with: the trees, and the
// node or document asked for.
func loomReads(node, doc string) string {
	cmds := []string{"→ tree summary", "→ tree depth:6"}
	if node != "" {
		cmds = append(cmds, "→ view "+node+" with-annotations", "→ list "+node+" links")
	}
	if doc != "" {
		cmds = append(cmds, `→ read doc:"`+doc+`"`)
	}
	return strings.Join(cmds, "\n")
}

// validNode refuses a node that is not a node number ("" is none).
func validNode(node string) error {
	if node == "" {
		return nil
	}
	if _, err := strconv.ParseUint(node, 10, 63); err != nil {
		return errs.New(errs.InvalidField, "node %q is not a node number", node).WithHint("give a node's number, as the tree shows it")
	}
	return nil
}

// validDoc refuses a document name a command cannot carry.
func validDoc(doc string) error {
	if strings.ContainsAny(doc, "\"\\\n\r”") || len(doc) > 200 {
		return errs.New(errs.InvalidField, "document name %q cannot be read from here", doc).WithHint("use the command box: → read doc:\"…\"")
	}
	return nil
}

func (wb *Web) loomPage(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, who, access, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	node := r.URL.Query().Get("node")
	if err := validNode(node); err != nil {
		wb.fail(w, r, err)
		return
	}
	doc := r.URL.Query().Get("doc")
	if err := validDoc(doc); err != nil {
		wb.fail(w, r, err)
		return
	}
	wb.renderLoom(w, r, http.StatusOK, roomID, readOnly(p), who, viewToken, viewToken == "" && canAct(access), node, doc, "", nil)
}

// readOnly is p's authority to read with and nothing more: the room token
// reads as its view token, an agent as an observer that keeps its loom
// permissions (the loom's reads by an agent write its position and trace;
// a page read must not, nor show what → view would refuse the agent).
func readOnly(p *substrate.Principal) *substrate.Principal {
	return substrate.ReadOnlyOf(p)
}

// renderLoom reads the loom and shows it, with ran (the result of the
// commands the person just ran) on top.
func (wb *Web) renderLoom(w http.ResponseWriter, r *http.Request, status int, roomID string, p *substrate.Principal, who, viewToken string, canAct bool, node, doc, commands string, ran *loom.Result) {
	read, err := loom.Of(wb.opt.Substrate).Run(r.Context(), p, roomID, loomReads(node, doc))
	if err != nil && !errs.Is(err, errs.NotFound) {
		var e *errs.Error
		if !errors.As(err, &e) || e.Code == errs.Internal {
			wb.fail(w, r, err)
			return
		}
	}
	data := map[string]any{"RoomID": roomID, "Who": who, "ViewToken": viewToken, "CanAct": canAct, "Node": node, "Doc": doc, "Commands": commands,
		"Presence": wb.loomPresence(r, p, roomID)}
	if read != nil {
		data["Read"] = read.Steps
	} else {
		data["Empty"] = errs.From(err).Message
	}
	if ran != nil {
		data["Ran"] = ran.Steps
	}
	wb.render(w, r, status, "loom", data, viewToken != "")
}

// loomRun runs commands as the person's own agent.
func (wb *Web) loomRun(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, ok := wb.actor(w, r, roomID)
	if !ok {
		return
	}
	node := strings.TrimSpace(r.PostFormValue("node"))
	if err := validNode(node); err != nil {
		wb.fail(w, r, err)
		return
	}
	commands := strings.TrimSpace(r.PostFormValue("commands"))
	if op := r.PostFormValue("op"); op != "" {
		text := strings.TrimSpace(r.PostFormValue("text"))
		var err error
		if commands, err = loomCommand(op, node, text); err != nil {
			wb.fail(w, r, err)
			return
		}
	}
	if commands == "" {
		wb.fail(w, r, errs.New(errs.InvalidField, "no command").WithHint("type a command such as → tree, or → help for the list"))
		return
	}
	res, err := loom.Of(wb.opt.Substrate).Run(r.Context(), p, roomID, commands)
	status := http.StatusOK
	if err != nil {
		e := errs.From(err)
		if e.Code == errs.Internal {
			wb.fail(w, r, err)
			return
		}
		status = e.Code.Status()
		res = &loom.Result{Steps: []loom.Step{{Command: commands, Text: e.Message + hintOf(e)}}}
	}
	userID, username, _ := wb.opt.SignedIn(r)
	rp, access, err := wb.opt.Lobby.PersonPrincipal(r.Context(), userID, username, roomID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	wb.renderLoom(w, r, status, roomID, readOnly(rp), username+" ("+access+")", "", true, node, "", commands, res)
}

func hintOf(e *errs.Error) string {
	if e.Hint == "" {
		return ""
	}
	return " (" + e.Hint + ")"
}

// loomCommand composes the command a node's form stands for, quoting the
// person's text as the loom's parser reads it.
func loomCommand(op, node, text string) (string, error) {
	if node == "" {
		return "", errs.New(errs.InvalidField, "%s needs a node", op).WithHint("open a node first")
	}
	quoted := func() (string, error) {
		if text == "" {
			return "", errs.New(errs.InvalidField, "%s needs text", op).WithHint("write the text, then press %s", op)
		}
		if strings.ContainsAny(text, "\n\r”") {
			return "", errs.New(errs.InvalidField, "the text has a line break or a closing curly quote, which a loom command cannot carry").
				WithHint("keep it to one line, or use the command box")
		}
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(text) + `"`, nil
	}
	switch op {
	case "continue":
		return "→ continue from " + node, nil
	case "branch":
		q, err := quoted()
		return "→ branch from " + node + " " + q, err
	case "annotate":
		q, err := quoted()
		return "→ annotate " + node + " " + q, err
	}
	return "", errs.New(errs.InvalidField, "%q is not a loom form", op).WithHint("use continue, branch or annotate, or the command box")
}

// present is someone at work in a tree: on which branch and node, since
// when.
type present struct {
	Tree                string
	Actor, Kind, Branch string
	Node                int64
	Ago                 string
}

// loomPresence is who is where in the room's trees: the loom keeps each
// actor's place in _loom.live (a communal scope) for a short while after
// they last moved.
func (wb *Web) loomPresence(r *http.Request, p *substrate.Principal, roomID string) []present {
	st, err := wb.opt.Substrate.ReadState(r.Context(), p, roomID, substrate.ReadQuery{Scope: "_loom.live"})
	if err != nil {
		return nil
	}
	var out []present
	for _, e := range st.Entries {
		rest, ok := strings.CutPrefix(e.Key, "at:")
		if !ok {
			continue
		}
		tree, _, _ := strings.Cut(rest, ":")
		var pr loom.Presence
		if json.Unmarshal(e.Value, &pr) != nil {
			continue
		}
		out = append(out, present{Tree: tree, Actor: pr.Actor, Kind: pr.Kind, Branch: pr.Branch, Node: pr.Node, Ago: ago(pr.At)})
	}
	return out
}
