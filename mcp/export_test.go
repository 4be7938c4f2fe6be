package mcp

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every tool result any test of this package produces is checked against
// the one rule: a success's structured content fits the tool's output
// schema, and an error has none. TestMain fails the run on a breach.
var (
	breachesMu sync.Mutex
	breaches   []string
	resolved   sync.Map // tool name → *jsonschema.Resolved
)

func init() {
	checkResult = func(def *sdk.Tool, res *sdk.CallToolResult) {
		breach := func(format string, args ...any) {
			breachesMu.Lock()
			defer breachesMu.Unlock()
			breaches = append(breaches, def.Name+": "+fmt.Sprintf(format, args...))
		}
		if res.IsError {
			if res.StructuredContent != nil {
				breach("an error with structured content")
			}
			return
		}
		r, ok := resolved.Load(def.Name)
		if !ok {
			raw, _ := json.Marshal(def.OutputSchema)
			var s jsonschema.Schema
			if err := json.Unmarshal(raw, &s); err != nil {
				breach("output schema: %v", err)
				return
			}
			rs, err := s.Resolve(nil)
			if err != nil {
				breach("output schema: %v", err)
				return
			}
			r, _ = resolved.LoadOrStore(def.Name, rs)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var v any
		_ = json.Unmarshal(raw, &v)
		if err := r.(*jsonschema.Resolved).Validate(v); err != nil {
			breach("result does not fit the output schema: %v\n%.500s", err, raw)
		}
	}
}

// ResultBreaches reports the results that broke the rule so far.
func ResultBreaches() []string {
	breachesMu.Lock()
	defer breachesMu.Unlock()
	return append([]string(nil), breaches...)
}

// SetMaxOpenTasks sets the per-grant bound on working tasks until restore.
func SetMaxOpenTasks(n int) (restore func()) {
	old := maxOpenTasks
	maxOpenTasks = n
	return func() { maxOpenTasks = old }
}

// SetMaxRoomTasks sets the per-room bound on working tasks until restore.
func SetMaxRoomTasks(n int) (restore func()) {
	old := maxRoomTasks
	maxRoomTasks = n
	return func() { maxRoomTasks = old }
}

// SetTaskLease sets how long a task's lease lasts until restore.
func SetTaskLease(d time.Duration) (restore func()) {
	old := taskLease
	taskLease = d
	return func() { taskLease = old }
}
