package web_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
)

// timerWake is how late after the moment a timer changes the room a live
// page may hear of it: the feed's timer, a read and a render (on a
// two-connection pool, under the race detector, on a shared machine).
const timerWake = time.Second

// What a timer or now changes reaches a live page at that moment, with
// no write: an entry's timer ending, an action's cooldown ending, a
// message's timer ending, and an entry gate on now opening. The streams
// of the room hear it once per distinct view, as for a commit.
func TestLiveStreamHearsWhatTheClockChanges(t *testing.T) {
	s := newSite(t, web.Options{MaxStreams: 64}, "alice")
	ctx := context.Background()
	// Three tabs of alice and one view link: two views.
	alice := s.stream("alice", "/live/rooms/lab?seq="+s.seq(), "")
	var others []<-chan string
	for range 2 {
		others = append(others, s.stream("alice", "/live/rooms/lab?seq="+s.seq(), ""))
	}
	viewer := s.stream("", "/live/rooms/lab?seq="+s.seq()+"&view="+s.room.ViewToken, "")
	all := append([]<-chan string{alice, viewer}, others...)
	// settle takes the events of what the case wrote (up to the room's
	// seq now), so that what follows is the clock's alone.
	settle := func() {
		t.Helper()
		want := `"seq":` + s.seq() + ","
		for i, ev := range all {
			deadline := time.After(10 * time.Second)
		follow:
			for {
				select {
				case e := <-ev:
					if strings.Contains(e, want) {
						break follow
					}
				case <-deadline:
					t.Fatalf("stream %d missed the case's writes (seq %s)", i, want)
				}
			}
		}
		// The reads of the last writes are done, and what they sent is
		// taken (a render of a running cooldown differs from the last by
		// its ms_left: two notifications of one seq send two events).
		s.liveSettled()
		for _, ev := range all {
			for len(ev) > 0 {
				<-ev
			}
		}
	}
	cases := []struct {
		name string
		// set writes what the clock changes at the moment it returns;
		// heard checks that an event of the stream carries the change.
		set   func() time.Time
		who   <-chan string
		heard func(ev string) bool
	}{
		{"an entry's timer ends", func() time.Time {
			at := time.Now().Add(1500 * time.Millisecond)
			if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{{Scope: "_shared", Key: "flash", Value: []byte(`"soon gone"`),
				Timer: &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano)}}}, false); err != nil {
				t.Fatal(err)
			}
			return at
		}, alice, func(ev string) bool {
			return !strings.Contains(ev, "soon gone") && (strings.Contains(ev, `"id":"entry-_shared-flash"`) || strings.Contains(ev, `"id":"state"`) || strings.Contains(ev, `"id":"fold-state"`))
		}},
		{"an action's cooldown ends", func() time.Time {
			if _, err := s.svc.RegisterAction(ctx, s.admin, "lab", substrate.ActionDef{ID: "ring", Description: "Ring the bell",
				OnInvoke: &substrate.OnInvoke{Timer: &substrate.Timer{MS: 1500}}, Writes: []substrate.WriteTemplate{{Key: "rung", Value: []byte(`true`)}}}); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := s.svc.Invoke(ctx, s.admin, "lab", "ring", nil); err != nil {
				t.Fatal(err)
			}
			return start.Add(1500 * time.Millisecond)
		}, alice, func(ev string) bool {
			return strings.Contains(ev, "Available") && !strings.Contains(ev, "cooling down")
		}},
		{"a message's timer ends", func() time.Time {
			at := time.Now().Add(1500 * time.Millisecond)
			if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{{Scope: "_messages", Append: true,
				Value: json.RawMessage(`{"kind":"chat","body":"this vanishes"}`), Timer: &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano)}}}, true); err != nil {
				t.Fatal(err)
			}
			return at
		}, alice, func(ev string) bool {
			return strings.Contains(ev, `"id":"msg-`) && strings.Contains(ev, `"op":"remove"`)
		}},
		{"an entry gate on now opens", func() time.Time {
			at := time.Now().Add(1500 * time.Millisecond)
			gate := `now >= timestamp("` + at.UTC().Format(time.RFC3339Nano) + `")`
			if _, err := s.svc.WriteState(ctx, s.admin, "lab", []substrate.Write{{Scope: "_shared", Key: "door", Value: []byte(`"open at last"`), Enabled: gate}}, false); err != nil {
				t.Fatal(err)
			}
			return at
		}, viewer, func(ev string) bool {
			return strings.Contains(ev, "entry-_shared-door") && strings.Contains(ev, "open at last")
		}},
	}
	for _, c := range cases {
		at := c.set()
		seq := s.seq()
		settle()
		reads0, renders0 := web.LiveCounts(s.wb)
		if time.Now().After(at) {
			t.Fatalf("%s: the case took past its moment to set up", c.name)
		}
		select {
		case ev := <-c.who:
			heard := time.Now()
			if heard.Before(at) {
				t.Fatalf("%s: an event %v before the moment: %s", c.name, at.Sub(heard), ev)
			}
			if late := heard.Sub(at); late > timerWake {
				t.Errorf("%s: the page heard of it %v after the moment, want within %v", c.name, late, timerWake)
			}
			if !strings.Contains(ev, `"seq":`+seq+",") {
				t.Errorf("%s: the event is at another seq than %s (a write?): %s", c.name, seq, ev)
			}
			if !c.heard(ev) {
				t.Errorf("%s: the event does not carry the change: %s", c.name, ev)
			}
			t.Logf("%s: heard %v after the moment", c.name, heard.Sub(at).Round(time.Millisecond))
		case <-time.After(time.Until(at) + 5*time.Second):
			t.Errorf("%s: no event within 5 s after the moment, with no write", c.name)
			continue
		}
		s.liveSettled()
		// Once per view: alice's three tabs share a read, the view link
		// reads apart.
		if reads, renders := web.LiveCounts(s.wb); reads-reads0 > 2 || renders-renders0 > 2 {
			t.Errorf("%s: %d reads and %d renders for four streams of two views, want at most 2 each", c.name, reads-reads0, renders-renders0)
		}
		for _, ev := range all {
			for len(ev) > 0 {
				<-ev
			}
		}
	}
}

