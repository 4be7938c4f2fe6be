package rest

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Words are the REST API's vocabulary: a step is the route that makes it,
// with its query or body.
var Words errs.Words = words{}

type words struct{}

func (words) Say(s errs.Step) string {
	room := s.Room
	if room == "" {
		room = ":id"
	}
	base := "/rooms/" + room
	switch s.Op {
	case errs.OpReadContext:
		return "GET " + base + "/context" + query(s.Args)
	case errs.OpWait:
		return "GET " + base + "/wait" + query(s.Args)
	case errs.OpHelp:
		return "GET " + base + "/help" + query(s.Args)
	case errs.OpSearch:
		return "GET " + base + "/search" + query(s.Args)
	case errs.OpInvoke:
		action, _ := s.Args["action"].(string)
		if action == "" {
			action = ":action"
		}
		out := "POST " + base + "/actions/" + action + "/invoke"
		if p, ok := s.Args["params"]; ok {
			out += " " + body(map[string]any{"params": p})
		}
		return out
	case errs.OpEval:
		return "POST " + base + "/eval" + spaced(body(s.Args))
	case errs.OpJoin:
		return "POST " + base + "/agents"
	case errs.OpCreateRoom:
		args := map[string]any{}
		if id, ok := s.Args["room"]; ok {
			args["id"] = id
		}
		return "POST /rooms" + spaced(body(args))
	case errs.OpRegisterAction:
		return "PUT " + base + "/actions" + spaced(body(s.Args))
	case errs.OpRegisterView:
		return "PUT " + base + "/views" + spaced(body(s.Args))
	case errs.OpWriteState:
		return "PUT " + base + "/state" + spaced(body(s.Args))
	case errs.OpShareRoom:
		return "ask an owner of " + room + " to share it with you (on their account page)"
	case errs.OpReauthorize:
		return "authorize the OAuth client again and tick " + room + " on the consent screen"
	}
	return errs.Plain.Say(s)
}

// query writes args as a query string, sorted and unescaped: it is read
// by people and models, who escape when they send it.
func query(args map[string]any) string {
	if len(args) == 0 {
		return ""
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		b.WriteByte("?&"[min(i, 1)])
		b.WriteString(k + "=")
		if s, ok := args[k].(string); ok {
			b.WriteString(s)
		} else {
			raw, _ := json.Marshal(args[k])
			b.Write(raw)
		}
	}
	return b.String()
}

func body(args map[string]any) string {
	if len(args) == 0 {
		return ""
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args)
	return strings.TrimSpace(b.String())
}

func spaced(s string) string {
	if s == "" {
		return ""
	}
	return " " + s
}
