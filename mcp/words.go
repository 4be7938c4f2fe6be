package mcp

import "github.com/syncsubstrate/sync/substrate/errs"

// Words are MCP's vocabulary: a step is the tool call that makes it, with
// its arguments. Direct state writes have no tool (state changes through
// actions), so that step has no words here.
var Words errs.Words = words{}

type words struct{}

// ResultLimit: see MaxResultChars (help.ResultLimiter in substrate/help).
func (words) ResultLimit() (int, int) { return MaxResultChars, MaxContextBytes }

func (words) Say(s errs.Step) string {
	switch s.Op {
	case opCall:
		tool, _ := s.Args["tool"].(string)
		args, _ := s.Args["args"].(map[string]any)
		if len(args) == 0 {
			return tool + " {}"
		}
		return errs.SayCall(tool, errs.Step{Args: args}, "")
	case errs.OpReadContext:
		return errs.SayCall("sync_read_context", s, "room")
	case errs.OpWait:
		return errs.SayCall("sync_wait", s, "room")
	case errs.OpHelp:
		return errs.SayCall("sync_help", s, "room")
	case errs.OpSearch:
		return errs.SayCall("sync_search", s, "room")
	case errs.OpEval:
		return errs.SayCall("sync_eval_cel", s, "room")
	case errs.OpInvoke:
		return errs.SayCall("sync_invoke_action", s, "")
	case errs.OpJoin:
		return errs.SayCall("sync_embody", s, "room")
	case errs.OpCreateRoom:
		return errs.SayCall("sync_create_room", s, "")
	case errs.OpRegisterAction:
		return errs.SayCall("sync_register_action", s, "")
	case errs.OpRegisterView:
		return errs.SayCall("sync_register_view", s, "")
	case errs.OpWriteState:
		return ""
	case errs.OpShareRoom:
		return "ask an owner of " + s.Room + " to share it with you (they call " + errs.SayCall("sync_share_room", s, "room") + ")"
	case errs.OpReauthorize:
		out := "the user re-authorizes this integration in the client's settings (disconnect, connect again) and ticks " + s.Room + " on the consent screen"
		if s.Args["allow_shared"] == true {
			out += `, or allows "new rooms shared with me"`
		}
		return out
	}
	return errs.Plain.Say(s)
}
