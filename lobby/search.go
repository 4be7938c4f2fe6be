package lobby

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/search"
)

// Search across a person's rooms (issue 31): each room is searched with
// the person's own authority there (search.Room, the one read rule),
// and the hits merged best first. Paging is per room: a cross-room
// result names the call that reads one room further.

// maxSearchRooms bounds the rooms one cross-room search reads.
const maxSearchRooms = 25

// RoomsSearch is a search of one room or (Room "*") of several, whose
// hits then name their room.
type RoomsSearch struct {
	*search.Result
	// Searched counts the rooms searched; Unsearched names those left
	// out (past maxSearchRooms, or refused).
	Searched   int      `json:"rooms_searched"`
	Unsearched []string `json:"unsearched,omitempty"`
	// MoreIn names, per room with more hits, the call that reads them.
	MoreIn map[string]string `json:"more_in,omitempty"`
}

// searchRooms searches rooms as principal says, req's limit hits in all.
func searchRooms(ctx context.Context, svc *substrate.Service, rooms []string, principal func(room string) (*substrate.Principal, error),
	req search.Request, words errs.Words) (*RoomsSearch, error) {
	if req.Offset != 0 {
		return nil, errs.New(errs.InvalidField, "a search of all your rooms has no offset").With("field", "offset").
			WithHint("search one room to page: %s", words.Say(errs.Step{Op: errs.OpSearch, Room: "<room>", Args: map[string]any{"q": req.Query, "offset": req.Offset}}))
	}
	out := &RoomsSearch{Result: &search.Result{Room: "*", Query: req.Query, Hits: []search.Hit{}}}
	if req.Limit == 0 {
		req.Limit = 10
	}
	perRoom := req
	for i, room := range rooms {
		if i >= maxSearchRooms {
			out.Unsearched = append(out.Unsearched, rooms[i:]...)
			break
		}
		p, err := principal(room)
		if err != nil {
			out.Unsearched = append(out.Unsearched, room)
			continue
		}
		p.Words = words
		res, err := search.Room(ctx, svc, p, room, perRoom)
		if err != nil {
			if errs.Is(err, errs.InvalidField) {
				return nil, err // the request, not the room: every room would refuse it
			}
			out.Unsearched = append(out.Unsearched, room)
			continue
		}
		out.Searched++
		for _, h := range res.Hits {
			h.Room = room
			out.Hits = append(out.Hits, h)
		}
		if res.More != "" {
			if out.MoreIn == nil {
				out.MoreIn = map[string]string{}
			}
			out.MoreIn[room] = res.More
		}
	}
	sort.SliceStable(out.Hits, func(i, j int) bool { return out.Hits[i].Rank > out.Hits[j].Rank })
	if len(out.Hits) > req.Limit {
		for _, h := range out.Hits[req.Limit:] {
			if out.MoreIn == nil {
				out.MoreIn = map[string]string{}
			}
			if _, ok := out.MoreIn[h.Room]; !ok {
				out.MoreIn[h.Room] = words.Say(errs.Step{Op: errs.OpSearch, Room: h.Room, Args: map[string]any{"q": req.Query}})
			}
		}
		out.Hits = out.Hits[:req.Limit]
	}
	// The merged page within the byte budget, as one room's would be.
	budget := req.MaxBytes
	if budget == 0 {
		budget = 16 << 10
	}
	size := 300 + 2*len(req.Query)
	for i, h := range out.Hits {
		raw, _ := json.Marshal(h)
		if size += len(raw) + 1; size > budget && i > 0 {
			if out.MoreIn == nil {
				out.MoreIn = map[string]string{}
			}
			for _, cut := range out.Hits[i:] {
				if _, ok := out.MoreIn[cut.Room]; !ok {
					out.MoreIn[cut.Room] = words.Say(errs.Step{Op: errs.OpSearch, Room: cut.Room, Args: map[string]any{"q": req.Query}})
				}
			}
			out.Hits = out.Hits[:i]
			break
		}
	}
	return out, nil
}

// SearchSession searches every room of the session's scope as the
// session reads each (its agent where embodied, an observer elsewhere).
func (l *Lobby) SearchSession(ctx context.Context, s *Session, req search.Request, words errs.Words) (*RoomsSearch, error) {
	v, err := l.view(ctx, s, false) // its rooms, not their summaries
	if err != nil {
		return nil, err
	}
	rooms := make([]string, 0, len(v.Rooms))
	for _, r := range v.Rooms {
		rooms = append(rooms, r.Room)
	}
	req.Caller = s.UserID // the cap on searches at once is the person's
	return searchRooms(ctx, l.svc, rooms, func(room string) (*substrate.Principal, error) {
		p, _, err := l.Principal(ctx, s, room)
		return p, err
	}, req, words)
}

// SearchPerson searches every room of a person's, as the person reads
// each on the pages (PersonPrincipal).
func (l *Lobby) SearchPerson(ctx context.Context, userID, username string, req search.Request, words errs.Words) (*RoomsSearch, error) {
	rooms, err := l.UserRooms(ctx, userID)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(rooms))
	for _, r := range rooms {
		ids = append(ids, r.ID)
	}
	req.Caller = userID // the cap on searches at once is the person's
	return searchRooms(ctx, l.svc, ids, func(room string) (*substrate.Principal, error) {
		p, _, err := l.PersonPrincipal(ctx, userID, username, room)
		return p, err
	}, req, words)
}

// Search is a session's search: of room (its focus when ""), or with
// room "*" of every room in its scope.
func (l *Lobby) Search(ctx context.Context, s *Session, room string, req search.Request, words errs.Words) (*RoomsSearch, error) {
	if room == "*" {
		return l.SearchSession(ctx, s, req, words)
	}
	if room == "" {
		room = s.RoomID
	}
	p, _, err := l.Principal(ctx, s, room)
	if err != nil {
		return nil, err
	}
	p.Words = words
	req.Caller = s.UserID // the cap on searches at once is the person's
	res, err := search.Room(ctx, l.svc, p, room, req)
	if err != nil {
		return nil, err
	}
	return &RoomsSearch{Result: res, Searched: 1}, nil
}
