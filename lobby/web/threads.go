package web

import (
	"net/http"
	"slices"
	"sort"
	"strconv"

	"github.com/syncsubstrate/sync/substrate"
)

// The threads page (issue 31): a room's conversations folded by thread,
// newest activity first, each with its subject, who took part, how many
// messages and how many unread (the person's own agent's read marks, as
// the context counts them); ?thread=N opens one. It reads the newest 500
// messages with the person's authority, as the room page reads.

// pageThread is one thread as the page shows it.
type pageThread struct {
	ID           int64
	Subject      string
	Participants []string
	Messages     []map[string]any
	Unread       int
	Open         bool
}

func (wb *Web) threadsPage(w http.ResponseWriter, r *http.Request) {
	roomID := r.PathValue("room")
	p, who, _, viewToken, ok := wb.reader(w, r, roomID)
	if !ok {
		return
	}
	open, _ := strconv.ParseInt(r.URL.Query().Get("thread"), 10, 64)
	env, err := wb.opt.Substrate.Context(r.Context(), p, roomID, substrate.ContextRequest{Depth: "lean", Only: []string{"messages"}, MessagesLimit: 500})
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	byID := map[int64]*pageThread{}
	var order []*pageThread
	for _, m := range env.Messages.Recent {
		id := substrate.MessageThread(m)
		if id == 0 {
			continue
		}
		th := byID[id]
		if th == nil {
			th = &pageThread{ID: id, Open: id == open}
			byID[id] = th
			order = append(order, th)
		}
		if s, _ := m["subject"].(string); s != "" && th.Subject == "" {
			th.Subject = s
		}
		if from, _ := m["from"].(string); from != "" && !slices.Contains(th.Participants, from) {
			th.Participants = append(th.Participants, from)
		}
		th.Messages = append(th.Messages, m)
	}
	for _, s := range env.Messages.Threads {
		if th := byID[s.Thread]; th != nil {
			th.Unread = s.Unread
		}
	}
	latest := func(th *pageThread) int64 { s, _ := th.Messages[len(th.Messages)-1]["seq"].(int64); return s }
	sort.SliceStable(order, func(i, j int) bool { return latest(order[i]) > latest(order[j]) })
	wb.render(w, r, http.StatusOK, "threads", map[string]any{"RoomID": roomID, "Who": who, "ViewToken": viewToken, "Threads": order}, viewToken != "")
}
