// Package jsonfmt formats JSON for people and models to read within an
// output budget: it walks the value and writes into a bounded buffer,
// stopping once the budget is spent, so showing a value costs what is
// shown, not what is stored. Encoding a whole value and then cutting it
// cost a page seconds and gigabytes for one value nested 9,900 levels
// deep (issue 41): indentation grows with depth, so the whole text is
// quadratic in it.
//
// Within budget the text is byte for byte what encoding/json gives with
// SetEscapeHTML(false) (and SetIndent("", indent) when indented); past
// it, a prefix of that text on a rune boundary, then Options.Marker.
package jsonfmt

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Options shape one formatting.
type Options struct {
	// Indent is written once per level before each member; "" writes
	// compact JSON on one line. Default "".
	Indent string
	// MaxBytes is the budget: the most bytes written before Marker.
	// Default 2,000.
	MaxBytes int
	// MaxDepth is the deepest level shown: arrays and objects nested
	// deeper are written […] and {…}, each counting as one value, so a
	// value written before the server bounded nesting still costs no
	// more than its first levels. Default 64 (the server's default
	// bound on stored values, so what it stores today shows whole).
	MaxDepth int
	// Marker ends a text cut for the budget. Default "… (over N bytes)"
	// with N the budget.
	Marker string
}

func (o *Options) fill() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 2000
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 64
	}
	if o.Marker == "" {
		o.Marker = "… (over " + strconv.Itoa(o.MaxBytes) + " bytes)"
	}
}

// Format writes v as encoding/json would marshal it, within o's budget,
// and says whether it was cut. json.RawMessage values are written as
// they are (re-indented), as encoding/json writes them; other types than
// JSON's own (maps of string to any, slices of any, strings, numbers,
// booleans, nil) are marshalled by encoding/json first.
func Format(v any, o Options) (string, bool) {
	o.fill()
	w := &writer{o: o, buf: make([]byte, 0, min(o.MaxBytes, 4096)+len(o.Marker))}
	w.value(v, 0)
	return w.done()
}

// Raw writes the JSON text raw as if it were decoded into an any first
// (json.Unmarshal) and then formatted: object keys sorted, the last of
// duplicate keys kept, numbers as float64, strings re-encoded. Text that
// is not JSON may be written as it is, within the budget.
func Raw(raw []byte, o Options) (string, bool) {
	o.fill()
	w := &writer{o: o, buf: make([]byte, 0, min(o.MaxBytes, 4096)+len(o.Marker))}
	w.rawText(raw, true, 0)
	return w.done()
}

// rawText writes JSON text at depth. It is not validated first (a
// validation would cost what the whole value costs, deep ones most):
// every step of the walk moves on and stays within the text, and text
// that is not JSON, which would send the walk out of it, is written as
// it is instead.
func (w *writer) rawText(raw []byte, decoded bool, depth int) {
	mark, cut := len(w.buf), w.cut
	defer func() {
		if recover() != nil {
			w.buf, w.cut = w.buf[:mark], cut
			w.writeBytes(raw)
		}
	}()
	r := &reader{src: raw, decoded: decoded}
	r.ws()
	w.raw(r, depth)
}

// writer is the bounded buffer.
type writer struct {
	o   Options
	buf []byte
	cut bool
}

func (w *writer) done() (string, bool) {
	if !w.cut {
		return string(w.buf), false
	}
	return string(append(w.buf, w.o.Marker...)), true
}

// room is how many bytes the budget has left.
func (w *writer) room() int { return w.o.MaxBytes - len(w.buf) }

// writeString appends s, or as much of it as fits on a rune boundary.
func (w *writer) writeString(s string) {
	if w.cut {
		return
	}
	if len(s) <= w.room() {
		w.buf = append(w.buf, s...)
		return
	}
	n := w.room()
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	w.buf = append(w.buf, s[:n]...)
	w.cut = true
}

func (w *writer) writeBytes(b []byte) {
	if w.cut {
		return
	}
	if len(b) <= w.room() {
		w.buf = append(w.buf, b...)
		return
	}
	w.writeString(string(b[:min(len(b), w.room()+utf8.UTFMax)]))
}

func (w *writer) byte1(c byte) {
	if w.cut {
		return
	}
	if w.room() < 1 {
		w.cut = true
		return
	}
	w.buf = append(w.buf, c)
}

// newline starts a member's line at depth.
func (w *writer) newline(depth int) {
	if w.o.Indent == "" || w.cut {
		return
	}
	w.byte1('\n')
	for range depth {
		if w.cut {
			return
		}
		w.writeString(w.o.Indent)
	}
}