// A room in which nothing changes by the clock soon is not read again
// until something does: no periodic re-renders, whether it has no timer
// at all or one an hour away.
func TestLiveStreamWithNoTimerIsNotReread(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	s.write("_shared", "x", "1")
	ev := s.stream("alice", "/live/rooms/lab?seq="+s.seq(), "")
	view := s.stream("", "/live/rooms/lab?seq="+s.seq()+"&view="+s.room.ViewToken, "")
	quiet := func(what string) {
		t.Helper()
		s.liveSettled() // the first reads
		reads0, _ := web.LiveCounts(s.wb)
		select {
		case e := <-ev:
			t.Fatalf("%s: an event with no change: %s", what, e)
		case e := <-view:
			t.Fatalf("%s: an event with no change: %s", what, e)
		case <-time.After(3 * time.Second):
		}
		if reads, _ := web.LiveCounts(s.wb); reads != reads0 {
			t.Fatalf("%s: the room was read %d times in 3 s with no change", what, reads-reads0)
		}
	}
	quiet("no timer")
	if _, err := s.svc.WriteState(context.Background(), s.admin, "lab", []substrate.Write{{Scope: "_shared", Key: "later", Value: []byte(`1`),
		Timer: &substrate.Timer{MS: time.Hour.Milliseconds()}}}, false); err != nil {
		t.Fatal(err)
	}
	next(t, ev, 5*time.Second)
	next(t, view, 5*time.Second)
	quiet("a timer an hour away")
}

// A view whose use of now no moment can be solved for (the parity of the
// second) is read again on the waits' cadence (1 s by default), aligned
// on the wall clock: the page follows it with no write, about once a
// second, once per view.
func TestLiveStreamOnAnOpaqueNowFollowsTheCadence(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	if _, err := s.svc.RegisterView(context.Background(), s.admin, "lab", substrate.ViewDef{ID: "tick", Expr: `now.getSeconds() % 2 == 0 ? "even" : "odd"`}); err != nil {
		t.Fatal(err)
	}
	ev := s.stream("alice", "/live/rooms/lab?seq="+s.seq(), "")
	s.liveSettled()
	reads0, _ := web.LiveCounts(s.wb)
	start := time.Now()
	var heard []time.Duration
	for len(heard) < 3 {
		select {
		case e := <-ev:
			if !strings.Contains(e, "even") && !strings.Contains(e, "odd") {
				t.Fatalf("an event that does not carry the view: %s", e)
			}
			heard = append(heard, time.Since(start))
		case <-time.After(3 * time.Second):
			t.Fatalf("no event within 3 s of a view that changes every second (heard %v)", heard)
		}
	}
	// Three changes took about three seconds, read once each (the
	// cadence's steps, not a tighter loop).
	if reads, _ := web.LiveCounts(s.wb); reads-reads0 > 4 {
		t.Errorf("%d reads for 3 changes of a view on the cadence, want at most 4", reads-reads0)
	}
	t.Logf("heard at %v", heard)
}

