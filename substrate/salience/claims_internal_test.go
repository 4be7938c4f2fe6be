package salience

import "testing"

// A key template's literal parts cover the keys it can write; an
// all-${…} template covers nothing by itself, and siblings share a family.
func TestKeyTemplatesCoverTheirKeys(t *testing.T) {
	for _, c := range []struct {
		tmpl, key string
		want      bool
	}{
		{"claim:${params.task}", "claim:T-3", true},
		{"claim:${params.task}", "claim:", false},
		{"claim:${params.task}", "release_date", false},
		{"${params.a}/x/${params.b}", "1/x/2", true},
		{"${params.a}/x/${params.b}", "1/y/2", false},
		{"note_${self}_v", "note_a_v", true},
		{"note_${self}_v", "note_a_w", false},
	} {
		if got := matchParts(literalParts(c.tmpl), c.key); got != c.want {
			t.Errorf("%q covers %q: %v, want %v", c.tmpl, c.key, got, c.want)
		}
	}
	if family("task_007") != family("task_212") || family("release_date") != "release_date" || family("42") != "42" {
		t.Errorf("families: %q %q %q", family("task_007"), family("release_date"), family("42"))
	}
}
