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
	c := *e
	say := func(tool string, args map[string]any) error {
		c.Next = &errs.Step{Op: opCall, Args: map[string]any{"tool": tool, "args": args}}
		return &c
	}
	room := ""
	if sess != nil {
		room = sess.RoomID
	}
	switch {
	case e.Details["did_you_mean"] != nil && e.Code == errs.InvalidField:
		field, _ := e.Details["field"].(string)
		near, _ := e.Details["did_you_mean"].(string)
		var m map[string]any
		if json.Unmarshal(args, &m) != nil || field == "" || near == "" {
			return err
		}
		v := m[field]
		delete(m, field)
		if _, taken := m[near]; !taken {
			m[near] = v
			return say(tool, m)
		}
	case e.Code == errs.ScopeDenied && tool == "sync_register_action" || e.Code == errs.Forbidden && tool == "sync_embody":
		// The same call in the caller's own scope, or as its own agent.
		var m map[string]any
		if json.Unmarshal(args, &m) == nil {
			drop := map[string]string{"sync_register_action": "scope", "sync_embody": "agent"}[tool]
			if _, ok := m[drop]; ok {
				delete(m, drop)
				return say(tool, m)
			}
		}
		return say("sync_lobby", map[string]any{})
	case e.Code == errs.InvalidField && e.Details["gave"] != nil && e.Details["field"] == "condition":
		// What the condition gives, to compare it with something.
		var m map[string]any
		if json.Unmarshal(args, &m) == nil {
			args := map[string]any{"expr": m["condition"]}
			if room, ok := m["room"]; ok {
				args["room"] = room
			}
			return say("sync_eval_cel", args)
		}
	case tool == "sync_loom" && (e.Code == errs.ReadOnlyToken || e.Code == errs.AgentNotFound || e.Code == lobby.NotEmbodied || e.Details["needs"] == "agent"):
		// The loom's help does not make an agent: embodying one does,
		// where the connection may act in the room.
		var m map[string]any
		_ = json.Unmarshal(args, &m)
		if r, ok := m["room"].(string); ok && r != "" {
			room = r
		}
		if room != "" && sess != nil && roomdir.LevelRank(sess.Level(room)) >= roomdir.LevelRank("write") {
			return say("sync_embody", map[string]any{"room": room})
		}
		return say("sync_lobby", map[string]any{})
	case tool == "sync_loom" && e.Code != errs.RoomNotFound && e.Code != errs.ScopeDenied:
		// Reaching the room is the lobby's (the last case), not the
		// loom's help.
		return say("sync_loom", map[string]any{"commands": "→ help"})
	case e.Code == errs.InvalidField && e.Details["field"] != nil:
		// The same call without the optional argument that was wrong:
		// its default applies.
		field, _ := e.Details["field"].(string)
		var m map[string]any
		if json.Unmarshal(args, &m) != nil {
			return err
		}
		if _, given := m[field]; !given || requiredArg(tool, field) {
			return err
		}
		delete(m, field)
		return say(tool, m)
	case tool == "sync_send_message" && e.Code == errs.InvalidParam && (e.Details["param"] == "to" || e.Details["param"] == "reply_to"):
		// The same message to the agent, or in reply to the message,
		// nearest what was given; else where the agents or the
		// messages are listed (not the actions: it is no action's
		// parameter a model got wrong).
		param := e.Details["param"].(string)
		var m map[string]any
		if near, ok := e.Details["did_you_mean"]; ok && json.Unmarshal(args, &m) == nil {
			switch v := m[param].(type) {
			case []any:
				for i, x := range v {
					if x == e.Details["not_agent"] {
						v[i] = near
					}
				}
			default:
				m[param] = near
			}
			return say(tool, m)
		}
		return say("sync_read_context", map[string]any{"only": map[string]string{"to": "agents", "reply_to": "messages"}[param]})
	case e.Code == errs.CELError:
		return say("sync_help", map[string]any{"key": "expressions"})
	case (e.Code == errs.InvalidParam || e.Code == errs.ActionDisabled) && room != "":
		return say("sync_read_context", map[string]any{"only": "actions", "depth": "full"})
	case e.Code == lobby.NotEmbodied && room == "":
		return say("sync_lobby", map[string]any{})
	case e.Code == lobby.NotEmbodied:
		c.Next = &errs.Step{Op: errs.OpJoin, Room: room}
		return &c
	case e.Code == errs.ScopeDenied || e.Code == errs.Forbidden || e.Code == errs.RoomNotFound:
		return say("sync_lobby", map[string]any{})
	}
	return err
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