func (w *writer) colon() {
	if w.o.Indent == "" {
		w.byte1(':')
	} else {
		w.writeString(": ")
	}
}

// elided writes a container past MaxDepth.
func (w *writer) elided(open byte) {
	if open == '[' {
		w.writeString("[…]")
	} else {
		w.writeString("{…}")
	}
}

// value writes a decoded value at depth (0 for the root).
func (w *writer) value(v any, depth int) {
	if w.cut {
		return
	}
	switch x := v.(type) {
	case nil:
		w.writeString("null")
	case bool:
		w.writeString(strconv.FormatBool(x))
	case string:
		w.quote(x)
	case float64:
		w.float(x, 64)
	case float32:
		w.float(float64(x), 32)
	case int:
		w.writeString(strconv.Itoa(x))
	case int64:
		w.writeString(strconv.FormatInt(x, 10))
	case int32:
		w.writeString(strconv.FormatInt(int64(x), 10))
	case uint64:
		w.writeString(strconv.FormatUint(x, 10))
	case json.Number:
		if x == "" {
			w.writeString("0")
		} else {
			w.writeString(string(x))
		}
	case json.RawMessage:
		if x == nil {
			w.writeString("null")
			return
		}
		w.rawText(x, false, depth)
	case []any:
		if x == nil {
			w.writeString("null")
			return
		}
		if len(x) == 0 {
			w.writeString("[]")
			return
		}
		if depth >= w.o.MaxDepth {
			w.elided('[')
			return
		}
		w.byte1('[')
		for i, e := range x {
			if w.cut {
				return
			}
			if i > 0 {
				w.byte1(',')
			}
			w.newline(depth + 1)
			w.value(e, depth+1)
		}
		w.newline(depth)
		w.byte1(']')
	case map[string]any:
		if x == nil {
			w.writeString("null")
			return
		}
		if len(x) == 0 {
			w.writeString("{}")
			return
		}
		if depth >= w.o.MaxDepth {
			w.elided('{')
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.byte1('{')
		for i, k := range keys {
			if w.cut {
				return
			}
			if i > 0 {
				w.byte1(',')
			}
			w.newline(depth + 1)
			w.quote(k)
			w.colon()
			w.value(x[k], depth+1)
		}
		w.newline(depth)
		w.byte1('}')
	default:
		w.fallback(v, depth)
	}
}

// fallback formats a Go value of another type by marshalling it first:
// the types the server makes (structs, typed maps and slices) are
// small; values people store arrive as raw JSON or decoded any.
func (w *writer) fallback(v any, depth int) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		w.writeString("null")
		return
	}
	w.rawText(bytes.TrimRight(b.Bytes(), "\n"), false, depth)
}

func (w *writer) float(f float64, bits int) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		w.writeString("null")
		return
	}
	// encoding/json's own rule (ES6 number to string).
	var a [32]byte
	b := a[:0]
	abs := math.Abs(f)
	fmtc := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			fmtc = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, fmtc, -1, bits)
	if fmtc == 'e' {
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	w.writeBytes(b)
}

const hexDigits = "0123456789abcdef"

// quote writes s as a JSON string, as encoding/json escapes it without
// HTML escaping.
func (w *writer) quote(s string) {
	w.byte1('"')
	for i := 0; i < len(s) && !w.cut; {
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			w.rune(utf8.RuneError, true)
		} else {
			w.rune(c, false)
		}
		i += size
	}
	w.byte1('"')
}

