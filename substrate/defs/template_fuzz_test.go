package defs

import (
	"encoding/json"
	"testing"
)

// Rendering any template against any params never panics and always
// yields valid JSON; string rendering is total.
func FuzzRenderTemplate(f *testing.F) {
	f.Add(`{"a": "${params.x}", "${self}": ["${now}", "n=${params.n}"]}`, `{"x": 1, "n": "two"}`)
	f.Add(`"${params.x.y.z}"`, `{"x": {"y": {"z": [1, 2]}}}`)
	f.Add(`"${params}${}${params.}"`, `{}`)
	f.Add(`[1, 2.5e300, null, true, "${params.a}${params.a}"]`, `{"a": {"deep": "${params.a}"}}`)
	f.Fuzz(func(t *testing.T, tmpl, params string) {
		var p map[string]any
		if DecodeNumber([]byte(params), &p) != nil {
			return
		}
		r := &Renderer{Params: p, Self: "agent-a", Now: "2026-01-01T00:00:00Z"}
		_ = r.Str(tmpl)
		_ = CheckTemplates("f", tmpl, nil)
		if !json.Valid([]byte(tmpl)) {
			return
		}
		out, err := r.JSON(json.RawMessage(tmpl))
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("render(%s, %s) = %s, not JSON", tmpl, params, out)
		}
		_, _ = r.Number("f", json.RawMessage(tmpl))
	})
}
