package rest

import (
	"net/http"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// loom runs → command lines (seed 002) in the room's loom:
// POST /rooms/:id/loom {"commands": "→ view 23\n→ list 23 links"}. The answer
// is the text a model reads (ambient line first) and each step's outcome.
// When every command failed, the first failure is the error, with its
// status. "tree" and "node", when given together, are where the call
// starts (the node a client shows), instead of where the agent stands.
func (a *api) loom(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Commands string `json:"commands"`
		Tree     int64  `json:"tree"`
		Node     int64  `json:"node"`
	}
	if !a.decode(w, r, &body, false) {
		return
	}
	if (body.Tree != 0 || body.Node != 0) && (body.Tree <= 0 || body.Node <= 0) {
		a.fail(w, r, errs.New(errs.InvalidField, "tree %d and node %d do not name a node", body.Tree, body.Node).
			WithHint(`give both, as positive numbers ({"tree": 1, "node": 4}), or neither`).With("field", "node"))
		return
	}
	res, err := loom.Of(a.svc).RunAt(r.Context(), p, r.PathValue("room"), body.Commands, loom.Place{Tree: body.Tree, Node: body.Node})
	a.reply(w, r, http.StatusOK, res, err)
}
