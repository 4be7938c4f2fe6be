package envelope

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/substrate/errs"
)

func TestSeqParam(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		want    int64
		present bool
		bad     bool
	}{
		{"absent", nil, 0, false, false},
		{"number", json.Number("42"), 42, true, false},
		{"float", float64(7), 7, true, false},
		{"digits", "9", 9, true, false},
		{"fraction", 1.5, 0, true, true},
		{"zero", json.Number("0"), 0, true, true},
		{"negative", "-3", 0, true, true},
		{"word", "ten", 0, true, true},
		{"bool", true, 0, true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			params := map[string]any{}
			if c.v != nil {
				params["seq"] = c.v
			}
			n, ok, err := SeqParam(params, "seq")
			if n != c.want || ok != c.present || (err != nil) != c.bad {
				t.Fatalf("SeqParam(%v) = %d, %v, %v; want %d, %v, bad %v", c.v, n, ok, err, c.want, c.present, c.bad)
			}
			if c.bad && (!errs.Is(err, errs.InvalidParam) || errs.From(err).Details["param"] != "seq") {
				t.Fatalf("refusal %v names no param seq", err)
			}
		})
	}
}

func TestSubjectParam(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want string
		bad  bool
	}{
		{"absent", nil, "", false},
		{"trimmed", "  Release date ", "Release date", false},
		{"longest", strings.Repeat("é", MaxSubject), strings.Repeat("é", MaxSubject), false},
		{"too long", strings.Repeat("é", MaxSubject+1), "", true},
		{"blank", "   ", "", true},
		{"two lines", "a\nb", "", true},
		{"not text", 3.0, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			params := map[string]any{}
			if c.v != nil {
				params["subject"] = c.v
			}
			got, err := SubjectParam(params)
			if got != c.want || (err != nil) != c.bad {
				t.Fatalf("SubjectParam(%q) = %q, %v; want %q, bad %v", c.v, got, err, c.want, c.bad)
			}
		})
	}
}

func TestAckParams(t *testing.T) {
	for _, c := range []struct {
		name   string
		params map[string]any
		want   int64
		param  string // the param the refusal names; "" for none
	}{
		{"seq", map[string]any{"seq": json.Number("5")}, 5, ""},
		{"missing", map[string]any{}, 0, "seq"},
		{"other", map[string]any{"seq": json.Number("5"), "to": "a"}, 0, "to"},
		{"bad seq", map[string]any{"seq": "x"}, 0, "seq"},
	} {
		t.Run(c.name, func(t *testing.T) {
			seq, err := AckParams(c.params)
			got := ""
			if err != nil {
				got, _ = errs.From(err).Details["param"].(string)
			}
			if seq != c.want || got != c.param || (err != nil) != (c.param != "") {
				t.Fatalf("AckParams(%v) = %d, %v; want %d refusing %q", c.params, seq, err, c.want, c.param)
			}
		})
	}
}

func TestAckBy(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := AckRecord{From: "a", To: []string{"b", "c", "d"}, Acked: map[string]AckStamp{"c": {At: at}}}
	for _, c := range []struct {
		actor     string
		done      bool
		pending   int
		forbidden bool
	}{
		{"b", false, 1, false}, // d is left once b has
		{"c", true, 0, false},  // again: nothing changes
		{"a", false, 0, true},  // the sender is not asked
		{"e", false, 0, true},
	} {
		t.Run(c.actor, func(t *testing.T) {
			done, pending, err := rec.AckBy(9, c.actor)
			if (done != nil) != c.done || pending != c.pending || errs.Is(err, errs.Forbidden) != c.forbidden {
				t.Fatalf("AckBy(%s) = %v, %d, %v; want done %v, pending %d, forbidden %v", c.actor, done, pending, err, c.done, c.pending, c.forbidden)
			}
			if c.done && !done.At.Equal(at) {
				t.Fatalf("the earlier acknowledgement is at %v, want %v", done.At, at)
			}
		})
	}
}

func TestNotAReply(t *testing.T) {
	for _, c := range []struct {
		near int64
		want any
	}{{0, nil}, {12, int64(12)}} {
		e := errs.From(NotAReply(14, c.near))
		if e.Code != errs.InvalidParam || e.Details["did_you_mean"] != c.want || strings.Contains(e.Hint, "nearest") != (c.near > 0) {
			t.Fatalf("NotAReply(14, %d) = %+v", c.near, e)
		}
	}
}

func TestThreadCondition(t *testing.T) {
	want := `"_threads" in state && "3" in state._threads && state._threads["3"].latest > 10`
	if got := ThreadCondition(3, 10); got != want {
		t.Fatalf("ThreadCondition(3, 10) = %s", got)
	}
}
