package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/tools/txtar"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// updating reports -update (declared with the schema goldens), which
// rewrites the pinned results too.
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// Conversations replay what a model does through the go-sdk client, signed
// in through the whole OAuth flow, and pin every result. A file's comment
// says what the session is; then each call is a section named
// "<user> <tool>" holding the arguments, followed by a "result" (or
// "error") section with the structured content as the model received it
// (for an error, the text it read, as errors carry only text),
// normalised (times, durations). "signup <user>" makes an account;
// "connect <user> [room=level …]" connects a client as that user (signing
// up first if needed) and consents to those rooms. Run
//
//	go test ./mcp -run TestConversations -update
//
// after an intended change and review the diff.
//
// Each result is also checked against its tool's output schema, and
// scanned for the REST API's vocabulary (routes, query strings), which a
// model talking MCP cannot use.
func TestConversations(t *testing.T) {
	files, _ := filepath.Glob("testdata/conversations/*.txtar")
	if len(files) == 0 {
		t.Fatal("no conversations")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) { replay(t, file, replayOpts{}) })
	}
}

// replayOpts make a replay a step of another test: stop after a number of
// calls (0: none), pin nothing, and see each call's result.
type replayOpts struct {
	stopAfter int
	quiet     bool
	onResult  func(call int, user, tool string, structured map[string]any, text string)
}

// replay runs a conversation file; it returns the sessions by user.
func replay(t *testing.T, file string, o replayOpts) map[string]*sdk.ClientSession {
	ar, err := txtar.ParseFile(file)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, pgtest.New(t))
	people := map[string]*person{}
	sessions := map[string]*sdk.ClientSession{}
	schemas := map[string]*jsonschema.Resolved{}
	out := &txtar.Archive{Comment: ar.Comment}
	changed := false
	calls := 0
	for i := 0; i < len(ar.Files); i++ {
		f := ar.Files[i]
		out.Files = append(out.Files, f)
		words := strings.Fields(f.Name)
		if len(words) == 2 && words[0] == "signup" {
			people[words[1]] = signup(t, srv, words[1])
			continue
		}
		if len(words) >= 2 && words[0] == "connect" {
			rooms := map[string]string{}
			for _, w := range words[2:] {
				room, level, _ := strings.Cut(w, "=")
				rooms[room] = level
			}
			if people[words[1]] == nil {
				people[words[1]] = signup(t, srv, words[1])
			}
			cs := connect(t, people[words[1]], rooms)
			sessions[words[1]] = cs
			if len(schemas) == 0 {
				list, err := cs.ListTools(context.Background(), nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, tl := range list.Tools {
					raw, _ := json.Marshal(tl.OutputSchema)
					var s jsonschema.Schema
					if err := json.Unmarshal(raw, &s); err != nil {
						t.Fatalf("%s output schema: %v", tl.Name, err)
					}
					if schemas[tl.Name], err = s.Resolve(nil); err != nil {
						t.Fatalf("%s output schema: %v", tl.Name, err)
					}
				}
			}
			continue
		}
		if len(words) != 2 {
			t.Fatalf("%s: section %q is neither a call (<user> <tool>) nor connect", file, f.Name)
		}
		calls++
		if o.stopAfter > 0 && calls > o.stopAfter {
			return sessions
		}
		cs := sessions[words[0]]
		if cs == nil {
			t.Fatalf("%s: %s calls before connecting", file, words[0])
		}
		var args map[string]any
		if err := json.Unmarshal(bytes.TrimSpace(f.Data), &args); err != nil {
			t.Fatalf("%s: arguments of %q: %v", file, f.Name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: words[1], Arguments: args})
		cancel()
		if err != nil {
			t.Fatalf("%s: %s: protocol error %v", file, f.Name, err)
		}
		text := resultText(res)
		if leak := restVocabulary.FindString(text); leak != "" {
			t.Errorf("%s: %s: the result speaks REST (%q): %s", file, f.Name, leak, text)
		}
		var structured any
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &structured)
		if o.onResult != nil {
			m, _ := structured.(map[string]any)
			o.onResult(calls, words[0], words[1], m, text)
		}
		if o.quiet {
			if i+1 < len(ar.Files) && (ar.Files[i+1].Name == "result" || ar.Files[i+1].Name == "error") {
				i++
			}
			continue
		}
		// A refusal names what was wrong and the call to make next.
		if res.IsError && !strings.Contains(text, "sync_") {
			t.Errorf("%s: %s: the error names no call to make next: %s", file, f.Name, text)
		}
		// The text is a rendering of the same result: nothing in the
		// JSON is missing from it.
		for _, leaf := range leaves(structured) {
			if !strings.Contains(text, leaf) {
				t.Errorf("%s: %s: the text rendering lacks %q:\n%s", file, f.Name, leaf, text)
				break
			}
		}
		if res.IsError && res.StructuredContent != nil {
			t.Errorf("%s: %s: an error with structured content (errors are text only)", file, f.Name)
		}
		if !res.IsError {
			if err := schemas[words[1]].Validate(structured); err != nil {
				t.Errorf("%s: %s: result does not fit the tool's output schema: %v", file, f.Name, err)
			}
		}
		kind := "result"
		if res.IsError {
			kind = "error"
		}
		got := txtar.File{Name: kind, Data: pretty(normalise(structured))}
		if res.IsError { // errors are text only: pin what the model reads
			got.Data = []byte(normalise(text).(string) + "\n")
		}
		var want *txtar.File
		if i+1 < len(ar.Files) && (ar.Files[i+1].Name == "result" || ar.Files[i+1].Name == "error") {
			i++
			want = &ar.Files[i]
		}
		out.Files = append(out.Files, got)
		if want == nil || want.Name != got.Name || !bytes.Equal(want.Data, got.Data) {
			changed = true
			if !updating() {
				wantText := "(nothing pinned)"
				if want != nil {
					wantText = want.Name + ":\n" + string(want.Data)
				}
				t.Errorf("%s: %s changed (review, then -update)\n--- pinned %s\n--- now %s:\n%s", file, f.Name, wantText, got.Name, got.Data)
			}
		}
	}
	if changed && updating() && !o.quiet {
		if err := os.WriteFile(file, txtar.Format(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return sessions
}

// Every call the conversations' results advise (an error's next and
// options, a cut's expand, a delta's full and more) is a call that
// succeeds: each is made at the point of the conversation where it was
// given, on a fresh replay up to there.
func TestConversationHints(t *testing.T) {
	files, _ := filepath.Glob("testdata/conversations/*.txtar")
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			type hint struct {
				call       int
				user, from string
				text       string
			}
			var hints []hint
			seen := map[string]bool{}
			replay(t, file, replayOpts{quiet: true, onResult: func(call int, user, tool string, m map[string]any, text string) {
				// From the structured result, and from the text a model
				// reads (an error may come as text only).
				for _, h := range append(advisedCalls(m), textCalls(text)...) {
					if !seen[user+h] {
						seen[user+h] = true
						hints = append(hints, hint{call, user, tool, h})
					}
				}
			}})
			if len(hints) == 0 {
				t.Skip("no advised calls")
			}
			for _, h := range hints {
				sessions := replay(t, file, replayOpts{quiet: true, stopAfter: h.call})
				tool, args, ok := parseCall(h.text)
				if !ok {
					t.Errorf("after %s (call %d), the advice %q is not a call", h.from, h.call, h.text)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				res, err := sessions[h.user].CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
				cancel()
				if err != nil {
					t.Errorf("after %s (call %d), %q: protocol error %v", h.from, h.call, h.text, err)
					continue
				}
				if res.IsError {
					raw, _ := json.Marshal(res.StructuredContent)
					text := ""
					if len(res.Content) > 0 {
						text = res.Content[0].(*sdk.TextContent).Text
					}
					t.Errorf("after %s (call %d), the advised %q failed: %s %s", h.from, h.call, h.text, raw, text)
				}
			}
			t.Logf("%d advised calls made", len(hints))
		})
	}
}

