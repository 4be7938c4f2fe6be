package claudetest

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	raw, _ := json.Marshal(body)
	res, err := http.Post(url+"/v1/messages", "application/json", strings.NewReader(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// A main-loop request gets its step streamed in the Messages API's event
// order, the tool input in pieces that join to the script's JSON; the next
// request's tool_result is reported with the call it answers; a side call
// gets text.
func TestScriptedStream(t *testing.T) {
	s := New(t, Step{Calls: []Call{{Name: "mcp__sync__sync_lobby", Input: map[string]any{"q": strings.Repeat("x", 200)}}}}, Step{Text: "bye"})
	tools := []any{map[string]any{"name": "ToolSearch"}}
	res := post(t, s.URL, map[string]any{"model": "m", "stream": true, "tools": tools, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	var events []string
	var input strings.Builder
	var id string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			events = append(events, name)
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			var d struct {
				Delta struct {
					PartialJSON string `json:"partial_json"`
				}
				ContentBlock struct{ ID string } `json:"content_block"`
			}
			_ = json.Unmarshal([]byte(data), &d)
			input.WriteString(d.Delta.PartialJSON)
			if d.ContentBlock.ID != "" {
				id = d.ContentBlock.ID
			}
		}
	}
	got := strings.Join(events, " ")
	want := "message_start content_block_start content_block_delta content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if got != want {
		t.Fatalf("events %s\nwant %s", got, want)
	}
	var in map[string]string
	if err := json.Unmarshal([]byte(input.String()), &in); err != nil || len(in["q"]) != 200 {
		t.Fatalf("streamed input %q: %v", input.String(), err)
	}
	post(t, s.URL, map[string]any{"model": "m", "stream": false, "tools": tools, "messages": []any{
		map[string]any{"role": "user", "content": "hi"},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "is_error": true,
			"content": []any{map[string]any{"type": "text", "text": "nope"}}}}},
	}})
	side := post(t, s.URL, map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "title?"}}})
	var msg struct {
		Content    []struct{ Text string }
		StopReason string `json:"stop_reason"`
	}
	if err := json.NewDecoder(side.Body).Decode(&msg); err != nil || msg.StopReason != "end_turn" || msg.Content[0].Text == "" {
		t.Fatalf("side call: %+v %v", msg, err)
	}
	rs := s.ToolResults()
	if len(rs) != 1 || rs[0].Step != 0 || rs[0].Call.Name != "mcp__sync__sync_lobby" || rs[0].Text != "nope" || !rs[0].IsError {
		t.Fatalf("tool results %+v", rs)
	}
	reqs := s.Requests()
	if len(reqs) != 3 || !reqs[0].Main || reqs[0].Step != 0 || reqs[1].Step != 1 || reqs[2].Main {
		t.Fatalf("requests %+v", reqs)
	}
}
