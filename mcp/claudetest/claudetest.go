// Package claudetest is a scripted Anthropic Messages API for driving the
// real Claude Code CLI (or any Messages API client) offline: point
// ANTHROPIC_BASE_URL at a Server, give it a script of model steps, and
// read back every request and the tool_result blocks the client sent, which
// are exactly what a model would have read.
//
// Only what Claude Code uses is served: POST /v1/messages (streamed as
// server-sent events in the Messages API's order, or one JSON message) and
// POST /v1/messages/count_tokens. Every other request is logged and
// answered 404.
package claudetest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Call is one tool_use block a step makes.
type Call struct {
	Name  string // the tool's name as the client lists it, e.g. "mcp__sync__sync_lobby"
	Input any    // marshalled to JSON as the tool's input; nil is {}
}

// Step is one model turn of the main loop: the tool calls to make (all in
// one message, stop_reason "tool_use"), or, with no calls, Text to end the
// turn with (stop_reason "end_turn").
type Step struct {
	Calls []Call
	Text  string
}

// Request is one HTTP request the server received.
type Request struct {
	Method, Path string
	Body         map[string]any // the decoded JSON body; nil when it was not JSON
	Main         bool           // a main-loop request: its tools include MCP tools or ToolSearch
	Step         int            // for a main-loop request, the step answered (-1 past the script)
}

// ToolResult is one tool_result block a client sent back, with the call
// it answers.
type ToolResult struct {
	Step    int    // the step whose call this answers
	Call    Call   // the call (Input as decoded from the script's JSON)
	ID      string // tool_use_id
	Text    string // the content as the model reads it: a string, or its text blocks joined
	IsError bool
	Raw     any // the content exactly as sent
}

// Server is the scripted API. Its methods are safe to call while a client
// is talking to it.
type Server struct {
	URL string

	mu       sync.Mutex
	script   []Step
	requests []Request
	results  []ToolResult
	calls    map[string]Call // tool_use id → call
	seen     map[string]bool // tool_use ids whose results were recorded
	runs     int             // scripts set so far, to keep tool_use ids unique across runs
}

// New starts a Server on loopback, stopped when the test ends.
func New(t testing.TB, script ...Step) *Server {
	s := &Server{script: script, calls: map[string]Call{}, seen: map[string]bool{}}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// SetScript replaces the script for the next conversation (a new
// `claude -p` run starts again at step 0).
func (s *Server) SetScript(script ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = script
	s.runs++
}

// Requests returns every request received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ToolResults returns every tool_result block received so far, each once,
// in the order received.
func (s *Server) ToolResults() []ToolResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ToolResult(nil), s.results...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	req := Request{Method: r.Method, Path: r.URL.Path, Body: body, Step: -1}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		s.log(req)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"input_tokens":%d}`, len(raw)/4+1)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		s.messages(w, req)
	default:
		s.log(req)
		http.NotFound(w, r)
	}
}

func (s *Server) log(req Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, req)
}

// messages answers one Messages API request: a main-loop request with the
// script's step (the number of assistant messages so far), a side request
// (a title, a summary: no MCP tools) with a short text.
func (s *Server) messages(w http.ResponseWriter, req Request) {
	msgs, _ := req.Body["messages"].([]any)
	req.Main = isMain(req.Body)
	var step Step
	s.mu.Lock()
	if req.Main {
		n := 0
		for _, m := range msgs {
			if mm, _ := m.(map[string]any); mm["role"] == "assistant" {
				n++
			}
		}
		s.record(msgs, n)
		if n < len(s.script) {
			req.Step, step = n, s.script[n]
		} else {
			step = Step{Text: "Done."}
		}
	} else {
		step = Step{Text: "Scripted session"}
	}
	var blocks []map[string]any
	for i, c := range step.Calls {
		id := fmt.Sprintf("toolu_%d_%d_%d", s.runs, req.Step, i)
		in, _ := json.Marshal(c.Input)
		if c.Input == nil {
			in = []byte("{}")
		}
		var decoded any
		_ = json.Unmarshal(in, &decoded)
		s.calls[id] = Call{Name: c.Name, Input: decoded}
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": id, "name": c.Name, "input": json.RawMessage(in)})
	}
	if len(step.Calls) == 0 {
		blocks = append(blocks, map[string]any{"type": "text", "text": step.Text})
	}
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	stop := "end_turn"
	if len(step.Calls) > 0 {
		stop = "tool_use"
	}
	model, _ := req.Body["model"].(string)
	msgID := fmt.Sprintf("msg_%d", len(s.Requests()))
	if stream, _ := req.Body["stream"].(bool); !stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 10, "output_tokens": 10}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	event := func(name string, data any) {
		b, _ := json.Marshal(data)
		_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
	}
	event("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": msgID, "type": "message", "role": "assistant",
		"model": model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": map[string]int{"input_tokens": 10, "output_tokens": 1}}})
	for i, b := range blocks {
		if b["type"] == "tool_use" {
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			// The input arrives in pieces, as a model streams it.
			in := string(b["input"].(json.RawMessage))
			for len(in) > 0 {
				n := min(len(in), 64)
				event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": in[:n]}})
				in = in[n:]
			}
		} else {
			event("content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}})
			event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": b["text"]}})
		}
		event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": 10}})
	event("message_stop", map[string]any{"type": "message_stop"})
}

// record keeps the tool_result blocks of msgs not seen before. Called
// with s.mu held.
func (s *Server) record(msgs []any, step int) {
	for _, m := range msgs {
		mm, _ := m.(map[string]any)
		content, _ := mm["content"].([]any)
		for _, c := range content {
			b, _ := c.(map[string]any)
			if b["type"] != "tool_result" {
				continue
			}
			id, _ := b["tool_use_id"].(string)
			if s.seen[id] {
				continue
			}
			s.seen[id] = true
			isErr, _ := b["is_error"].(bool)
			stepOf := step - 1
			fmt.Sscanf(id, "toolu_%d_%d_", new(int), &stepOf)
			s.results = append(s.results, ToolResult{Step: stepOf, Call: s.calls[id], ID: id, Text: Text(b["content"]), IsError: isErr, Raw: b["content"]})
		}
	}
}

// Text is a tool_result's content as the model reads it: the string, or
// the text of its text blocks joined with newlines.
func Text(content any) string {
	switch c := content.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			if pm, _ := p.(map[string]any); pm["type"] == "text" {
				s, _ := pm["text"].(string)
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// isMain tells the main loop's requests from side calls: only the main
// loop offers MCP tools (or ToolSearch, which stands for them while they
// are deferred).
func isMain(body map[string]any) bool {
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		tm, _ := t.(map[string]any)
		name, _ := tm["name"].(string)
		if strings.HasPrefix(name, "mcp__") || name == "ToolSearch" {
			return true
		}
	}
	return false
}