// advisedCalls are the calls a result advises: next, options, expand,
// _expand, a delta's full and more, a message page's _expand.
func advisedCalls(m map[string]any) []string {
	var out []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch x := v.(type) {
		case map[string]any:
			for k, val := range x {
				walk(val, k)
			}
		case []any:
			for _, val := range x {
				walk(val, key)
			}
		case string:
			switch key {
			case "next", "options", "expand", "_expand", "full", "more":
				if strings.HasPrefix(x, "sync_") {
					// Prose may follow the call ("… to act in it").
					out = append(out, callPart(x))
				}
			}
		}
	}
	walk(m, "")
	sort.Strings(out)
	return out
}

// textCall finds advice in a result's text rendering: a next, expand,
// _expand, full or more line (or list item) holding a call.
var textCall = regexp.MustCompile(`(?m)^\s*(?:- )?(?:next|expand|_expand|full|more): "?(sync_[a-z_]+(?: \{.*)?)$`)

// textCalls are the calls a result's text advises.
func textCalls(text string) []string {
	var out []string
	for _, m := range textCall.FindAllStringSubmatch(text, -1) {
		c := m[1]
		if strings.HasSuffix(c, `"`) && strings.Count(c, `"`)%2 == 1 {
			c = strings.TrimSuffix(c, `"`)
		}
		if strings.Contains(c, `\"`) { // a quoted scalar: unquote it
			if u, err := strconv.Unquote(`"` + c + `"`); err == nil {
				c = u
			}
		}
		out = append(out, callPart(c))
	}
	return out
}

// callPart is the call at the start of a hint: the tool and its JSON
// arguments, without prose after them.
func callPart(s string) string {
	name, rest, _ := strings.Cut(s, " ")
	rest = strings.TrimSpace(rest)
	if !strings.HasPrefix(rest, "{") {
		return name
	}
	dec := json.NewDecoder(strings.NewReader(rest))
	var v any
	if dec.Decode(&v) != nil {
		return s
	}
	return name + " " + rest[:dec.InputOffset()]
}

