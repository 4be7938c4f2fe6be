package write_test

import (
	"encoding/json"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/write"
)

func TestMeta(t *testing.T) {
	for _, raw := range []string{"", "null"} {
		got, err := write.Meta("meta", json.RawMessage(raw), 32, lim)
		if err != nil || string(got) != "{}" {
			t.Fatalf("Meta(%q) = %s, %v; want {}", raw, got, err)
		}
	}
	if got, err := write.Meta("meta", json.RawMessage(`{"label":"x"}`), 32, lim); err != nil || string(got) != `{"label":"x"}` {
		t.Fatalf("a small object: %s, %v", got, err)
	}
	wantErr(t, ignore(write.Meta("meta", json.RawMessage(`["x"]`), 32, lim)), errs.InvalidField, "meta must be a JSON object")
	wantErr(t, ignore(write.Meta("meta", json.RawMessage(`{"label":"a label longer than the limit"}`), 32, lim)), errs.ValueTooLarge, "over the limit of 32")
	e := wantErr(t, ignore(write.Meta("agent meta", json.RawMessage(`{"a":{"b":{"c":{"d":1}}}}`), 32, lim)), errs.InvalidValue, "agent meta nests")
	if e.Details["field"] != "agent meta" {
		t.Fatalf("details %v: want the field named", e.Details)
	}
}

func TestParams(t *testing.T) {
	for _, raw := range []string{"", "null"} {
		got, err := write.Params(json.RawMessage(raw), lim)
		if err != nil || got == nil || len(got) != 0 {
			t.Fatalf("Params(%q) = %v, %v; want an empty object", raw, got, err)
		}
	}
	got, err := write.Params(json.RawMessage(`{"n":12345678901234567890,"s":"x"}`), lim)
	if err != nil || got["n"] != json.Number("12345678901234567890") || got["s"] != "x" {
		t.Fatalf("params %v, %v: numbers stay json.Number", got, err)
	}
	wantErr(t, ignore(write.Params(json.RawMessage(`[1]`), lim)), errs.InvalidParam, "params must be a JSON object")
	e := wantErr(t, ignore(write.Params(json.RawMessage(`{"a":{"b":{"c":{"d":1}}}}`), lim)), errs.InvalidValue, "params nests")
	if e.Details["field"] != "params" {
		t.Fatalf("details %v: want field params", e.Details)
	}
	err = ignore(write.Params(json.RawMessage(`{"s":"\u0000"}`), lim))
	if e, ok := err.(*errs.Error); !ok || e.Details["field"] != "params" {
		t.Fatalf("%v: want text jsonb cannot store refused, with field params", err)
	}
}

func ignore[T any](_ T, err error) error { return err }

// An invocation's summary names each write by reference, in order, with
// its value's size, and an empty list when nothing was written.
func TestRefs(t *testing.T) {
	sk := int64(7)
	got := write.Refs([]write.Entry{{Scope: "_shared", Key: "k", Value: json.RawMessage(`{"a":1}`), Version: 2, Revision: 9},
		{Scope: "_messages", Key: "7", SortKey: &sk, Version: 1, Revision: 9}})
	if len(got) != 2 || got[0] != (write.Ref{Scope: "_shared", Key: "k", Version: 2, Revision: 9, Bytes: 7}) ||
		got[1].SortKey != &sk || got[1].Bytes != 0 {
		t.Fatalf("refs %+v", got)
	}
	if got := write.Refs(nil); got == nil || len(got) != 0 {
		t.Fatalf("no writes: %#v, want an empty list", got)
	}
}
