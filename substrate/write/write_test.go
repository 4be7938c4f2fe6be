package write_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/authority"
	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/expr"
	"github.com/syncsubstrate/sync/substrate/write"
)

var (
	lim   = write.Limits{MaxValueBytes: 64, MaxValueDepth: 3, MaxScopeBytes: 16, MaxKeyBytes: 16}
	cel   = expr.MustNew(expr.Options{})
	agent = &authority.Principal{Kind: authority.KindAgent, RoomID: "r", AgentID: "ann"}
	room  = &authority.Principal{Kind: authority.KindRoom, RoomID: "r"}
)

func num(s string) *json.Number { n := json.Number(s); return &n }
func ver(v int64) *int64        { return &v }

// wantErr checks err is an *errs.Error of code whose message holds text.
func wantErr(t *testing.T, err error, code errs.Code, text string) *errs.Error {
	t.Helper()
	e, ok := err.(*errs.Error)
	if !ok {
		t.Fatalf("got %v (%T), want a %s refusal", err, err, code)
	}
	if e.Code != code || !strings.Contains(e.Message, text) {
		t.Fatalf("got %s %q, want %s with %q", e.Code, e.Message, code, text)
	}
	return e
}

// The refusals a write must get before any database work, each for its
// own rule; and what a valid write becomes (its scope resolved).
func TestValidateRefuses(t *testing.T) {
	deep := json.RawMessage(`{"a":{"b":{"c":{"d":1}}}}`)
	for _, c := range []struct {
		name string
		p    *authority.Principal
		w    write.Write
		code errs.Code
		text string
	}{
		{"self without an agent", room, write.Write{Scope: "self", Key: "k", Value: json.RawMessage(`1`)}, errs.InvalidField, `scope "self"`},
		{"scope name", agent, write.Write{Scope: "a b", Key: "k", Value: json.RawMessage(`1`)}, errs.InvalidField, "scope"},
		{"scope too long", agent, write.Write{Scope: strings.Repeat("s", 17), Key: "k", Value: json.RawMessage(`1`)}, errs.InvalidField, "scope"},
		{"key missing", agent, write.Write{Scope: "ann", Value: json.RawMessage(`1`)}, errs.InvalidField, "key"},
		{"no op", agent, write.Write{Scope: "ann", Key: "k"}, errs.InvalidField, "exactly one of"},
		{"two ops", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Delete: true}, errs.InvalidField, "exactly one of"},
		{"value and increment", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Increment: num("1")}, errs.InvalidField, "exactly one of"},
		{"merge not an object", agent, write.Write{Scope: "ann", Key: "k", Merge: json.RawMessage(`[1]`)}, errs.InvalidField, "merge must be a JSON object"},
		{"expr not a string", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Expr: true}, errs.InvalidField, "CEL expression string"},
		{"expr empty", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`""`), Expr: true}, errs.InvalidField, "CEL expression string"},
		{"expr does not compile", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`"1 +"`), Expr: true}, errs.CELError, ""},
		{"gate and ungate", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Enabled: "true", Ungate: true}, errs.InvalidField, "both give the entry a gate and remove it"},
		{"gate does not compile", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Enabled: "(("}, errs.CELError, ""},
		{"append without a value", agent, write.Write{Scope: "ann", Append: true, Merge: json.RawMessage(`{}`)}, errs.InvalidField, "an append write takes a value"},
		{"append with if_version", agent, write.Write{Scope: "ann", Append: true, Value: json.RawMessage(`1`), IfVersion: ver(0)}, errs.InvalidField, "if_version does not apply"},
		{"timer", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Timer: &defs.Timer{}}, errs.InvalidField, "timer"},
		{"if_version below 0", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), IfVersion: ver(-1)}, errs.InvalidField, "if_version must be ≥ 0"},
		{"value too large", agent, write.Write{Scope: "ann", Key: "k", Value: json.RawMessage(`"` + strings.Repeat("x", 64) + `"`)}, errs.ValueTooLarge, "over the limit of 64"},
		{"merge too deep", agent, write.Write{Scope: "ann", Key: "k", Merge: deep}, errs.InvalidValue, "more than 3 levels deep"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.w
			err := write.Validate(c.p, cel, lim, 2, &w)
			e := wantErr(t, err, c.code, c.text)
			if e.Details["write"] != 2 {
				t.Errorf("the refusal names write %v, want 2 (its place in the batch)", e.Details["write"])
			}
		})
	}
	// A single write is not named by a place in a batch.
	w := write.Write{Scope: "ann", Key: "k"}
	if e := wantErr(t, write.Validate(agent, cel, lim, -1, &w), errs.InvalidField, "exactly one of"); e.Details["write"] != nil {
		t.Errorf("a single write's refusal names write %v", e.Details["write"])
	}
}

