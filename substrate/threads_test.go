package substrate_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

type threadRoom struct {
	t   *testing.T
	svc *substrate.Service
	ag  map[string]*substrate.Principal
}

func newThreadRoom(t *testing.T, opt substrate.Options, agents ...string) *threadRoom {
	t.Helper()
	if opt.Features == nil {
		opt.Features = testFeatures
	}
	svc := substrate.New(pgtest.New(t), opt)
	t.Cleanup(svc.Close)
	ctx := context.Background()
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "thr"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	tr := &threadRoom{t: t, svc: svc, ag: map[string]*substrate.Principal{"room": admin}}
	for _, id := range agents {
		j, err := svc.Join(ctx, admin, "thr", substrate.JoinRequest{ID: id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		tr.ag[id], _ = svc.Authenticate(ctx, j.Token)
	}
	return tr
}

// send sends a message as who and returns its seq.
func (tr *threadRoom) send(who string, params string) int64 {
	tr.t.Helper()
	res, err := tr.svc.Invoke(context.Background(), tr.ag[who], "thr", "_send_message", json.RawMessage(params))
	if err != nil {
		tr.t.Fatalf("send %s: %v", params, err)
	}
	return *res.Writes[0].SortKey
}

func (tr *threadRoom) read(who string, q substrate.ContextRequest) *substrate.Envelope {
	tr.t.Helper()
	if q.MessagesLimit == 0 {
		q.MessagesLimit = 100
	}
	if q.Depth == "" {
		q.Depth = "lean"
	}
	env, err := tr.svc.Context(context.Background(), tr.ag[who], "thr", q)
	if err != nil {
		tr.t.Fatal(err)
	}
	return env
}

// Threads (issue 31 item 2): a reply joins the thread of the message it
// answers and carries its subject; the context lists threads compactly
// with unread counts; a read asks for one thread whole; a wait waits on
// a thread; a reply to what is not a readable message is refused.
func TestThreads(t *testing.T) {
	tr := newThreadRoom(t, substrate.Options{}, "al", "bo", "cy")
	ctx := context.Background()
	root := tr.send("al", `{"body": "When do we ship?", "subject": "Release date"}`)
	r1 := tr.send("bo", fmt.Sprintf(`{"body": "Friday", "reply_to": %d}`, root))
	tr.send("cy", `{"body": "unrelated chatter"}`)
	r2 := tr.send("cy", fmt.Sprintf(`{"body": "Friday works", "reply_to": %d}`, r1)) // a reply to a reply stays in the thread
	plain := tr.send("bo", `{"body": "lunch?"}`)
	tr.send("al", fmt.Sprintf(`{"body": "sure", "reply_to": %d}`, plain)) // a reply to an unthreaded message starts a thread there

	env := tr.read("al", substrate.ContextRequest{})
	var rel *substrate.ThreadSummary
	for i, th := range env.Messages.Threads {
		if th.Thread == root {
			rel = &env.Messages.Threads[i]
		}
	}
	if rel == nil {
		t.Fatalf("the release thread is not listed: %+v", env.Messages.Threads)
	}
	if rel.Subject != "Release date" || rel.Count != 3 || rel.Latest != r2 || rel.LatestFrom != "cy" || strings.Join(rel.Participants, ",") != "al,bo,cy" {
		t.Errorf("thread summary: %+v", rel)
	}
	if rel.Unread != 2 || !strings.Contains(rel.Read, `"thread":`) {
		t.Errorf("al has two unread replies in the thread, and the summary names the read: %+v", rel)
	}
	if len(env.Messages.Threads) != 2 {
		t.Errorf("two threads (release, lunch): %+v", env.Messages.Threads)
	}
	for _, m := range env.Messages.Recent {
		if m["seq"] == r2 && (m["subject"] != "Release date" || fmt.Sprint(m["thread"]) != fmt.Sprint(root)) {
			t.Errorf("a reply carries its thread and subject: %v", m)
		}
	}
	// After reading, nothing in the thread is unread.
	env = tr.read("al", substrate.ContextRequest{})
	for _, th := range env.Messages.Threads {
		if th.Unread != 0 {
			t.Errorf("unread after a read: %+v", th)
		}
	}
	// One thread whole, oldest first, nothing else.
	env = tr.read("bo", substrate.ContextRequest{Thread: root})
	var seqs []int64
	for _, m := range env.Messages.Recent {
		seqs = append(seqs, m["seq"].(int64))
	}
	if fmt.Sprint(seqs) != fmt.Sprint([]int64{root, r1, r2}) || env.Messages.Thread == nil {
		t.Errorf("thread read: %v", seqs)
	}
	// A wait on the thread wakes on a message in it, not on others. The
	// messages are sent once the wait has begun (bo shown waiting): a
	// reply sent before is what the wait starts after, and it never
	// wakes. (A 300 ms sleep stood for that; a wait starved longer on a
	// loaded machine missed the reply.)
	waiting := make(chan struct{})
	var once sync.Once
	substrate.SetShownWaiting(tr.svc, func(_, agentID string) {
		if agentID == "bo" {
			once.Do(func() { close(waiting) })
		}
	})
	done := make(chan *substrate.WaitResult, 1)
	go func() {
		res, err := tr.svc.Wait(ctx, tr.ag["bo"], "thr", "", 10*time.Second, substrate.ContextRequest{Thread: root, Depth: "lean", MessagesLimit: 20})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case <-waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the wait on the thread did not begin within 20 s")
	}
	tr.send("cy", `{"body": "more chatter"}`)
	select {
	case res := <-done:
		t.Fatalf("the wait woke on a message outside the thread: %+v", res)
	case <-time.After(500 * time.Millisecond):
	}
	tr.send("al", fmt.Sprintf(`{"body": "Friday it is", "reply_to": %d}`, root))
	select {
	case res := <-done:
		if res == nil || !res.Triggered {
			t.Fatalf("wait: %+v", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not wake on a reply in the thread")
	}
	// Bad input: refused, nothing sent.
	for _, bad := range []string{`{"body": "x", "reply_to": 999999}`, `{"body": "x", "reply_to": -1}`, `{"body": "x", "reply_to": "abc"}`,
		`{"body": "x", "subject": ""}`, `{"body": "x", "subject": "two\nlines"}`, `{"body": "x", "ack": "yes"}`} {
		_, err := tr.svc.Invoke(ctx, tr.ag["al"], "thr", "_send_message", json.RawMessage(bad))
		if !errs.Is(err, errs.InvalidParam) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// Acknowledgements (issue 31 item 3): ack: true asks the recipients;
// _ack records one; receipts say who read and who acknowledged; a wait
// until all have holds once they have; an acknowledgement not given in
// time is in the recipient's _attention.
func TestAcks(t *testing.T) {
	const overdue = 2 * time.Second
	tr := newThreadRoom(t, substrate.Options{AckOverdue: overdue}, "al", "bo", "cy")
	ctx := context.Background()
	seq := tr.send("al", `{"body": "Deploy freeze from 5pm, please confirm", "to": ["bo", "cy"], "ack": true}`)
	receipts := func(who string) *substrate.Receipts {
		t.Helper()
		env := tr.read(who, substrate.ContextRequest{Peek: true})
		for _, m := range env.Messages.Recent {
			if m["seq"] == seq {
				r, _ := m["receipts"].(*substrate.Receipts)
				return r
			}
		}
		t.Fatalf("message %d not shown", seq)
		return nil
	}
	r := receipts("al")
	if r == nil || strings.Join(r.Pending, ",") != "bo,cy" || len(r.ReadBy) != 0 {
		t.Fatalf("receipts before anyone read: %+v", r)
	}
	tr.read("bo", substrate.ContextRequest{}) // bo reads it
	if r := receipts("al"); strings.Join(r.ReadBy, ",") != "bo" || len(r.AckedBy) != 0 {
		t.Errorf("after bo's read: %+v", r)
	}
	// cy is not asked to acknowledge al's own message; al cannot ack it.
	if _, err := tr.svc.Invoke(ctx, tr.ag["al"], "thr", "_ack", json.RawMessage(fmt.Sprintf(`{"seq": %d}`, seq))); !errs.Is(err, errs.Forbidden) {
		t.Errorf("the sender acknowledging: %v", err)
	}
	for _, bad := range []string{`{}`, `{"seq": "x"}`, `{"seq": 1, "extra": 1}`, `{"seq": 999999}`} {
		if _, err := tr.svc.Invoke(ctx, tr.ag["bo"], "thr", "_ack", json.RawMessage(bad)); !errs.Is(err, errs.InvalidParam) {
			t.Errorf("_ack %s: %v", bad, err)
		}
	}
	all := fmt.Sprintf(`size(state._acks["%d"].acked) == size(state._acks["%d"].to)`, seq, seq)
	done := make(chan *substrate.WaitResult, 1)
	go func() {
		res, err := tr.svc.Wait(ctx, tr.ag["al"], "thr", all, 10*time.Second, substrate.ContextRequest{Depth: "lean", MessagesLimit: 20, NoContext: true})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	if _, err := tr.svc.Invoke(ctx, tr.ag["bo"], "thr", "_ack", json.RawMessage(fmt.Sprintf(`{"seq": %d}`, seq))); err != nil {
		t.Fatal(err)
	}
	again, err := tr.svc.Invoke(ctx, tr.ag["bo"], "thr", "_ack", json.RawMessage(fmt.Sprintf(`{"seq": %d}`, seq)))
	if err != nil || !strings.Contains(fmt.Sprint(again.Builtin), "already") {
		t.Errorf("acknowledging twice: %v %v", again, err)
	}
	select {
	case res := <-done:
		t.Fatalf("the wait held with cy pending: %+v", res)
	case <-time.After(400 * time.Millisecond):
	}
	if r := receipts("al"); strings.Join(r.AckedBy, ",") != "bo" || strings.Join(r.Pending, ",") != "cy" {
		t.Errorf("after bo's ack: %+v", r)
	}
	// cy's acknowledgement is overdue once AckOverdue has passed: shown
	// in cy's _attention with the call that gives it.
	if at := tr.read("cy", substrate.ContextRequest{Peek: true}).Context.Attention; at != nil && len(at.OverdueAcks) > 0 {
		t.Errorf("overdue too soon: %+v", at.OverdueAcks)
	}
	time.Sleep(overdue) // Stays: AckOverdue passing on the real clock is what this checks
	at := tr.read("cy", substrate.ContextRequest{Peek: true}).Context.Attention
	if at == nil || len(at.OverdueAcks) != 1 || at.OverdueAcks[0].Seq != seq || !strings.Contains(at.OverdueAcks[0].Ack, "_ack") {
		t.Fatalf("cy's overdue acknowledgement: %+v", at)
	}
	if at := tr.read("bo", substrate.ContextRequest{Peek: true}).Context.Attention; at != nil && len(at.OverdueAcks) > 0 {
		t.Errorf("bo acknowledged, nothing overdue: %+v", at.OverdueAcks)
	}
	if _, err := tr.svc.Invoke(ctx, tr.ag["cy"], "thr", "_ack", json.RawMessage(fmt.Sprintf(`{"seq": %d}`, seq))); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		if !res.Triggered {
			t.Errorf("wait: %+v", res)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait until all acknowledged did not wake")
	}
	// An undirected message asks every other agent.
	open := tr.send("bo", `{"body": "all hands", "ack": true}`)
	env := tr.read("bo", substrate.ContextRequest{Thread: 0})
	for _, m := range env.Messages.Recent {
		if m["seq"] == open {
			if r, _ := m["receipts"].(*substrate.Receipts); r == nil || strings.Join(r.To, ",") != "al,cy" {
				t.Errorf("undirected ack asks the others: %+v", m["receipts"])
			}
		}
	}
}

// The thread list stays within the context's budget: in a budget too
// small for the frame it is left out, and the cut names the read that
// lists it.
func TestThreadsWithinBudget(t *testing.T) {
	tr := newThreadRoom(t, substrate.Options{}, "al", "bo")
	for i := range 8 {
		tr.send("bo", fmt.Sprintf(`{"body": "%s", "subject": "Subject number %d of a long list of subjects"}`, strings.Repeat("word ", 20), i))
	}
	env := tr.read("al", substrate.ContextRequest{MaxBytes: 1000, Peek: true})
	raw, _ := json.Marshal(env)
	if len(raw) > 1000 {
		t.Errorf("the context is %d bytes, over its budget of 1000: %s", len(raw), raw)
	}
	cut := false
	if env.Context.Budget != nil {
		for _, c := range env.Context.Budget.Cuts {
			cut = cut || c.Section == "messages.threads"
		}
	}
	if !cut || len(env.Messages.Threads) > 0 {
		t.Errorf("threads not cut to fit: %d shown, cut %v", len(env.Messages.Threads), cut)
	}
}

// One number per message (issue 43 item 3): _send_message answers with
// the message's own seq, the one reply_to and _ack take, not only the
// invocation's (the room's, past it once a thread record is written). A
// reply to a number that is no message names the nearest message.
func TestSendAnswersMessageSeq(t *testing.T) {
	tr := newThreadRoom(t, substrate.Options{}, "al", "bo")
	ctx := context.Background()
	for range 300 {
		tr.send("bo", `{"body": "backlog"}`)
	}
	res, err := tr.svc.Invoke(ctx, tr.ag["al"], "thr", "_send_message", json.RawMessage(`{"body": "When do we ship?", "subject": "Release date", "to": "bo"}`))
	if err != nil {
		t.Fatal(err)
	}
	sent, ok := res.Builtin.(*substrate.SentMessage)
	if !ok || sent.Seq != *res.Writes[0].SortKey || sent.Thread != sent.Seq {
		t.Fatalf("the send answers %#v (invocation seq %d, message %d): want the message's own seq and thread", res.Builtin, res.Seq, *res.Writes[0].SortKey)
	}
	if res.Seq == sent.Seq {
		t.Fatalf("the invocation's seq is the message's (%d): not the case this checks", res.Seq)
	}
	reply, err := tr.svc.Invoke(ctx, tr.ag["bo"], "thr", "_send_message", json.RawMessage(fmt.Sprintf(`{"body": "Friday", "reply_to": %d}`, sent.Seq)))
	if err != nil {
		t.Fatalf("reply_to the seq the send answered: %v", err)
	}
	if r := reply.Builtin.(*substrate.SentMessage); r.Thread != sent.Seq || r.Seq <= sent.Seq {
		t.Fatalf("the reply: %+v", r)
	}
	// The invocation's seq is no message: the error names the message.
	_, err = tr.svc.Invoke(ctx, tr.ag["bo"], "thr", "_send_message", json.RawMessage(fmt.Sprintf(`{"body": "Friday", "reply_to": %d}`, res.Seq)))
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.InvalidParam || e.Details["did_you_mean"] != sent.Seq || !strings.Contains(e.Hint, fmt.Sprint(sent.Seq)) {
		t.Fatalf("reply_to the invocation's seq %d: %v %+v (want did_you_mean %d)", res.Seq, err, e, sent.Seq)
	}
}

// A directed message is what wakes its reader (issue 43 item 2), whatever
// the backlog: a reader with more than a thousand unread messages was
// never woken by one addressed to her (the unread count looked at the
// oldest thousand), a wake-up listed the oldest unread while the message
// to her was elsewhere, and once she had seen, acknowledged and answered
// it the next wait fired again at once on that same message.
func TestDirectedWakesThroughBacklog(t *testing.T) {
	// 600: counted, but past the 500 oldest a wake-up read; 1,200: past
	// the thousand the count looked at.
	for _, backlog := range []int{600, 1200} {
		t.Run(fmt.Sprint(backlog), func(t *testing.T) { directedThroughBacklog(t, backlog) })
	}
}

func directedThroughBacklog(t *testing.T, backlog int) {
	tr := newThreadRoom(t, substrate.Options{}, "al", "bo", "cy")
	ctx := context.Background()
	tr.read("al", substrate.ContextRequest{})
	for i := range backlog {
		tr.send([]string{"bo", "cy"}[i%2], fmt.Sprintf(`{"body": "chatter %d"}`, i))
	}
	asked := tr.send("bo", `{"body": "al, can you take the release?", "to": "al", "ack": true}`)
	for i := range 30 {
		tr.send("cy", fmt.Sprintf(`{"body": "more chatter %d"}`, i))
	}
	cond := "messages.directed_unread > 0"
	res, err := tr.svc.Wait(ctx, tr.ag["al"], "thr", cond, 2*time.Second, substrate.ContextRequest{Depth: "lean", MessagesLimit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Triggered || res.Context == nil || res.Context.Messages == nil {
		t.Fatalf("HOLE: a message to al behind %d unread did not wake her: %+v", backlog+30, res)
	}
	m := res.Context.Messages
	if len(m.Recent) == 0 || m.Recent[0]["seq"] != asked {
		var seqs []any
		for _, msg := range m.Recent {
			seqs = append(seqs, msg["seq"])
		}
		t.Fatalf("HOLE: the wake-up does not show the message to al (%d) first: %v", asked, seqs)
	}
	if m.DirectedUnread != 1 {
		t.Errorf("directed_unread in the wake-up: %d", m.DirectedUnread)
	}
	raw, _ := json.Marshal(res.Context)
	t.Logf("the wake-up behind %d unread: %d bytes, %d messages", backlog+30, len(raw), len(m.Recent))
	if _, err := tr.svc.Invoke(ctx, tr.ag["al"], "thr", "_ack", json.RawMessage(fmt.Sprintf(`{"seq": %d}`, asked))); err != nil {
		t.Fatal(err)
	}
	tr.send("al", fmt.Sprintf(`{"body": "yes", "reply_to": %d}`, asked))
	res, err = tr.svc.Wait(ctx, tr.ag["al"], "thr", cond, 300*time.Millisecond, substrate.ContextRequest{Depth: "lean", MessagesLimit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Triggered {
		t.Fatalf("HOLE: the message al saw, acknowledged and answered woke her again (%d ms): %+v", res.ElapsedMS, res.Context.Messages)
	}
	// The next one to her wakes her, first again.
	again := tr.send("cy", `{"body": "al, one more", "to": ["al", "bo"]}`)
	res, err = tr.svc.Wait(ctx, tr.ag["al"], "thr", cond, 2*time.Second, substrate.ContextRequest{Depth: "lean", MessagesLimit: 20})
	if err != nil || !res.Triggered || res.Context.Messages.Recent[0]["seq"] != again {
		t.Fatalf("the next message to al: %v %+v", err, res)
	}
}

// An action_invocation message says the call once (issue 43 item 7): its
// body is the call and via names the action, so a read leaves out the
// action and params fields that repeated them; the stored message keeps
// them for expressions.
func TestInvocationMessageSaysItOnce(t *testing.T) {
	tr := newThreadRoom(t, substrate.Options{}, "al")
	ctx := context.Background()
	if _, err := tr.svc.RegisterAction(ctx, tr.ag["room"], "thr", substrate.ActionDef{ID: "claim",
		Params: map[string]substrate.ParamSpec{"task": {Type: "string", Required: true}},
		Writes: []substrate.WriteTemplate{{Key: "${params.task}", Value: json.RawMessage(`"al"`)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.svc.Invoke(ctx, tr.ag["al"], "thr", "claim", json.RawMessage(`{"task": "task-007"}`)); err != nil {
		t.Fatal(err)
	}
	env := tr.read("al", substrate.ContextRequest{})
	m := env.Messages.Recent[len(env.Messages.Recent)-1]
	if m["kind"] != "action_invocation" || m["body"] != `claim(task="task-007")` || m["via"] != "action:claim" {
		t.Fatalf("the invocation message: %v", m)
	}
	if _, ok := m["params"]; ok {
		t.Errorf("the invocation message repeats its params: %v", m)
	}
	if _, ok := m["action"]; ok {
		t.Errorf("the invocation message repeats its action: %v", m)
	}
	read, err := tr.svc.ReadState(ctx, tr.ag["al"], "thr", substrate.ReadQuery{Scope: substrate.ScopeMessages})
	if err != nil || len(read.Entries) == 0 || !strings.Contains(string(read.Entries[len(read.Entries)-1].Value), `"params": {"task": "task-007"}`) {
		t.Fatalf("the stored message lost its params: %v %+v", err, read)
	}
}
