package substrate

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
		if decodeNumber([]byte(params), &p) != nil {
			return
		}
		r := &renderer{params: p, self: "agent-a", now: "2026-01-01T00:00:00Z"}
		_ = r.str(tmpl)
		_ = checkTemplates("f", tmpl, nil)
		if !json.Valid([]byte(tmpl)) {
			return
		}
		out, err := r.json(json.RawMessage(tmpl))
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("render(%s, %s) = %s, not JSON", tmpl, params, out)
		}
		_, _ = r.number("f", json.RawMessage(tmpl))
	})
}
