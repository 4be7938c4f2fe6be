package expr

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// stdDecode is what DecodeJSON replaces: a json.Decoder with UseNumber.
func stdDecode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

var jsonCases = []string{
	`0`, `-0`, `1`, `-1`, `12.5`, `1e3`, `1E+3`, `-1.5e-7`, `9223372036854775807`, `9223372036854775808`, `1e400`,
	`01`, `-`, `1.`, `.5`, `1e`, `+1`, `1x`, `1 2`, ` 7 `, "\t\n7\r\n",
	`""`, `"a"`, `"héllo ✓"`, `"\u00e9"`, `"a\nb"`, `"a\"b"`, "\"a\tb\"", "\"\xff\"", "\"\xe2\x82\"", `"`, `"abc`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `True`,
	`{}`, `[]`, `{"a":1}`, `{"a":1,"a":2}`, `{"a":{"b":[1,2,{"c":null}]}}`, ` { "a" : [ 1 , 2 ] } `, `{"a":1,}`, `[1,]`, `[1 2]`,
	`{"a"}`, `{"a":}`, `{a:1}`, `{"a":1`, `[1,2`, `{"\u0041":1}`, `{"é":"ü"}`, `[[[[[[]]]]]]`, `{"n":-0.0e-0}`,
	``, ` `, `{} {}`, `[1]x`, `{"a":01}`, `{"a":1e}`, "\ufeff1",
}

// DecodeJSON answers every input as encoding/json does: the same value,
// the same error.
func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	deep := ""
	for range 100 {
		deep += "["
	}
	for range 100 {
		deep += "]"
	}
	for _, c := range append(jsonCases, deep) {
		checkDecode(t, []byte(c))
	}
}

func checkDecode(t *testing.T, raw []byte) {
	t.Helper()
	want, wantErr := stdDecode(raw)
	got, gotErr := DecodeJSON(raw)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("%q: error %v, encoding/json's %v", raw, gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: %#v, encoding/json's %#v", raw, got, want)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkDecode(t, raw) })
}

func checkMarshal(t *testing.T, v any) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	got, gotErr := MarshalJSON(v)
	if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
		t.Fatalf("%#v: error %v, encoding/json's %v", v, gotErr, wantErr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%#v:\n got %s\nwant %s", v, got, want)
	}
}

// MarshalJSON writes what json.Marshal writes, byte for byte, and fails
// where it fails.
func TestMarshalJSONMatchesEncodingJSON(t *testing.T) {
	var all []byte
	for c := range 256 {
		all = append(all, byte(c))
	}
	type inner struct {
		A string `json:"a"`
		B []int
	}
	cases := []any{
		nil, true, false, "", "plain", string(all), "<a href='x'>&</a>", "\u2028\u2029", "\xff\xfe", "é✓😀", "\x00\x1f\x7f",
		int64(0), int64(-9223372036854775808), 7, 0.0, math.Copysign(0, -1), 1.5, 1e20, 1e21, 1e-6, 1e-7, 123456789.125, -2.5e-300, 1.7976931348623157e308,
		math.NaN(), math.Inf(1), json.Number(""), json.Number("12.50"), json.Number("1e5"), json.Number("x1"), json.Number("01"),
		json.RawMessage(`{"b": 1, "a" : "<"}`), json.RawMessage(`{bad`), json.RawMessage(nil),
		map[string]any(nil), []any(nil), map[string]any{}, []any{},
		map[string]any{"b": 1, "a": []any{"x", 2.5, nil, map[string]any{"<": "&", "": json.Number("3")}}, "\xff": "k"},
		map[string]any{"s": inner{A: "<", B: []int{1}}, "m": map[string]string{"z": "1", "a": "2"}, "p": (*inner)(nil), "f": float32(0.1)},
		map[string]any{"bad": math.Inf(-1)}, []any{map[string]any{"n": json.Number("nope")}},
	}
	for _, c := range cases {
		checkMarshal(t, c)
	}
	for _, c := range jsonCases {
		if v, err := Decode([]byte(c)); err == nil {
			checkMarshal(t, v)
		}
		if v, err := DecodeJSON([]byte(c)); err == nil {
			checkMarshal(t, v)
		}
		checkMarshal(t, map[string]any{c: c})
	}
}

func FuzzMarshalJSON(f *testing.F) {
	for _, c := range jsonCases {
		f.Add([]byte(c), 1.5)
	}
	f.Fuzz(func(t *testing.T, raw []byte, x float64) {
		checkMarshal(t, map[string]any{string(raw): []any{string(raw), x}})
		if v, err := DecodeJSON(raw); err == nil {
			checkMarshal(t, v)
			checkMarshal(t, normalize(v))
		}
	})
}
