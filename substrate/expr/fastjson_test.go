package expr

import (
	"bytes"
	"encoding/json"
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
