package rest_test

import (
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/substrate/rest"
)

// The REST API words the steps it suggests as routes: errors' next, the
// context's _expand and budget cuts, and help. (MCP's words are tested
// in mcp's conversations.)
func TestRESTSpeaksRoutes(t *testing.T) {
	e := newEnv(t, rest.Options{})
	rm := e.room("words", nil)
	e.do("PUT", "/rooms/words/actions", rm.token, map[string]any{"id": "add_task", "writes": []any{map[string]any{"key": "k", "value": 1}}}).must(t, 201)

	miss := e.invoke(rm, rm.token, "add_tsak", nil).must(t, 404)
	if got := miss.str("next"); got != "POST /rooms/words/actions/add_task/invoke" {
		t.Errorf("action_not_found next = %q", got)
	}
	if miss.str("did_you_mean") != "add_task" {
		t.Errorf("no did_you_mean: %v", miss.body)
	}

	ctx := e.do("GET", "/rooms/words/context?only=views", rm.token, nil).must(t, 200)
	expand, _ := ctx.body["_context"].(map[string]any)["_expand"].([]any)
	if len(expand) != 1 || expand[0] != "GET /rooms/words/context?only=state,agents,actions,messages" {
		t.Errorf("_expand = %v", expand)
	}

	guide := e.do("GET", "/rooms/words/help?key=guide", rm.token, nil).must(t, 200)
	content, _ := guide.body["content"].(string)
	for _, want := range []string{"GET /rooms/:id/context", "POST /rooms/:id/actions/<id>/invoke", "PUT /rooms/:id/state"} {
		if !strings.Contains(content, want) {
			t.Errorf("guide lacks %q:\n%s", want, content)
		}
	}
	if strings.Contains(content, "sync_") {
		t.Errorf("the REST guide names MCP tools:\n%s", content)
	}
}
