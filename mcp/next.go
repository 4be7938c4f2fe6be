package mcp

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/lobby/roomdir"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// opCall is a step only MCP has words for: a tool call, Args["tool"] with
// Args["args"].
const opCall errs.Op = "mcp_call"

// withNext gives a refused call the call that moves the model on, when the
// domain named none: the same call with a misspelt argument corrected,
// the help on expressions after a CEL error, the actions with their
// parameters after a wrong one, the lobby (rooms and access) after a
// refusal of access. A model acts on a call better than on prose, and every
// such call is one that succeeds (TestConversationHints runs them).
func withNext(tool string, args json.RawMessage, sess *lobby.Session, err error) error {
	e := errs.From(err)
	if e.Next != nil || len(e.Options) > 0 || e.Code == errs.Internal || e.Code == errs.Unavailable {
		return err
	}
	f := refused{tool: tool, args: args, sess: sess, e: e}
	if sess != nil {
		f.room = sess.RoomID
	}
	step := f.next()
	if step == nil {
		return err
	}
	c := *e
	c.Next = step
	return &c
}

// refused is one refused call, as withNext sees it.
type refused struct {
	tool string
	args json.RawMessage
	sess *lobby.Session
	room string // the session's room, "" when none
	e    *errs.Error
}

// callStep is the step that makes the tool call.
func callStep(tool string, args map[string]any) *errs.Step {
	return &errs.Step{Op: opCall, Args: map[string]any{"tool": tool, "args": args}}
}

// next is the refused call's next step, nil when none. The first kind of
// step whose case matches decides, even when it finds no step: a
// corrected call first, then the loom's, the message's, and last the one
// that the error's code names.
func (f *refused) next() *errs.Step {
	for _, kind := range []func() (*errs.Step, bool){f.argStep, f.loomStep, f.messageStep} {
		if step, matched := kind(); matched {
			return step
		}
	}
	return f.codeStep()
}

// argStep repairs the call's arguments: a misspelt name corrected, the
// caller's own scope or agent, what a condition gives.
func (f *refused) argStep() (*errs.Step, bool) {
	e, tool := f.e, f.tool
	switch {
	case e.Details["did_you_mean"] != nil && e.Code == errs.InvalidField:
		return f.renamedField(), true
	case e.Code == errs.ScopeDenied && tool == "sync_register_action" || e.Code == errs.Forbidden && tool == "sync_embody":
		return f.ownScope(), true
	case e.Code == errs.InvalidField && e.Details["gave"] != nil && e.Details["field"] == "condition":
		return f.conditionGives(), true
	}
	return nil, false
}

func (f *refused) renamedField() *errs.Step {
	field, _ := f.e.Details["field"].(string)
	near, _ := f.e.Details["did_you_mean"].(string)
	var m map[string]any
	if json.Unmarshal(f.args, &m) != nil || field == "" || near == "" {
		return nil
	}
	v := m[field]
	delete(m, field)
	if _, taken := m[near]; !taken {
		m[near] = v
		return callStep(f.tool, m)
	}
	return nil
}

// ownScope is the same call in the caller's own scope, or as its own agent.
func (f *refused) ownScope() *errs.Step {
	var m map[string]any
	if json.Unmarshal(f.args, &m) == nil {
		drop := map[string]string{"sync_register_action": "scope", "sync_embody": "agent"}[f.tool]
		if _, ok := m[drop]; ok {
			delete(m, drop)
			return callStep(f.tool, m)
		}
	}
	return callStep("sync_lobby", map[string]any{})
}

// conditionGives is what the condition gives, to compare it with something.
func (f *refused) conditionGives() *errs.Step {
	var m map[string]any
	if json.Unmarshal(f.args, &m) != nil {
		return nil
	}
	args := map[string]any{"expr": m["condition"]}
	if room, ok := m["room"]; ok {
		args["room"] = room
	}
	return callStep("sync_eval_cel", args)
}