// A moment one reader's read foresees wakes that reader's streams only:
// an agent's private entry whose timer runs out changes the owner's page
// at that moment, and neither reads nor tells an observer's, who cannot
// see it (nor when it went).
func TestLiveClockWakesOnlyWhoSeesIt(t *testing.T) {
	s := newSite(t, web.Options{}, "alice", "bob")
	s.share("bob", "observer")
	s.join("robot", "Robot")
	at := time.Now().Add(1500 * time.Millisecond)
	if _, err := s.svc.WriteState(context.Background(), s.admin, "lab", []substrate.Write{{Scope: "robot", Key: "secret-plan", Value: []byte(`"gone soon"`),
		Timer: &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano)}}}, false); err != nil {
		t.Fatal(err)
	}
	owner := s.stream("alice", "/live/rooms/lab?seq="+s.seq(), "")
	view := s.stream("bob", "/live/rooms/lab?seq="+s.seq(), "")
	s.liveSettled()
	reads0, _ := web.LiveCounts(s.wb)
	select {
	case e := <-owner:
		if late := time.Since(at); late < 0 || late > timerWake || !strings.Contains(e, "entry-robot-secret-plan") && !strings.Contains(e, `"id":"state"`) && !strings.Contains(e, `"id":"fold-state"`) {
			t.Fatalf("the owner's page heard %v after the moment: %s", late, e)
		}
	case e := <-view:
		t.Fatalf("the observer's page heard of a private timer: %s", e)
	case <-time.After(time.Until(at) + 5*time.Second):
		t.Fatal("the owner's page did not hear the private entry go")
	}
	select {
	case e := <-view:
		t.Fatalf("the observer's page heard of a private timer: %s", e)
	case <-time.After(time.Second):
	}
	if reads, _ := web.LiveCounts(s.wb); reads-reads0 != 1 {
		t.Fatalf("%d reads when the owner's private timer ran out, want 1 (the owner's; the observer's page is not read again)", reads-reads0)
	}
	// A message whose gate hides it from the observer: its timer's end is
	// not the observer's either.
	at = time.Now().Add(1500 * time.Millisecond)
	if _, err := s.svc.WriteState(context.Background(), s.admin, "lab", []substrate.Write{{Scope: "_messages", Append: true, Enabled: "false",
		Value: json.RawMessage(`{"kind":"chat","body":"for nobody"}`), Timer: &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano)}}}, true); err != nil {
		t.Fatal(err)
	}
	next(t, view, 5*time.Second) // the write's own event (its activity row)
	s.liveSettled()
	for len(view) > 0 {
		<-view
	}
	select {
	case e := <-view:
		t.Fatalf("the observer's page heard of a message it cannot see running out: %s", e)
	case <-time.After(time.Until(at) + time.Second):
	}
}

// A timer that runs out between the page's read and its stream's start
// (the page loading, or a dropped connection) is not missed: the page
// says when what it shows next changes (data-until, passed as ?until=;
// an event's id carries it for a reconnect), and a stream starting at the
// page's seq past that moment sends the section all the same.
func TestLiveStreamStartingPastAMomentSendsTheSection(t *testing.T) {
	s := newSite(t, web.Options{}, "alice")
	at := time.Now().Add(800 * time.Millisecond)
	if _, err := s.svc.WriteState(context.Background(), s.admin, "lab", []substrate.Write{{Scope: "_shared", Key: "flash", Value: []byte(`"soon gone"`),
		Timer: &substrate.Timer{At: at.UTC().Format(time.RFC3339Nano)}}}, false); err != nil {
		t.Fatal(err)
	}
	_, _, page := s.get("alice", "/rooms/lab")
	m := regexp.MustCompile(`data-seq="(\d+)" data-until="(\d+)"`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, "soon gone") {
		t.Fatalf("the page does not say when what it shows changes: %.400s", page)
	}
	if until, _ := strconv.ParseInt(m[2], 10, 64); time.UnixMilli(until).Before(at) || time.UnixMilli(until).After(at.Add(100*time.Millisecond)) {
		t.Fatalf("data-until %s, want the entry's end %d", m[2], at.UnixMilli())
	}
	// Stays: a stream opened after the entry's end, at a known time, is
	// what this checks.
	time.Sleep(time.Until(at) + 100*time.Millisecond)
	late := s.stream("alice", "/live/rooms/lab?seq="+m[1]+"&until="+m[2], "")
	if e := next(t, late, 5*time.Second); !strings.Contains(e, `"html":`) || strings.Contains(e, "soon gone") {
		t.Fatalf("a stream started past the page's moment: %s", e)
	}
	// A reconnect whose last event foresaw a moment now past, likewise;
	// one whose last event foresaw none is up to date.
	again := s.stream("alice", "/live/rooms/lab", m[1]+"-"+m[2])
	if e := next(t, again, 5*time.Second); !strings.Contains(e, `"html":`) || strings.Contains(e, "soon gone") {
		t.Fatalf("a reconnect past its last event's moment: %s", e)
	}
	current := s.stream("alice", "/live/rooms/lab", m[1])
	select {
	case e := <-current:
		t.Fatalf("a reconnect that foresaw nothing was sent: %s", e)
	case <-time.After(time.Second):
	}
}
