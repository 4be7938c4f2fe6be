package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// Threads and acknowledgements (issue 31 items 2 and 3), on the
// substrate's own terms: a message stays one append-only entry of
// _messages, with fields; what a thread or an acknowledgement adds up to
// is kept in two system scopes every reader (and every CEL expression)
// sees, written by the builtins alone, in the mutation that sends the
// message:
//
//   - _threads/<thread>: {subject, participants, count, latest,
//     latest_from, latest_body}. A thread is named by its first message's
//     seq; a reply (reply_to: seq) joins the thread of the message it
//     answers and carries its subject. A wait on a thread is a condition
//     on its latest seq.
//   - _acks/<seq>: {from, to, at, acked: {agent: {at}}} for a message
//     sent with ack: true; _ack {"seq": N} adds the caller to acked. Who
//     has read it comes from the read positions (Agent.LastSeenSeq), as
//     unread does; "all have acknowledged" is size(acked) == size(to).
//
// Both expire a while after their last change (threadTTL), so a room's
// long history cannot fill the scopes' key limit; the messages stay.
const (
	ScopeThreads = "_threads"
	ScopeAcks    = "_acks"
	// threadTTL is how long a thread or an ack record outlives its last
	// change (envelope.ThreadTTL).
	threadTTL = envelope.ThreadTTL
	// AckOverdue is when, by default, a requested acknowledgement becomes
	// overdue in the recipient's _attention (Options.AckOverdue).
	AckOverdue = 10 * time.Minute
)

// The records of _threads and _acks are the envelope's, which shows
// them; the names stay the core's API.
type (
	ThreadRecord = envelope.ThreadRecord
	AckRecord    = envelope.AckRecord
	AckStamp     = envelope.AckStamp
)

// threadOf reads the message a reply answers, as its sender may read it:
// its thread, its subject (or the start of its body), and its sender. A
// message that does not exist, is not a message, or is gated is "no
// message you can reply to", alike.
func (s *Service) threadOf(m *mutation, replyTo int64) (thread int64, subject string, err error) {
	var raw json.RawMessage
	var enabled *string
	err = m.tx.QueryRow(m.ctx, `SELECT value, enabled_expr FROM state WHERE room_id = $1 AND scope = '_messages' AND sort_key = $2`+liveSQL,
		m.room, replyTo).Scan(&raw, &enabled)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && enabled != nil) {
		near, err := nearestMessage(m, replyTo)
		if err != nil {
			return 0, "", err
		}
		return 0, "", envelope.NotAReply(replyTo, near)
	}
	if err != nil {
		return 0, "", err
	}
	thread, subject = envelope.ReplyThread(raw, replyTo)
	return thread, subject, nil
}

// nearestMessage is the seq of the ungated message nearest seq, the
// earlier of two as near; 0 when the room has none.
func nearestMessage(m *mutation, seq int64) (int64, error) {
	side := func(cmp, order string) string {
		return `(SELECT sort_key FROM state WHERE room_id = $1 AND scope = '_messages' AND sort_key ` + cmp + ` $2 AND enabled_expr IS NULL` + liveSQL + ` ORDER BY sort_key ` + order + ` LIMIT 1)`
	}
	var near int64
	err := m.tx.QueryRow(m.ctx, `SELECT sort_key FROM (`+side("<", "DESC")+` UNION ALL `+side(">", "ASC")+`) n
		ORDER BY abs(sort_key - $2), sort_key LIMIT 1`, m.room, seq).Scan(&near)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return near, err
}

// threadFields adds reply_to, thread and subject to a message being
// sent, from params; thread is 0 for a message in no thread.
func (s *Service) threadFields(m *mutation, params map[string]any, msg map[string]any) (thread int64, err error) {
	subject, err := envelope.SubjectParam(params)
	if err != nil {
		return 0, err
	}
	replyTo, ok, err := envelope.SeqParam(params, "reply_to")
	if err != nil {
		return 0, err
	}
	if ok {
		t, inherited, err := s.threadOf(m, replyTo)
		if err != nil {
			return 0, err
		}
		thread = t
		if subject == "" {
			subject = inherited
		}
		msg["reply_to"], msg["thread"] = replyTo, thread
	}
	if subject != "" {
		msg["subject"] = subject
	}
	return thread, nil
}

// recordThread updates the thread's _threads entry for a message just
// appended at seq (thread 0: a new thread starts there when the message
// has a subject).
func (s *Service) recordThread(m *mutation, thread, seq int64, msg map[string]any) error {
	subject, _ := msg["subject"].(string)
	if thread == 0 {
		if subject == "" {
			return nil
		}
		thread = seq
	}
	key := strconv.FormatInt(thread, 10)
	rec := ThreadRecord{Subject: subject}
	var raw json.RawMessage
	err := m.tx.QueryRow(m.ctx, `SELECT value FROM state WHERE room_id = $1 AND scope = '_threads' AND key = $2 AND sort_key IS NULL`+liveSQL, m.room, key).Scan(&raw)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if err == nil {
		_ = json.Unmarshal(raw, &rec)
	}
	val, _ := json.Marshal(rec.Joined(subject, m.actor, seq, msg["body"]))
	_, _, err = s.applyOps(m, []op{{Scope: ScopeThreads, Key: key, Value: val, Timer: &Timer{MS: threadTTL.Milliseconds(), Effect: "delete"}}}, "builtin:_send_message")
	return err
}