// rune writes one character of a string's content; bad is an invalid
// byte (written \ufffd, as encoding/json does).
func (w *writer) rune(c rune, bad bool) {
	if w.cut {
		return
	}
	if bad {
		w.writeString(`\ufffd`)
		return
	}
	if c < utf8.RuneSelf {
		b := byte(c)
		switch {
		case b >= 0x20 && b != '"' && b != '\\':
			w.byte1(b)
		case b == '"' || b == '\\':
			w.writeString(string([]byte{'\\', b}))
		case b == '\b':
			w.writeString(`\b`)
		case b == '\f':
			w.writeString(`\f`)
		case b == '\n':
			w.writeString(`\n`)
		case b == '\r':
			w.writeString(`\r`)
		case b == '\t':
			w.writeString(`\t`)
		default:
			w.writeString(string([]byte{'\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF]}))
		}
		return
	}
	if c == '\u2028' || c == '\u2029' {
		w.writeString(string([]byte{'\\', 'u', '2', '0', '2', hexDigits[c&0xF]}))
		return
	}
	var a [utf8.UTFMax]byte
	n := utf8.EncodeRune(a[:], c)
	w.writeBytes(a[:n])
}

// reader walks valid JSON text. decoded reads it as json.Unmarshal into
// an any would (keys sorted, numbers as float64, strings re-encoded);
// otherwise as encoding/json writes a json.RawMessage (as it is).
type reader struct {
	src     []byte
	pos     int
	decoded bool
}

func (r *reader) ws() {
	for r.pos < len(r.src) {
		switch r.src[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// skip moves past the value at pos without writing it.
func (r *reader) skip() {
	depth := 0
	for r.pos < len(r.src) {
		switch c := r.src[r.pos]; c {
		case '"':
			r.skipString()
			if depth == 0 {
				return
			}
			continue
		case '[', '{':
			depth++
		case ']', '}':
			if depth == 0 { // the end of the container a scalar is in
				return
			}
			if depth--; depth == 0 {
				r.pos++
				return
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return
			}
		}
		r.pos++
	}
}

// skipString moves past the string starting at pos.
func (r *reader) skipString() {
	r.pos++
	for r.pos < len(r.src) {
		switch r.src[r.pos] {
		case '\\':
			r.pos += 2
			continue
		case '"':
			r.pos++
			return
		}
		r.pos++
	}
}

// member is one object member: where its key's text (quotes included)
// starts and ends, and where its value starts, in the reader's text.
type member struct{ key, keyEnd, value int32 }

// raw writes the value at r.pos at depth, leaving r past it.
func (w *writer) raw(r *reader, depth int) {
	if w.cut || r.pos >= len(r.src) {
		return
	}
	switch c := r.src[r.pos]; c {
	case '"':
		start := r.pos
		r.skipString()
		if r.decoded {
			w.unquote(r.src[start:r.pos])
		} else {
			w.writeBytes(r.src[start:r.pos])
		}
	case '[':
		if depth >= w.o.MaxDepth {
			if r.empty() {
				w.writeString("[]")
			} else {
				w.elided('[')
			}
			r.skip()
			return
		}
		r.pos++
		r.ws()
		if r.src[r.pos] == ']' {
			r.pos++
			w.writeString("[]")
			return
		}
		w.byte1('[')
		for i := 0; !w.cut; i++ {
			if i > 0 {
				w.byte1(',')
			}
			w.newline(depth + 1)
			w.raw(r, depth+1)
			r.ws()
			if r.pos >= len(r.src) || r.src[r.pos] == ']' {
				r.pos++
				break
			}
			r.pos++ // ,
			r.ws()
		}
		w.newline(depth)
		w.byte1(']')
	case '{':
		if depth >= w.o.MaxDepth {
			if r.empty() {
				w.writeString("{}")
			} else {
				w.elided('{')
			}
			r.skip()
			return
		}
		if r.decoded {
			w.sortedObject(r, depth)
			return
		}
		r.pos++
		r.ws()
		if r.src[r.pos] == '}' {
			r.pos++
			w.writeString("{}")
			return
		}
		w.byte1('{')
		for i := 0; !w.cut; i++ {
			if i > 0 {
				w.byte1(',')
			}
			w.newline(depth + 1)
			start := r.pos
			r.skipString()
			w.writeBytes(r.src[start:r.pos])
			r.ws()
			r.pos++ // :
			r.ws()
			w.colon()
			w.raw(r, depth+1)
			r.ws()
			if r.pos >= len(r.src) || r.src[r.pos] == '}' {
				r.pos++
				break
			}
			r.pos++ // ,
			r.ws()
		}
		w.newline(depth)
		w.byte1('}')
	default: // number, true, false, null
		start := r.pos
		for r.pos < len(r.src) {
			switch r.src[r.pos] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				goto end
			}
			r.pos++
		}
	end:
		tok := r.src[start:r.pos]
		if r.decoded && (c == '-' || c >= '0' && c <= '9') {
			f, err := strconv.ParseFloat(string(tok), 64)
			if err == nil {
				w.float(f, 64)
				return
			}
		}
		w.writeBytes(tok)
	}
}

// empty says whether the container at pos has no members.
func (r *reader) empty() bool {
	i := r.pos + 1
	for i < len(r.src) {
		switch r.src[i] {
		case ' ', '\t', '\n', '\r':
			i++
			continue
		case ']', '}':
			return true
		}
		return false
	}
	return true
}

// sortedObject writes the object at r.pos with its keys sorted (the last
// of duplicates kept), as a decoded map is written. Only the members the
// budget can show are kept while reading: each costs at least four bytes
// ("":0), so a wide object costs a page no more than its first keys.
func (w *writer) sortedObject(r *reader, depth int) {
	keep := w.room()/5 + 1
	ms := make([]member, 0, min(2*keep+16, 64))
	r.pos++
	r.ws()
	for r.pos < len(r.src) && r.src[r.pos] != '}' {
		start := r.pos
		r.skipString()
		k, kEnd := start, r.pos
		r.ws()
		r.pos++ // :
		r.ws()
		ms = append(ms, member{key: int32(k), keyEnd: int32(kEnd), value: int32(r.pos)})
		r.skip()
		r.ws()
		if r.pos < len(r.src) && r.src[r.pos] == ',' {
			r.pos++
			r.ws()
		}
		if len(ms) >= 2*keep+16 {
			ms = smallest(r.src, ms, keep)
		}
	}
	end := r.pos + 1
	ms = smallest(r.src, ms, keep)
	if len(ms) == 0 {
		w.writeString("{}")
		r.pos = end
		return
	}
	w.byte1('{')
	for i, m := range ms {
		if w.cut {
			break
		}
		if i > 0 {
			w.byte1(',')
		}
		w.newline(depth + 1)
		w.unquote(r.src[m.key:m.keyEnd])
		w.colon()
		sub := reader{src: r.src, pos: int(m.value), decoded: true}
		w.raw(&sub, depth+1)
	}
	w.newline(depth)
	w.byte1('}')
	r.pos = end
}

// smallest sorts ms by decoded key, keeps the last member of each key
// (json.Unmarshal's rule) and at most n of them.
func smallest(src []byte, ms []member, n int) []member {
	key := func(m member) []byte { return src[m.key:m.keyEnd] }
	slices.SortStableFunc(ms, func(a, b member) int { return compareKeys(key(a), key(b)) })
	out := ms[:0]
	for i, m := range ms {
		if i+1 < len(ms) && compareKeys(key(m), key(ms[i+1])) == 0 {
			continue // a later duplicate wins
		}
		out = append(out, m)
	}
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// compareKeys orders two quoted keys by their decoded text.
func compareKeys(a, b []byte) int {
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 && utf8.Valid(a) && utf8.Valid(b) {
		return bytes.Compare(a[1:len(a)-1], b[1:len(b)-1])
	}
	return bytes.Compare(decodeString(a), decodeString(b))
}

// decodeString is the text of a quoted JSON string, as json.Unmarshal
// reads it (bad bytes and lone surrogates become U+FFFD).
func decodeString(q []byte) []byte {
	var out []byte
	eachRune(q, func(c rune, bad bool) bool {
		if bad {
			c = utf8.RuneError
		}
		out = utf8.AppendRune(out, c)
		return true
	})
	return out
}

// unquote writes a quoted JSON string as json.Unmarshal then Marshal
// would: its escapes read, its text escaped again.
func (w *writer) unquote(q []byte) {
	w.byte1('"')
	eachRune(q, func(c rune, bad bool) bool {
		// Unmarshal turns a bad byte into U+FFFD itself, which Marshal
		// then writes as it is.
		w.rune(c, false)
		return !w.cut
	})
	w.byte1('"')
}

// eachRune calls f for each character of the quoted string q, until f
// returns false.
func eachRune(q []byte, f func(c rune, bad bool) bool) {
	s := q[1 : len(q)-1]
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'u':
				r, ok := hex4(s, i+2)
				i += 6
				if !ok {
					if !f(utf8.RuneError, false) {
						return
					}
					continue
				}
				if utf16.IsSurrogate(r) {
					if r2, ok2 := hex4(s, i+2); ok2 && i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							i += 6
							if !f(d, false) {
								return
							}
							continue
						}
					}
					r = utf8.RuneError
				}
				if !f(r, false) {
					return
				}
				continue
			default:
				var r rune
				switch s[i+1] {
				case 'b':
					r = '\b'
				case 'f':
					r = '\f'
				case 'n':
					r = '\n'
				case 'r':
					r = '\r'
				case 't':
					r = '\t'
				default: // " \ /
					r = rune(s[i+1])
				}
				i += 2
				if !f(r, false) {
					return
				}
				continue
			}
		}
		if c < utf8.RuneSelf {
			i++
			if !f(rune(c), false) {
				return
			}
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		i += size
		if !f(r, size == 1) {
			return
		}
	}
}

func hex4(s []byte, at int) (rune, bool) {
	if at+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
