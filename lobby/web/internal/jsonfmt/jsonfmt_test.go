package jsonfmt_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/syncsubstrate/sync/lobby/web/internal/jsonfmt"
)

// encode is what the pages and texts wrote before: encoding/json without
// HTML escaping, indented when indent is given.
func encode(t testing.TB, v any, indent string) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimRight(b.String(), "\n")
}

var tricky = []string{"", "plain", `quote " and \ backslash`, "line\nbreak\ttab\rcr\bbs\fff", "\x00\x01\x1f\x7f",
	"<script>&amp;</script>", "\u2028\u2029", "é 日本 😀", "bad \xff byte", "\xed\xa0\x80", "/slash/"}

func randValue(r *rand.Rand, depth int) any {
	switch k := r.IntN(10); {
	case depth > 5 || k < 2:
		return tricky[r.IntN(len(tricky))]
	case k == 2:
		return []float64{0, -0.5, 1, 1e21, 1e-7, 123456789012, 3.14159, -1e300, 5e-324}[r.IntN(9)]
	case k == 3:
		return []any{true, false, nil}[r.IntN(3)]
	case k < 7:
		n := r.IntN(5)
		a := make([]any, n)
		for i := range a {
			a[i] = randValue(r, depth+1)
		}
		return a
	default:
		n := r.IntN(5)
		m := map[string]any{}
		for range n {
			m[tricky[r.IntN(len(tricky))]+fmt.Sprint(r.IntN(3))] = randValue(r, depth+1)
		}
		return m
	}
}

// asciiEscaped is v's JSON with every non-ASCII character written as a
// \u escape and spaces between tokens: the same value in other text.
func asciiEscaped(t *testing.T, v any) []byte {
	raw, _ := json.Marshal(v)
	var b bytes.Buffer
	for _, c := range string(raw) {
		switch {
		case c >= utf8.RuneSelf && c > 0xFFFF:
			c -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xD800+(c>>10), 0xDC00+(c&0x3FF))
		case c >= utf8.RuneSelf:
			fmt.Fprintf(&b, `\u%04X`, c)
		case c == ',' || c == ':':
			b.WriteString(" " + string(c) + "\n ")
		default:
			b.WriteRune(c)
		}
	}
	return b.Bytes()
}

// Within budget, the text is encoding/json's, byte for byte: decoded
// values, raw text read as Unmarshal reads it, raw messages as they are.
func TestSameAsEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 41))
	for i := range 3000 {
		v := randValue(r, 0)
		for _, indent := range []string{"", "  "} {
			want := encode(t, v, indent)
			o := jsonfmt.Options{Indent: indent, MaxBytes: 1 << 20}
			if got, cut := jsonfmt.Format(v, o); got != want || cut {
				t.Fatalf("%d: Format(%#v, %q):\n got %q\nwant %q", i, v, indent, got, want)
			}
			raw := encode(t, v, "")
			for _, text := range [][]byte{[]byte(raw), asciiEscaped(t, v)} {
				var back any
				if err := json.Unmarshal(text, &back); err != nil {
					t.Fatal(err)
				}
				want := encode(t, back, indent)
				if got, _ := jsonfmt.Raw(text, o); got != want {
					t.Fatalf("%d: Raw(%s, %q):\n got %q\nwant %q", i, text, indent, got, want)
				}
			}
			// A raw message inside a value is written as it is.
			inner := map[string]any{"raw": json.RawMessage(asciiEscaped(t, v)), "n": 1}
			if got, _ := jsonfmt.Format(inner, o); got != encode(t, inner, indent) {
				t.Fatalf("%d: raw message in a value:\n got %q\nwant %q", i, got, encode(t, inner, indent))
			}
		}
	}
	// Duplicate keys: the last wins, as in Unmarshal.
	if got, _ := jsonfmt.Raw([]byte(`{"b":1,"a":2,"b":3}`), jsonfmt.Options{}); got != `{"a":2,"b":3}` {
		t.Errorf("duplicate keys: %s", got)
	}
	// Types of the server's own are marshalled first.
	type cool struct {
		Left int    `json:"left_ms"`
		Who  string `json:"who"`
	}
	v := map[string]any{"c": cool{5, "a<b"}, "l": []string{"x"}}
	if got, _ := jsonfmt.Format(v, jsonfmt.Options{Indent: "  "}); got != encode(t, v, "  ") {
		t.Errorf("struct: %s", got)
	}
}

