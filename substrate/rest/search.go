package rest

import (
	"net/http"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/search"
)

// search answers GET /rooms/:id/search?q=…: what the caller may read of
// the room that matches, best first (issue 31).
func (a *api) search(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	req, err := search.ParseRequest(r.URL.Query().Get)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := search.Room(r.Context(), a.svc, p, r.PathValue("room"), req)
	a.reply(w, r, http.StatusOK, res, err)
}
