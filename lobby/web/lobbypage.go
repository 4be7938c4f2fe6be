// The lobby page (/): the signed-in person's rooms.

package web

import (
	"net/http"
)

// lobbyPage lists the signed-in person's rooms.
func (wb *Web) lobbyPage(w http.ResponseWriter, r *http.Request) {
	userID, username, ok := wb.opt.SignedIn(r)
	if !ok {
		http.Redirect(w, r, "/signin?next=/", http.StatusSeeOther)
		return
	}
	rooms, err := wb.opt.Lobby.UserRooms(r.Context(), userID)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	wb.render(w, r, http.StatusOK, "lobby", map[string]any{"Who": username, "Rooms": rooms}, false)
}
