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
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) { replay(t, file) })
	}
}

func replay(t *testing.T, file string) {
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
	if changed && updating() {
		if err := os.WriteFile(file, txtar.Format(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
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
		x = left.ReplaceAllString(x, "(<left>)")
		return ago.ReplaceAllString(x, "<ago>")
	}
	return v
}

var (
	timestamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	ago       = regexp.MustCompile(`\b\d+ ?(ms|s|m|h|d) ago\b`)
	clock     = regexp.MustCompile(`\b\d\d:\d\d:\d\d(Z|\b)`) // the loom's action trace and leases
	left      = regexp.MustCompile(`\(((\d+h)?(\d+m)?[\d.]+m?s) left\)`)
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