// Past the budget, the text is the start of the whole one, cut on a rune
// boundary, then the marker.
func TestCutIsAPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 41))
	for i := range 2000 {
		v := randValue(r, 0)
		for _, indent := range []string{"", "  "} {
			whole := encode(t, v, indent)
			n := 1 + r.IntN(len(whole)+2)
			got, cut := jsonfmt.Format(v, jsonfmt.Options{Indent: indent, MaxBytes: n, Marker: "…"})
			if !cut {
				if got != whole || len(whole) > n {
					t.Fatalf("%d: not cut at %d: %q (whole %q)", i, n, got, whole)
				}
				continue
			}
			prefix := strings.TrimSuffix(got, "…")
			if len(whole) <= n || !strings.HasPrefix(whole, prefix) || len(prefix) > n || len(prefix) < n-utf8.UTFMax || !utf8.ValidString(prefix) && utf8.ValidString(whole) {
				t.Fatalf("%d: cut at %d: %q of %q", i, n, got, whole)
			}
		}
	}
}

// deepRaw is the attack of issue 41: nested 9,900 levels (some 40 KB).
func deepRaw(levels int) []byte {
	var b bytes.Buffer
	for i := range levels {
		if i%2 == 0 {
			b.WriteString(`[`)
		} else {
			b.WriteString(`{"k":`)
		}
	}
	b.WriteString(`"x"`)
	for i := levels - 1; i >= 0; i-- {
		if i%2 == 0 {
			b.WriteString(`]`)
		} else {
			b.WriteString(`}`)
		}
	}
	return b.Bytes()
}

// A value nested past MaxDepth shows its first levels and […] or {…}.
func TestDepthCut(t *testing.T) {
	got, _ := jsonfmt.Raw(deepRaw(5), jsonfmt.Options{MaxDepth: 2})
	if got != `[{"k":[…]}]` {
		t.Errorf("depth 2 of 5: %s", got)
	}
	if got, _ := jsonfmt.Raw([]byte(`[[[]],[[1]],{}]`), jsonfmt.Options{MaxDepth: 2}); got != `[[[]],[[…]],{}]` {
		t.Errorf("empty containers past the depth show as they are: %s", got)
	}
}

// Issue 41.1: what formatting allocates is bounded by the budget, not by
// the value: the attack's value, a wide one and a long string, decoded
// or raw, indented or not, allocate a few times the budget at most.
func TestFormatAllocatesByItsBudget(t *testing.T) {
	deep := deepRaw(9900)
	var deepAny any
	if err := json.Unmarshal(deep, &deepAny); err != nil {
		t.Fatal(err)
	}
	wide := map[string]any{}
	for i := range 5000 {
		wide[fmt.Sprintf("key%05d", i)] = []any{i, "v"}
	}
	wideRaw, _ := json.Marshal(wide)
	long, _ := json.Marshal(strings.Repeat("é", 30000))
	const budget = 2000
	for _, c := range []struct {
		name string
		f    func(o jsonfmt.Options) (string, bool)
	}{
		{"deep raw", func(o jsonfmt.Options) (string, bool) { return jsonfmt.Raw(deep, o) }},
		{"deep decoded", func(o jsonfmt.Options) (string, bool) { return jsonfmt.Format(deepAny, o) }},
		{"deep raw message", func(o jsonfmt.Options) (string, bool) { return jsonfmt.Format(json.RawMessage(deep), o) }},
		{"wide raw", func(o jsonfmt.Options) (string, bool) { return jsonfmt.Raw(wideRaw, o) }},
		{"long string", func(o jsonfmt.Options) (string, bool) { return jsonfmt.Raw(long, o) }},
	} {
		for _, indent := range []string{"", "  "} {
			o := jsonfmt.Options{Indent: indent, MaxBytes: budget}
			if text, _ := c.f(o); len(text) > budget+len("… (over 2000 bytes)") {
				t.Fatalf("%s: %d bytes of text", c.name, len(text))
			}
			bytes := allocBytes(func() { c.f(o) })
			if bytes > 20*budget {
				t.Errorf("%s (indent %q): formatting %d bytes allocated %d bytes", c.name, indent, budget, bytes)
			}
		}
	}
}

// allocBytes is what one call of f allocates, on average over a few.
func allocBytes(f func()) uint64 {
	f() // pools and lazy state warm
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 5
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// Text that is not JSON (cut short, garbled) never panics or loops, and
// stays within the budget.
func TestNotJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 41))
	for range 500 {
		whole := []byte(encode(t, randValue(r, 0), ""))
		text := whole[:r.IntN(len(whole)+1)]
		if len(text) > 0 && r.IntN(2) == 0 {
			text = append([]byte{}, text...)
			text[r.IntN(len(text))] = "{}[],:\"\\x"[r.IntN(9)]
		}
		for _, f := range []func() (string, bool){
			func() (string, bool) { return jsonfmt.Raw(text, jsonfmt.Options{MaxBytes: 300}) },
			func() (string, bool) {
				return jsonfmt.Format(json.RawMessage(text), jsonfmt.Options{MaxBytes: 300, Indent: "  "})
			},
		} {
			if got, _ := f(); len(got) > 300+len("… (over 300 bytes)") {
				t.Fatalf("%q: %d bytes", text, len(got))
			}
		}
	}
}