func TestBatch(t *testing.T) {
	wantErr(t, write.Batch(0, 2), errs.InvalidField, "no writes")
	wantErr(t, write.Batch(3, 2), errs.InvalidField, "3 writes, over the limit of 2")
	if err := write.Batch(2, 2); err != nil {
		t.Errorf("a full batch refused: %v", err)
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, w := range []write.Write{
		{Scope: "self", Key: "k", Value: json.RawMessage(`{"a":1}`)},
		{Scope: "ann", Append: true, Value: json.RawMessage(`"hello"`)},
		{Scope: "ann", Key: "k", Merge: json.RawMessage(`{"a":1}`), IfVersion: ver(0)},
		{Scope: "ann", Key: "k", Increment: num("2.5")},
		{Scope: "ann", Key: "k", Delete: true},
		{Scope: "ann", Key: "k", Value: json.RawMessage(`"1 + 2"`), Expr: true, Enabled: "true"},
		{Scope: "ann", Key: "k", Value: json.RawMessage(`1`), Ungate: true, Timer: &defs.Timer{MS: 1000}},
	} {
		if err := write.Validate(agent, cel, lim, -1, &w); err != nil {
			t.Errorf("%+v refused: %v", w, err)
		}
		if w.Scope != "ann" {
			t.Errorf("scope %q after validation, want self resolved to ann", w.Scope)
		}
	}
}

// What every stored value passes: JSON PostgreSQL stores, compacted,
// within the size and depth limits.
func TestCheckValue(t *testing.T) {
	got, err := write.CheckValue(lim, "s", "k", json.RawMessage(` { "a" : [1, 2] } `))
	if err != nil || string(got) != `{"a":[1,2]}` {
		t.Fatalf("got %s, %v; want the value compacted", got, err)
	}
	// The limit is on the compact value: spaces do not count.
	if _, err := write.CheckValue(lim, "s", "k", json.RawMessage(`[`+strings.Repeat(" ", 80)+`1]`)); err != nil {
		t.Errorf("a value small once compact was refused: %v", err)
	}
	for _, c := range []struct {
		name string
		raw  string
		code errs.Code
		text string
		// named: the refusal names the entry in its details (the others
		// name it in the message).
		named bool
	}{
		{"NUL", `"a\u0000b"`, errs.InvalidJSON, "NUL", true},
		{"not UTF-8", "\"\xff\"", errs.InvalidJSON, "UTF-8", true},
		{"not JSON", `{"a":`, errs.InvalidJSON, "value for s/k is not valid JSON", false},
		{"too large", `"` + strings.Repeat("x", 63) + `"`, errs.ValueTooLarge, "value for s/k is 65 bytes", false},
		{"too deep", `[[[[1]]]]`, errs.InvalidValue, "3 levels deep", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := write.CheckValue(lim, "s", "k", json.RawMessage(c.raw))
			e := wantErr(t, err, c.code, c.text)
			if c.named && (e.Details["scope"] != "s" || e.Details["key"] != "k") {
				t.Errorf("details %v do not name s/k", e.Details)
			}
		})
	}
}

// What a set, increment or merge leaves on the entry it lands on.
func TestNewValue(t *testing.T) {
	obj := &write.Current{Value: json.RawMessage(`{"a":{"x":1},"b":2}`)}
	for _, c := range []struct {
		name     string
		o        write.Op
		cur      *write.Current
		want, op string
	}{
		{"set", write.Op{Value: json.RawMessage(`7`)}, obj, `7`, "set"},
		{"increment absent", write.Op{Increment: num("3")}, nil, `3`, "increment"},
		{"increment whole", write.Op{Increment: num("-5")}, &write.Current{Value: json.RawMessage(`2`)}, `-3`, "increment"},
		{"increment fraction", write.Op{Increment: num("0.5")}, &write.Current{Value: json.RawMessage(`2`)}, `2.5`, "increment"},
		{"merge absent", write.Op{Merge: json.RawMessage(`{"a":1}`)}, nil, `{"a":1}`, "merge"},
		{"merge shallow", write.Op{Merge: json.RawMessage(`{"a":{"y":2}}`)}, obj, `{"a":{"y":2},"b":2}`, "merge"},
		{"merge deep", write.Op{Merge: json.RawMessage(`{"a":{"y":2}}`), Deep: true}, obj, `{"a":{"x":1,"y":2},"b":2}`, "merge"},
		{"merge into an append entry", write.Op{Merge: json.RawMessage(`{"c":3}`)}, &write.Current{Value: json.RawMessage(`{}`), Append: true}, `{"c":3}`, "merge"},
	} {
		got, op, err := write.NewValue(&c.o, c.cur)
		if err != nil || string(got) != c.want || op != c.op {
			t.Errorf("%s: got %s (%s), %v; want %s (%s)", c.name, got, op, err, c.want, c.op)
		}
	}
	for _, c := range []struct {
		name string
		o    write.Op
		cur  *write.Current
		code errs.Code
		text string
	}{
		{"replace an append entry", write.Op{Value: json.RawMessage(`1`)}, &write.Current{Value: json.RawMessage(`1`), Append: true}, errs.AppendOnly, "cannot be replaced"},
		{"increment a string", write.Op{Increment: num("1")}, &write.Current{Value: json.RawMessage(`"x"`)}, errs.NotNumeric, "holds a string"},
		{"increment past int64", write.Op{Increment: num("1")}, &write.Current{Value: json.RawMessage(`9223372036854775807`)}, errs.InvalidField, "past the range of whole numbers"},
		{"increment below int64", write.Op{Increment: num("-1")}, &write.Current{Value: json.RawMessage(`-9223372036854775808`)}, errs.InvalidField, "past the range of whole numbers"},
		{"increment past float64", write.Op{Increment: num("1e308")}, &write.Current{Value: json.RawMessage(`1.7e308`)}, errs.InvalidField, "past the range of numbers"},
		{"merge into a list", write.Op{Merge: json.RawMessage(`{"a":1}`)}, &write.Current{Value: json.RawMessage(`[1]`)}, errs.NotMergeable, "holds a list"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Scope, c.o.Key = "s", "k"
			_, _, err := write.NewValue(&c.o, c.cur)
			wantErr(t, err, c.code, c.text)
		})
	}
}

