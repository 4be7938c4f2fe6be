package mcp

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// valueLimit is the most one value (an evaluation's, an invocation's
// result, a view's) takes of a result before it is paged: the rest of
// MaxResultChars is the result's frame and a text rendering longer than
// the JSON.
const valueLimit = 36_000

// pageValue returns v, or when its JSON is past valueLimit its size, a
// preview and the evaluation of its first page: a string's substring, a
// list's slice, a map's keys. expr is the CEL that evaluates to v ("" when
// nothing does: then the preview is all).
func pageValue(v any, expr string) any {
	raw, err := json.Marshal(v)
	if err != nil || len(raw) <= valueLimit {
		return v
	}
	cut := min(500, len(raw))
	for cut > 0 && !utf8.RuneStart(raw[cut]) {
		cut--
	}
	out := map[string]any{"_truncated": true, "bytes": len(raw), "preview": string(raw[:cut]) + "…"}
	if expr == "" {
		return out
	}
	eval := func(e string) string { return Words.Say(errs.Step{Op: errs.OpEval, Args: map[string]any{"expr": e}}) }
	in := "(" + expr + ")"
	// A page takes half the limit, so that escaping cannot push it past.
	switch x := v.(type) {
	case string:
		n := valueLimit / 4
		out["chars"] = utf8.RuneCountInString(x)
		out["next"] = eval(fmt.Sprintf("%s.substring(0, %d)", in, n))
		out["pages"] = fmt.Sprintf("%s.substring(i, i + %d) for i = 0, %d, … up to size(%s)", in, n, n, in)
	case []any:
		n, used := 0, 0
		for _, e := range x {
			b, _ := json.Marshal(e)
			if used+len(b)+1 > valueLimit/2 && n > 0 {
				break
			}
			n, used = n+1, used+len(b)+1
		}
		out["items"] = len(x)
		out["next"] = eval(fmt.Sprintf("%s.slice(0, %d)", in, n))
		out["pages"] = fmt.Sprintf("%s.slice(i, min(i + %d, size(%s))) for i = 0, %d, …; a page still too large comes back paged", in, n, in, n)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		shown, used := keys[:0:0], 0
		for _, k := range keys {
			if used+len(k)+4 > valueLimit/4 {
				break
			}
			shown, used = append(shown, k), used+len(k)+4
		}
		out["keys"] = len(keys)
		out["first_keys"] = shown
		out["next"] = eval(fmt.Sprintf("%s[%s]", in, strconv.Quote(keys[0])))
		out["pages"] = fmt.Sprintf("one key at a time: %s[\"<key>\"]; the keys after one: %s.filter(k, k > \"<key>\").sort()", in, in)
	}
	return out
}

// tooLarge is the result of a call whose answer, for all the budgets
// above, is still past MaxResultChars: an error the model can act on
// rather than a preview it cannot read on from.
func tooLarge(tool string, size int, readOnly bool) *sdk.CallToolResult {
	e := errs.New(errs.ValueTooLarge, "the result of %s is %d characters, past the %d a tool result holds", tool, size, MaxResultChars).
		WithHint("narrow the call (only, prefix, messages_limit; a smaller expression) or read page by page, as sync_help key context_shaping says")
	if !readOnly {
		e = e.With("applied", "the call's changes were made; only its result is left out")
	}
	return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: Text(errorJSON(e.In(Words).Body()))}}}
}

// resultSize is the larger of a result's text and its structured JSON.
func resultSize(res *sdk.CallToolResult) int {
	n := 0
	for _, c := range res.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			n += len(t.Text)
		}
	}
	if raw, ok := res.StructuredContent.(json.RawMessage); ok {
		n = max(n, len(raw))
	}
	return n
}
