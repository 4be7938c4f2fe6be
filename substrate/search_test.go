package substrate_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/search"
)

// The search language is configurable: english (the default) stems
// "deciding" to match "decided"; simple does not, and a change indexes
// the entries already written again. A language PostgreSQL does not have
// is refused with what to choose.
func TestSearchLanguage(t *testing.T) {
	svc := substrate.New(pgtest.New(t), substrate.Options{Features: testFeatures})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "lang"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.Invoke(ctx, admin, "lang", "_send_message", json.RawMessage(`{"body":"we decided on Friday"}`)); err != nil {
		t.Fatal(err)
	}
	hits := func(q string) int {
		t.Helper()
		res, err := search.Room(ctx, svc, admin, "lang", search.Request{Query: q})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Hits)
	}
	if changed, err := svc.ConfigureSearch(ctx, "english"); err != nil || changed {
		t.Fatalf("english is the default: changed %v, %v", changed, err)
	}
	if hits("deciding") != 1 {
		t.Fatal("english does not stem deciding to decided")
	}
	if changed, err := svc.ConfigureSearch(ctx, "simple"); err != nil || !changed {
		t.Fatalf("simple: changed %v, %v", changed, err)
	}
	if n := hits("deciding"); n != 0 {
		t.Errorf("simple still stems (the entry was not indexed again): %d hits", n)
	}
	if hits("decided") != 1 {
		t.Error("simple does not find the word as written")
	}
	if _, err := svc.ConfigureSearch(ctx, "klingon"); !errs.Is(err, errs.InvalidField) {
		t.Errorf("klingon: %v", err)
	}
}
