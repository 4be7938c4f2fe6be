package rest

import (
	"net/http"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// loom runs → command lines (seed 002) in the room's loom:
// POST /rooms/:id/loom {"commands": "→ view 23\n→ list 23 links"}. The answer
// is the text a model reads (ambient line first) and each step's outcome.
// When every command failed, the first failure is the error, with its
// status.
func (a *api) loom(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Commands string `json:"commands"`
	}
	if !a.decode(w, r, &body, false) {
		return
	}
	res, err := loom.Of(a.svc).Run(r.Context(), p, r.PathValue("room"), body.Commands)
	a.reply(w, r, http.StatusOK, res, err)
}