// A merge or increment keeps the value a gate hid, so only room authority
// may change or remove that gate with one; a whole value may.
func TestGateChange(t *testing.T) {
	gate := "false"
	gated := &write.Current{Value: json.RawMessage(`{}`), Gate: &gate}
	for _, c := range []struct {
		name    string
		o       write.Op
		cur     *write.Current
		admin   bool
		refused string
	}{
		{"merge changes the gate", write.Op{Merge: json.RawMessage(`{}`), Enabled: "true"}, gated, false, "cannot change its gate"},
		{"increment removes the gate", write.Op{Increment: num("1"), Ungate: true}, gated, false, "cannot remove its gate"},
		{"merge keeps the same gate", write.Op{Merge: json.RawMessage(`{}`), Enabled: "false"}, gated, false, ""},
		{"a whole value changes it", write.Op{Value: json.RawMessage(`1`), Enabled: "true"}, gated, false, ""},
		{"room authority", write.Op{Merge: json.RawMessage(`{}`), Ungate: true}, gated, true, ""},
		{"no gate before", write.Op{Merge: json.RawMessage(`{}`), Enabled: "true"}, &write.Current{Value: json.RawMessage(`{}`)}, false, ""},
		{"absent", write.Op{Merge: json.RawMessage(`{}`), Enabled: "true"}, nil, false, ""},
	} {
		err := write.GateChange(&c.o, c.cur, c.admin)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused != "":
			t.Run(c.name, func(t *testing.T) { wantErr(t, err, errs.Forbidden, c.refused) })
		}
	}
}

// What an expression write may store: JSON within the size limit, and a
// map for a merge.
func TestExprResult(t *testing.T) {
	o := write.Op{Scope: "s", Key: "k", Value: json.RawMessage(`"1 + 1"`)}
	if err := write.ExprResult(lim, &o, int64(2)); err != nil || string(o.Value) != `2` {
		t.Fatalf("value: %s, %v", o.Value, err)
	}
	o = write.Op{Scope: "s", Key: "k", Merge: json.RawMessage(`"{'a': 1}"`)}
	if err := write.ExprResult(lim, &o, map[string]any{"a": 1}); err != nil || string(o.Merge) != `{"a":1}` || o.Value != nil {
		t.Fatalf("merge: %s %s, %v", o.Merge, o.Value, err)
	}
	o = write.Op{Scope: "s", Key: "k", Merge: json.RawMessage(`"[1]"`)}
	wantErr(t, write.ExprResult(lim, &o, []any{1}), errs.CELError, "not a map")
	o = write.Op{Scope: "s", Key: "k", Value: json.RawMessage(`"x"`)}
	wantErr(t, write.ExprResult(lim, &o, strings.Repeat("x", 64)), errs.ValueTooLarge, "over the limit of 64")
	wantErr(t, write.ExprResult(lim, &o, func() {}), errs.CELError, "cannot be stored")
}

// A refusal of JSON text is the caller's own: the details one caller adds
// (its entry, its field) are not in the next caller's refusal.
func TestCheckJSONTextRefusalIsTheCallers(t *testing.T) {
	nul := []byte(`"a\u0000b"`)
	first := wantErr(t, write.CheckJSONText(nul), errs.InvalidJSON, "NUL")
	first.With("scope", "secret").With("field", "params")
	if _, err := write.CheckValue(lim, "s", "k", json.RawMessage(nul)); err == nil {
		t.Fatal("a NUL value was stored")
	}
	second := wantErr(t, write.CheckJSONText(nul), errs.InvalidJSON, "NUL")
	if len(second.Details) != 0 {
		t.Errorf("the next refusal carries another caller's details: %v", second.Details)
	}
}