// loomStep is the loom's: embodying an agent, or the loom's help.
func (f *refused) loomStep() (*errs.Step, bool) {
	e := f.e
	if f.tool != "sync_loom" {
		return nil, false
	}
	switch {
	case e.Code == errs.ReadOnlyToken || e.Code == errs.AgentNotFound || e.Code == lobby.NotEmbodied || e.Details["needs"] == "agent":
		// The loom's help does not make an agent: embodying one does,
		// where the connection may act in the room.
		var m map[string]any
		_ = json.Unmarshal(f.args, &m)
		room := f.room
		if r, ok := m["room"].(string); ok && r != "" {
			room = r
		}
		if room != "" && f.sess != nil && roomdir.LevelRank(f.sess.Level(room)) >= roomdir.LevelRank("write") {
			return callStep("sync_embody", map[string]any{"room": room}), true
		}
		return callStep("sync_lobby", map[string]any{}), true
	case e.Code != errs.RoomNotFound && e.Code != errs.ScopeDenied:
		// Reaching the room is the lobby's (the last case), not the
		// loom's help.
		return callStep("sync_loom", map[string]any{"commands": "→ help"}), true
	}
	return nil, false
}

// messageStep drops an optional argument that was wrong (its default
// applies), or corrects a message's addressee.
func (f *refused) messageStep() (*errs.Step, bool) {
	e := f.e
	switch {
	case e.Code == errs.InvalidField && e.Details["field"] != nil:
		return f.droppedArg(), true
	case f.tool == "sync_send_message" && e.Code == errs.InvalidParam && (e.Details["param"] == "to" || e.Details["param"] == "reply_to"):
		return f.nearestAddressee(), true
	}
	return nil, false
}

// droppedArg is the same call without the optional argument that was
// wrong: its default applies.
func (f *refused) droppedArg() *errs.Step {
	field, _ := f.e.Details["field"].(string)
	var m map[string]any
	if json.Unmarshal(f.args, &m) != nil {
		return nil
	}
	if _, given := m[field]; !given || requiredArg(f.tool, field) {
		return nil
	}
	delete(m, field)
	return callStep(f.tool, m)
}

// nearestAddressee is the same message to the agent, or in reply to the
// message, nearest what was given; else where the agents or the messages
// are listed (not the actions: it is no action's parameter a model got
// wrong).
func (f *refused) nearestAddressee() *errs.Step {
	param := f.e.Details["param"].(string)
	var m map[string]any
	if near, ok := f.e.Details["did_you_mean"]; ok && json.Unmarshal(f.args, &m) == nil {
		switch v := m[param].(type) {
		case []any:
			for i, x := range v {
				if x == f.e.Details["not_agent"] {
					v[i] = near
				}
			}
		default:
			m[param] = near
		}
		return callStep(f.tool, m)
	}
	return callStep("sync_read_context", map[string]any{"only": map[string]string{"to": "agents", "reply_to": "messages"}[param]})
}

// codeStep is the step the error's code names: the help, the actions, the
// room to join, the lobby.
func (f *refused) codeStep() *errs.Step {
	e, room := f.e, f.room
	switch {
	case e.Code == errs.CELError:
		return callStep("sync_help", map[string]any{"key": "expressions"})
	case (e.Code == errs.InvalidParam || e.Code == errs.ActionDisabled) && room != "":
		return callStep("sync_read_context", map[string]any{"only": "actions", "depth": "full"})
	case e.Code == lobby.NotEmbodied && room == "":
		return callStep("sync_lobby", map[string]any{})
	case e.Code == lobby.NotEmbodied:
		return &errs.Step{Op: errs.OpJoin, Room: room}
	case e.Code == errs.ScopeDenied || e.Code == errs.Forbidden || e.Code == errs.RoomNotFound:
		return callStep("sync_lobby", map[string]any{})
	}
	return nil
}

// requiredArg reports whether tool requires the argument.
func requiredArg(tool, name string) bool {
	req, ok := requiredArgs()[tool]
	return !ok || slices.Contains(req, name)
}

var requiredArgs = sync.OnceValue(func() map[string][]string {
	out := map[string][]string{}
	for _, d := range tools() {
		if s, ok := d.def.InputSchema.(*jsonschema.Schema); ok {
			out[d.def.Name] = s.Required
		}
	}
	return out
})