// ackRecipients are who a message asking for acknowledgement asks: its
// recipients when directed, else every other agent of the room.
func (s *Service) ackRecipients(m *mutation, to []string) ([]string, error) {
	if len(to) > 0 {
		return slices.DeleteFunc(slices.Clone(to), func(a string) bool { return a == m.actor }), nil
	}
	agents, err := m.presence()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, a := range agents {
		if a.ID != m.actor {
			out = append(out, a.ID)
		}
	}
	return out, nil
}

// recordAck writes the _acks entry of a message sent with ack: true.
func (s *Service) recordAck(m *mutation, seq int64, to []string) error {
	val, _ := json.Marshal(AckRecord{From: m.actor, To: to, At: m.now.UTC(), Acked: map[string]AckStamp{}})
	_, _, err := s.applyOps(m, []op{{Scope: ScopeAcks, Key: strconv.FormatInt(seq, 10), Value: val,
		Timer: &Timer{MS: threadTTL.Milliseconds(), Effect: "delete"}}}, "builtin:_send_message")
	return err
}

// ack is the builtin _ack {"seq": N}: the caller acknowledges message N,
// which asked it to. Acknowledging again changes nothing.
func (s *Service) ack(m *mutation, params map[string]any) (map[string]any, []map[string]any, error) {
	seq, err := envelope.AckParams(params)
	if err != nil {
		return nil, nil, err
	}
	key := strconv.FormatInt(seq, 10)
	var raw json.RawMessage
	err = m.tx.QueryRow(m.ctx, `SELECT value FROM state WHERE room_id = $1 AND scope = '_acks' AND key = $2 AND sort_key IS NULL`+liveSQL, m.room, key).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, envelope.NotAsked(seq)
	}
	if err != nil {
		return nil, nil, err
	}
	var rec AckRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, nil, err
	}
	done, pending, err := rec.AckBy(seq, m.actor)
	if err != nil {
		return nil, nil, err
	}
	if done != nil {
		return map[string]any{"acked": seq, "already": true, "at": done.At}, nil, nil
	}
	patch, _ := json.Marshal(map[string]any{"acked": map[string]any{m.actor: AckStamp{At: m.now.UTC()}}})
	_, audit, err := s.applyOps(m, []op{{Scope: ScopeAcks, Key: key, Merge: patch, Deep: true,
		Timer: &Timer{MS: threadTTL.Milliseconds(), Effect: "delete"}}}, "builtin:_ack")
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"acked": seq, "pending": pending}, audit, nil
}

// receiptsOf reads a message's receipts from the read's snapshot and
// presence (nil: the message asked for none).
func (rc *roomCtx) receiptsOf(seq int64) *Receipts {
	r, ok := rc.snap.scopes[ScopeAcks][strconv.FormatInt(seq, 10)]
	if !ok || !r.timer.live(rc.now) {
		return nil
	}
	seen := make(map[string]int64, len(rc.agents))
	for _, a := range rc.agents {
		seen[a.ID] = a.LastSeenSeq
	}
	return envelope.ReceiptsOf(r.Value, seq, seen)
}

// overdueAcks are the acknowledgements asked of the reader that are
// overdue (envelope.OverdueAcks), from the read's live _acks entries.
func (rc *roomCtx) overdueAcks(roomID string, after time.Duration) []OverdueAck {
	return envelope.OverdueAcks(rc.liveEntries(ScopeAcks), rc.self, rc.now, after, func(seq int64) string {
		return rc.p.Say(errs.Step{Op: errs.OpInvoke, Room: roomID, Args: map[string]any{"action": "_ack", "params": map[string]any{"seq": seq}}})
	})
}

// threadsSection lists the room's most recently active threads, unread
// ones first, from the read's snapshot (envelope.Threads).
func (rc *roomCtx) threadsSection(roomID string, recent []map[string]any, seenBefore int64) []ThreadSummary {
	var all []ThreadSummary
	for key, raw := range rc.liveEntries(ScopeThreads) {
		if t, ok := envelope.ThreadSummaryOf(key, raw); ok {
			all = append(all, t)
		}
	}
	return envelope.Threads(all, recent, rc.self, seenBefore, func(thread int64) string {
		return rc.p.Say(errs.Step{Op: errs.OpReadContext, Room: roomID, Args: map[string]any{"only": "messages", "thread": thread}})
	})
}

// liveEntries are the stored values of scope's entries live at the
// read's time, by key.
func (rc *roomCtx) liveEntries(scope string) iter.Seq2[string, json.RawMessage] {
	return func(yield func(string, json.RawMessage) bool) {
		for key, r := range rc.snap.scopes[scope] {
			if r.timer.live(rc.now) && !yield(key, r.Value) {
				return
			}
		}
	}
}

// roomSeq reads a room's seq.
func (s *Service) roomSeq(ctx context.Context, roomID string) (int64, error) {
	var seq int64
	err := s.db.QueryRow(ctx, `SELECT seq FROM rooms WHERE id = $1`, roomID).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
	}
	return seq, err
}

// seenBefore is the newest message the reader had been shown before this
// read (its unread messages come after it).
func (rc *roomCtx) seenBefore() int64 {
	for _, a := range rc.agents {
		if a.ID == rc.self {
			return a.LastSeenSeq
		}
	}
	return 0
}

// MessageThread is the thread a message of the context's messages.recent
// belongs to (0: none): its thread, or its own seq when it starts one.
func MessageThread(m map[string]any) int64 { return envelope.MessageThread(m) }
