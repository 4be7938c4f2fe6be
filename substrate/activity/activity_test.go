package activity_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/activity"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The feed's paging and shape are this package's; what a reader may know
// of an entry is the core's rule (Service.AuditSeenBy), checked here
// through the feature as a surface calls it.

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func feedRoom(t *testing.T) (svc *substrate.Service, admin, al, bo *substrate.Principal) {
	t.Helper()
	svc = substrate.New(pgtest.New(t), substrate.Options{})
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "feed"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ = svc.Authenticate(ctx, room.Token)
	var ps []*substrate.Principal
	for _, a := range []string{"al", "bo"} {
		j, err := svc.Join(ctx, admin, "feed", substrate.JoinRequest{ID: a, Name: a + "'s name"})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := svc.Authenticate(ctx, j.Token)
		ps = append(ps, p)
	}
	return svc, admin, ps[0], ps[1]
}

func keysOf(acts []activity.Activity) []string {
	var out []string
	for _, a := range acts {
		for _, k := range a.Keys {
			out = append(out, k.Scope+"."+k.Key)
		}
	}
	return out
}

// A reader who is not room authority reads only the keys it may read
// now, and no entry that moved none of them; room authority reads all.
func TestRecentShowsOnlyWhatTheReaderMayRead(t *testing.T) {
	svc, admin, al, bo := feedRoom(t)
	ctx := context.Background()
	if _, err := svc.WriteState(ctx, admin, "feed", []substrate.Write{
		{Scope: "al", Key: "plan", Value: json.RawMessage(`"al's secret"`)},
		{Scope: "_shared", Key: "note", Value: json.RawMessage(`"public"`)},
	}, true); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteState(ctx, al, "feed", []substrate.Write{{Scope: "self", Key: "only-private", Value: json.RawMessage(`1`)}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.WriteState(ctx, admin, "feed", []substrate.Write{{Scope: "_shared", Key: "gated", Value: json.RawMessage(`2`), Enabled: "false"}}, false); err != nil {
		t.Fatal(err)
	}
	got, err := activity.Recent(ctx, svc, bo, "feed", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(got); !slices.Equal(keys, []string{"_shared.note"}) {
		t.Errorf("bo reads keys %v, want only _shared.note", keys)
	}
	raw, _ := json.Marshal(got)
	for _, sec := range []string{"plan", "only-private", "gated", "secret"} {
		if strings.Contains(string(raw), sec) {
			t.Errorf("HOLE: bo's feed tells %q: %s", sec, raw)
		}
	}
	all, err := activity.Recent(ctx, svc, admin, "feed", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"al.plan", "_shared.note", "al.only-private", "_shared.gated"} {
		if !slices.Contains(keysOf(all), want) {
			t.Errorf("room authority's feed lacks %s: %v", want, keysOf(all))
		}
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq >= all[i-1].Seq {
			t.Fatalf("the feed is not newest first: %v", all)
		}
	}
	// n bounds the entries, whatever the reader sees.
	if two, err := activity.Recent(ctx, svc, admin, "feed", 0, 2); err != nil || len(two) != 2 || two[0].Seq != all[0].Seq {
		t.Errorf("n=2: %d entries, err %v", len(two), err)
	}
	// upTo reads the past.
	if past, err := activity.Recent(ctx, svc, admin, "feed", all[1].Seq, 10); err != nil || len(past) == 0 || past[0].Seq != all[1].Seq {
		t.Errorf("upTo %d: %v, err %v", all[1].Seq, past, err)
	}
}

// A refused invocation's error code is room authority's.
func TestRecentTellsRefusalsToRoomAuthority(t *testing.T) {
	svc, admin, al, bo := feedRoom(t)
	ctx := context.Background()
	if _, err := svc.RegisterAction(ctx, admin, "feed", substrate.ActionDef{ID: "shut", Scope: "_shared", Enabled: "false",
		Writes: []substrate.WriteTemplate{{Key: "k", Value: json.RawMessage(`1`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Invoke(ctx, al, "feed", "shut", nil); err == nil {
		t.Fatal("a disabled action went through")
	}
	all, err := activity.Recent(ctx, svc, admin, "feed", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if a := all[0]; a.Kind != "invoke" || a.Action != "shut" || a.OK == nil || *a.OK || a.Error == "" || a.By != "al" {
		t.Errorf("room authority's newest entry: %+v", a)
	}
	seen, err := activity.Recent(ctx, svc, bo, "feed", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range seen {
		if a.Error != "" || a.Kind == "invoke" {
			t.Errorf("HOLE: bo's feed tells of the refusal: %+v", a)
		}
	}
}

// The agents a room had at a seq: each once, as it first joined; room
// authority only.
func TestAgentsJoinedBy(t *testing.T) {
	svc, admin, al, _ := feedRoom(t)
	ctx := context.Background()
	if _, err := svc.Join(ctx, admin, "feed", substrate.JoinRequest{ID: "al", Name: "al again"}); err != nil {
		t.Fatal(err)
	}
	got, err := activity.AgentsJoinedBy(ctx, svc, admin, "feed", 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "al" || got[0].Name != "al's name" || got[1].ID != "bo" || got[0].Seq >= got[1].Seq {
		t.Errorf("agents joined: %+v", got)
	}
	if first, err := activity.AgentsJoinedBy(ctx, svc, admin, "feed", got[0].Seq); err != nil || len(first) != 1 {
		t.Errorf("agents joined by seq %d: %+v, err %v", got[0].Seq, first, err)
	}
	if _, err := activity.AgentsJoinedBy(ctx, svc, al, "feed", 1<<62); !errs.Is(err, errs.Forbidden) {
		t.Errorf("HOLE: an agent reads the joins of the log: %v", err)
	}
}
