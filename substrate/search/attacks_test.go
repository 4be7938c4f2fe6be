package search_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
	"github.com/syncsubstrate/sync/substrate/search"
)

// The request's own bounds are this package's: the attacks on what a
// search reads (the read rule, the statements' time, the searches at
// once) are the core's, in substrate/attacks_test.go.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// searchRoomOf makes a room with the room token's principal and agents
// al, bo and cy, for the search attacks of issue 41.
func searchRoomOf(t *testing.T, svc *substrate.Service, id string) (admin *substrate.Principal, ag map[string]*substrate.Principal) {
	t.Helper()
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: id})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ = svc.Authenticate(ctx, room.Token)
	ag = map[string]*substrate.Principal{}
	for _, a := range []string{"al", "bo", "cy"} {
		j, err := svc.Join(ctx, admin, id, substrate.JoinRequest{ID: a, Name: a})
		if err != nil {
			t.Fatal(err)
		}
		ag[a], _ = svc.Authenticate(ctx, j.Token)
	}
	return admin, ag
}

// A query's words are bounded (issue 41 item 3): each is a posting list
// the index reads. Past the limit the search is refused, naming it.
func TestAttackSearchTermsAreBounded(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: []substrate.Feature{loom.Feature()}})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	_, ag := searchRoomOf(t, svc, "terms")
	words := strings.Fields("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec")
	q := `"` + strings.Join(words[:8], " ") + `" or ` + strings.Join(words[8:], " -")
	_, err := search.Room(ctx, svc, ag["cy"], "terms", search.Request{Query: q})
	e, ok := err.(*errs.Error)
	if !ok || e.Code != errs.InvalidField || !strings.Contains(e.Message, "17 words") || !strings.Contains(e.Message, "16") {
		t.Fatalf("HOLE: a query of 17 words: %v", err)
	}
	if _, err := search.Room(ctx, svc, ag["cy"], "terms", search.Request{Query: strings.Join(words[:16], " or ")}); err != nil {
		t.Fatalf("a query of 16 words: %v", err)
	}
}
