package envelope

// Threads and acknowledgements as their system entries hold them (the
// core's _threads and _acks, written by its builtins) and as a read shows
// them: the thread list, a message's receipts, the acknowledgements
// overdue. The core hands over the live entries' stored values; which
// entries are live, and who the reader is, are its.

import (
	"encoding/json"
	"iter"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ThreadRecord is a thread's _threads entry.
type ThreadRecord struct {
	Subject      string   `json:"subject"`
	Participants []string `json:"participants"`
	Count        int64    `json:"count"`
	Latest       int64    `json:"latest"`
	LatestFrom   string   `json:"latest_from"`
	LatestBody   string   `json:"latest_body"`
}

// ThreadSummary is a thread as the context shows it: its record, under
// its id, with what this reader has not read of it.
type ThreadSummary struct {
	Thread int64 `json:"thread"`
	ThreadRecord
	// Unread counts the thread's messages after the reader's last read
	// (among those this read saw).
	Unread int `json:"unread"`
	// Read is the call that reads the thread whole.
	Read string `json:"read"`
}

// AckRecord is an _acks entry.
type AckRecord struct {
	From  string              `json:"from"`
	To    []string            `json:"to"`
	At    time.Time           `json:"at"`
	Acked map[string]AckStamp `json:"acked"`
}

// AckStamp is one acknowledgement.
type AckStamp struct {
	At time.Time `json:"at"`
}

// ThreadSummaryOf is the thread an _threads entry (key, its stored value)
// records, its subject clipped for the list; false for a value that is
// not a record.
func ThreadSummaryOf(key string, raw json.RawMessage) (ThreadSummary, bool) {
	var rec ThreadRecord
	if json.Unmarshal(raw, &rec) != nil {
		return ThreadSummary{}, false
	}
	t, _ := strconv.ParseInt(key, 10, 64)
	rec.Subject = ClipRunes(rec.Subject, 80)
	return ThreadSummary{Thread: t, ThreadRecord: rec}, true
}

// ReceiptsOf is who has read and who has acknowledged message seq, from
// its _acks entry and each agent's last read message (nil: not a
// record).
func ReceiptsOf(raw json.RawMessage, seq int64, lastSeen map[string]int64) *Receipts {
	var rec AckRecord
	if json.Unmarshal(raw, &rec) != nil {
		return nil
	}
	out := &Receipts{To: rec.To, ReadBy: []string{}, AckedBy: []string{}, Pending: []string{}}
	for _, a := range rec.To {
		_, acked := rec.Acked[a]
		if lastSeen[a] >= seq || acked {
			out.ReadBy = append(out.ReadBy, a)
		}
		if acked {
			out.AckedBy = append(out.AckedBy, a)
		} else {
			out.Pending = append(out.Pending, a)
		}
	}
	return out
}

// maxOverdueShown bounds the overdue acknowledgements a read lists.
const maxOverdueShown = 10

// OverdueAcks are, of acks (the live _acks entries, key → stored value),
// those asked of self and not given within after of now, oldest first (at
// most 10); ack words the acknowledgement of one.
func OverdueAcks(acks iter.Seq2[string, json.RawMessage], self string, now time.Time, after time.Duration, ack func(seq int64) string) []OverdueAck {
	if self == "" {
		return nil
	}
	var out []OverdueAck
	for key, raw := range acks {
		var rec AckRecord
		if json.Unmarshal(raw, &rec) != nil || !slices.Contains(rec.To, self) {
			continue
		}
		if _, done := rec.Acked[self]; done || now.Sub(rec.At) < after {
			continue
		}
		seq, _ := strconv.ParseInt(key, 10, 64)
		out = append(out, OverdueAck{Seq: seq, From: rec.From, AgoS: int64(now.Sub(rec.At).Seconds()), Ack: ack(seq)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	if len(out) > maxOverdueShown {
		out = out[:maxOverdueShown]
	}
	return out
}

// BodyText is a message body as text.
func BodyText(b any) string {
	if s, ok := b.(string); ok {
		return s
	}
	raw, _ := json.Marshal(b)
	return string(raw)
}

// ClipRunes is s on one line, cut to n runes (an ellipsis marks a cut).
func ClipRunes(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// Joined is rec after actor's message seq (its body) joined the thread:
// rec is the thread's record as stored (zero for a thread the message
// starts), subject the message's.
func (rec ThreadRecord) Joined(subject, actor string, seq int64, body any) ThreadRecord {
	if rec.Subject == "" {
		rec.Subject = subject
	}
	if !slices.Contains(rec.Participants, actor) {
		rec.Participants = append(rec.Participants, actor)
	}
	rec.Count++
	rec.Latest, rec.LatestFrom, rec.LatestBody = seq, actor, ClipRunes(BodyText(body), 120)
	return rec
}

// ReplyThread is the thread a reply to message replyTo (raw, its stored
// value) joins, and the subject the reply carries: the message's thread
// and subject, or the start of its body.
func ReplyThread(raw json.RawMessage, replyTo int64) (thread int64, subject string) {
	var v struct {
		Thread  int64  `json:"thread"`
		Subject string `json:"subject"`
		Body    any    `json:"body"`
	}
	_ = json.Unmarshal(raw, &v)
	// A thread starts at or before the message answered; a "thread" an
	// action wrote into a message's value that says otherwise is not one.
	thread = v.Thread
	if thread <= 0 || thread > replyTo {
		thread = replyTo
	}
	subject = v.Subject
	if subject == "" {
		subject = ClipRunes(BodyText(v.Body), 80)
	}
	return thread, subject
}
