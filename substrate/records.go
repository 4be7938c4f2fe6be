package substrate

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/salienceport"
)

// What the write path keeps for readers beside a room's own entries:
// threads and acknowledgements, and the vocabulary's usage.
//
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
// long history cannot fill the scopes' key limit; the messages stay. What
// the builtins' params may be, who may acknowledge and a thread's wait
// condition are substrate/envelope's rules (threadrules.go); how a read
// shows threads and receipts is context.go's.
//
// The vocabulary's usage (vocabulary_usage) is what adaptive salience
// reads of past invocations: a mutation records each use of an action or
// view (invoked, read by an invoked action, registered), decayed by the
// room's salience; a read loads it once per snapshot.
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

// roomSeq reads a room's seq.
func (s *Service) roomSeq(ctx context.Context, roomID string) (int64, error) {
	var seq int64
	err := s.db.QueryRow(ctx, `SELECT seq FROM rooms WHERE id = $1`, roomID).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, errs.New(errs.RoomNotFound, "room %q does not exist", roomID)
	}
	return seq, err
}

// defaultDecay is the usage decay when no feature is salience.
const defaultDecay = 0.95

// decayOf is the room's usage decay, for the write path.
func (s *Service) decayOf(snap *snapshot) float64 {
	if s.wired.salience == nil {
		return defaultDecay
	}
	return s.wired.salience.Decay(snap.config())
}

// config is the value of _shared._config, nil when absent.
func (snap *snapshot) config() json.RawMessage {
	if r := snap.scopes[ScopeShared]["_config"]; r != nil {
		return r.Value
	}
	return nil
}

// loadUsage reads the vocabulary's usage into the snapshot, once, with q:
// the read transaction that read the snapshot's seq, so the usage is the
// one at that seq (a mutation updates it in its own commit). Read after
// that transaction, it held uses committed since.
func (snap *snapshot) loadUsage(ctx context.Context, q querier) error {
	snap.usageMu.Lock()
	defer snap.usageMu.Unlock()
	if snap.usage != nil {
		return nil
	}
	u, err := loadUsage(ctx, q, snap.room)
	if err != nil {
		return err
	}
	snap.usage = u
	return nil
}

// loadUsage reads the room's vocabulary usage.
func loadUsage(ctx context.Context, q querier, roomID string) (map[string]*Usage, error) {
	rows, err := q.Query(ctx, sqlUsage, roomID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*Usage{}
	for rows.Next() {
		var kind, id string
		var u Usage
		var last *int64
		if err := rows.Scan(&kind, &id, &u.Uses, &last, &u.Score, &u.ReadsAtUse); err != nil {
			return nil, err
		}
		if last != nil {
			u.LastUsedSeq = *last
		}
		out[UsageKey(kind, id)] = &u
	}
	return out, rows.Err()
}

// vocabTouch records, in a mutation, that an action or view was used
// (invoked, or read by an invoked action's expressions) or registered.
type vocabTouch struct {
	kind, id string
	use      bool
}

// touchVocabulary queues the mutation's vocabulary uses at seq: uses and
// last use move for what was used; every touched item's score is decayed
// to now and reinforced by one. reads are the room's context reads as a
// read's salience counts them (mutation.roomReads): the reads at the use.
func (m *mutation) touchVocabulary(seq int64, decay float64, reads int64) {
	if len(m.vocab) == 0 {
		return
	}
	kinds := make([]string, len(m.vocab))
	ids := make([]string, len(m.vocab))
	uses := make([]bool, len(m.vocab))
	for i, t := range m.vocab {
		kinds[i], ids[i], uses[i] = t.kind, t.id, t.use
	}
	m.batch.Queue(sqlTouchVocabulary, m.room, kinds, ids, uses, seq, m.now, decay, reads)
}

// ViewOwner is the agent whose view def is, to fix when it breaks: the
// agent of its scope, or the agent that registered a communal one; ""
// for a view registered with room authority (the room's own).
func ViewOwner(def *ViewDef) string { return defs.RegistrarOf(def.Scope, def.RegisteredBy) }

// ViewRefs are the ids of the views src names (views.<id>, views["id"]),
// in order, repeats included. Shared between callers: read-only.
func ViewRefs(src string) []string { return defs.FactsOf(src).Views }

// StatePaths are the state entries src names by path (state.<scope>.<key>,
// .?key or ["key"]): scope and key, in order. Shared between callers:
// read-only.
func StatePaths(src string) [][2]string { return defs.FactsOf(src).Paths }

// ViewSelf is the scope a view reads as state.self ("" for a communal
// one).
func ViewSelf(def *ViewDef) string { return viewSelf(def) }

// viewsReadBy are the ids of the views the action's expressions read
// whose use an invocation records (salienceport.ViewsUsedBy): the system
// views are nobody's vocabulary.
func viewsReadBy(def *ActionDef) []string {
	return salienceport.ViewsUsedBy(def, viewContested, ViewHealth)
}
