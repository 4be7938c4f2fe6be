package envelope

// The rules of threads and acknowledgements as a sender and an
// acknowledger meet them: what _send_message's reply_to and subject and
// _ack's seq may be, who may acknowledge a message and what is then
// pending, how long a record outlives its last change, and the wait
// condition that a thread has news. The core reads and writes the
// records (_threads, _acks) in the mutation; these decide.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// ThreadTTL is how long a thread or an ack record outlives its last
// change, so a room's long history cannot fill the scopes' key limit
// (the messages stay).
const ThreadTTL = 30 * 24 * time.Hour

// MaxSubject bounds a subject (runes).
const MaxSubject = 200

// SeqParam reads the integer parameter name of params, a message seq (a
// JSON number, or its digits): false when absent or null, an
// invalid_param refusal when it is not a positive integer.
func SeqParam(params map[string]any, name string) (int64, bool, error) {
	v, ok := params[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	bad := errs.New(errs.InvalidParam, "%s must be a message seq (a positive integer)", name).With("param", name).
		WithHint(`e.g. "%s": 42, the seq of a message in the context's messages.recent`, name)
	var n int64
	switch x := v.(type) {
	case json.Number:
		i, err := x.Int64()
		if err != nil {
			return 0, true, bad
		}
		n = i
	case float64:
		if x != float64(int64(x)) {
			return 0, true, bad
		}
		n = int64(x)
	case string:
		i, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, true, bad
		}
		n = i
	default:
		return 0, true, bad
	}
	if n <= 0 {
		return 0, true, bad
	}
	return n, true, nil
}

// SubjectParam is the subject params give a message, trimmed ("" for
// none): one line of 1 to MaxSubject runes.
func SubjectParam(params map[string]any) (string, error) {
	v, ok := params["subject"]
	if !ok || v == nil {
		return "", nil
	}
	str, ok := v.(string)
	if !ok || strings.TrimSpace(str) == "" || utf8.RuneCountInString(str) > MaxSubject || strings.ContainsAny(str, "\x00\r\n") {
		return "", errs.New(errs.InvalidParam, "subject must be one line of 1–%d characters", MaxSubject).With("param", "subject").
			WithHint(`e.g. "subject": "Release date"`)
	}
	return strings.TrimSpace(str), nil
}

// NotAReply is the refusal of a reply_to that names no message its
// sender may reply to (absent, not a message, or gated: alike); near is
// the nearest message it may (0: none), the usual slip being a room seq
// (an invocation's, a read's) one or two past the message's own.
func NotAReply(replyTo, near int64) error {
	e := errs.New(errs.InvalidParam, "reply_to %d is not a message you can reply to", replyTo).With("param", "reply_to")
	hint := "reply_to is the seq of a message in the room (each message in the context's messages.recent has one, and sending one answers with it); nothing was sent"
	if near > 0 {
		e.With("did_you_mean", near)
		hint = fmt.Sprintf("the nearest message is %d; %s", near, hint)
	}
	return e.WithHint("%s", hint)
}

// AckParams is the message _ack's params name: {"seq": N} and nothing
// else.
func AckParams(params map[string]any) (int64, error) {
	for k := range params {
		if k != "seq" {
			return 0, errs.New(errs.InvalidParam, "_ack has no parameter %q", k).With("param", k).WithHint(`_ack takes {"seq": N}, the seq of the message that asked you`)
		}
	}
	seq, ok, err := SeqParam(params, "seq")
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errs.New(errs.InvalidParam, "_ack needs seq, the message to acknowledge").With("param", "seq").WithHint(`invoke _ack with {"seq": N}`)
	}
	return seq, nil
}

// NotAsked is the refusal of an _ack of message seq, which has no
// record: it asked nobody.
func NotAsked(seq int64) error {
	return errs.New(errs.InvalidParam, "message %d asks nobody for acknowledgement", seq).With("param", "seq").
		WithHint("acknowledge messages sent with ack: true (they carry \"ack\": true); nothing was written")
}

// AckBy is actor's acknowledgement of message seq, whose record rec is:
// a forbidden refusal when the message does not ask actor, done (with
// its stamp) when actor acknowledged it already, else how many of those
// it asks are still pending once actor has.
func (rec AckRecord) AckBy(seq int64, actor string) (done *AckStamp, pending int, err error) {
	if !slices.Contains(rec.To, actor) {
		return nil, 0, errs.New(errs.Forbidden, "message %d asks %s for acknowledgement, not %s", seq, strings.Join(rec.To, ", "), actor).
			With("param", "seq").WithHint("only the agents a message asks acknowledge it")
	}
	if st, ok := rec.Acked[actor]; ok {
		return &st, 0, nil
	}
	for _, a := range rec.To {
		if _, ok := rec.Acked[a]; !ok && a != actor {
			pending++
		}
	}
	return nil, pending, nil
}

// ThreadCondition is the condition of a wait on a thread: a message in
// it after seq.
func ThreadCondition(thread, after int64) string {
	return fmt.Sprintf(`"_threads" in state && "%d" in state._threads && state._threads["%d"].latest > %d`, thread, thread, after)
}