// restVocabulary finds the REST API's words: a method and a path, a
// /rooms route, or a context query string.
var restVocabulary = regexp.MustCompile(`\b(GET|PUT|POST|PATCH|DELETE) /|/rooms\b|[?&](only|depth|messages_after|messages_limit|include|max_bytes|condition|timeout|context|key|actions|messages)=`)

// normalise replaces what differs between runs: times, durations and
// relative ages.
func normalise(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["max_bytes"]; ok && x["bytes"] != nil { // a budget: sizes vary with the times in it
			x["bytes"] = "<bytes>"
		}
		for k, val := range x {
			switch k {
			case "now", "last_heartbeat", "elapsed_ms", "idle_for_s", "created_at", "updated_at", "expires_at", "last_seen", "last_active", "ts", "at":
				if val != nil {
					x[k] = "<" + k + ">"
				}
				continue
			}
			x[k] = normalise(val)
		}
	case []any:
		for i := range x {
			x[i] = normalise(x[i])
		}
	case string:
		x = timestamp.ReplaceAllString(x, "<time>")
		x = clock.ReplaceAllString(x, "<hh:mm:ss>")
		x = left.ReplaceAllStringFunc(x, func(m string) string {
			if strings.HasSuffix(m, "…") { // a line cut short after the duration
				return "(<left>…"
			}
			return "(<left>)"
		})
		x = sized.ReplaceAllString(x, "<n bytes>") // a summarised value holding times
		return ago.ReplaceAllString(x, "<ago>")
	}
	return v
}

var (
	timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	ago       = regexp.MustCompile(`\b\d+ ?(ms|s|m|h|d) ago\b`)
	clock     = regexp.MustCompile(`\b\d\d:\d\d:\d\d(Z|\b)`) // the loom's action trace and leases
	// A duration left, whole or in a line cut short ("(59s lef…" and
	// "(1m0s le…" are the same line a second apart).
	left  = regexp.MustCompile(`\(((\d+h)?(\d+m)?[\d.]+m?s)( left\)| ?(l(e(ft?)?)?)?…)`)
	sized = regexp.MustCompile(`^<\d+ bytes>$`)
)

// leaves are the strings and numbers of a JSON value.
func leaves(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			out = append(out, k)
			out = append(out, leaves(val)...)
		}
	case []any:
		for _, val := range x {
			out = append(out, leaves(val)...)
		}
	case string:
		if !strings.ContainsAny(x, "\"\n\\") { // quoted forms escape these
			out = append(out, x)
		}
	case float64:
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// pretty writes v as indented JSON with sorted keys and no HTML escapes.
func pretty(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return []byte(fmt.Sprint(v))
	}
	return b.Bytes()
}

// Every help key, as a model reads it over MCP, names tool calls and no
// REST route.
func TestHelpSpeaksMCP(t *testing.T) {
	srv := startServer(t, pgtest.New(t))
	cs := connect(t, signup(t, srv, "alice"), nil)
	index := mustTool(t, cs, "sync_help", map[string]any{})
	keys, _ := index["keys"].([]any)
	if len(keys) < 5 {
		t.Fatalf("help lists %v", index)
	}
	var names []string
	for _, k := range keys {
		names = append(names, k.(string))
	}
	sort.Strings(names)
	for _, k := range append(names, "") {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_help", Arguments: map[string]any{"key": k}})
		if err != nil || res.IsError {
			t.Fatalf("help %q: %v %v", k, err, res)
		}
		text := res.Content[0].(*sdk.TextContent).Text
		if leak := restVocabulary.FindString(text); leak != "" {
			t.Errorf("help %q speaks REST (%q): %s", k, leak, text)
		}
		if k == "guide" && !strings.Contains(text, "sync_read_context") {
			t.Errorf("the guide names no MCP tool: %s", text)
		}
	}
}

// The goldens hold a result's words, not the moment it was taken: the
// same result a second later normalises to the same text (a loom memory
// line cut short after "59s left" failed CI when it read "1m0s left").
func TestNormaliseTimes(t *testing.T) {
	for _, tc := range [][2]string{
		{`✗ branch 1 is alice's turn until 12:00:01 (1m0s le…`, `✗ branch 1 is alice's turn until 12:00:02 (59s lef…`},
		{`your turn (1m0s left)`, `your turn (59.5s left)`},
		{`held (1h2m3s…`, `held (4s…`},
		{`at 2026-11-26T15:39:38Z, 3 s ago`, `at 2026-11-26T15:40:38.5+01:00, 17 s ago`},
	} {
		a, b := normalise(tc[0]), normalise(tc[1])
		if a != b {
			t.Errorf("the same text a moment apart normalises to %q and %q", a, b)
		}
	}
}
