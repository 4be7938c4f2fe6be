package substrate

import (
	"context"
	"encoding/json"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/exprbudget"
	"github.com/syncsubstrate/sync/substrate/help"
)

// The builtins an agent invokes like actions: the underscore ones
// (registering and deleting definitions, sending a message, acknowledging
// one), each in its own mutation under the same write path as an action,
// and help (below), which reads. What each is called, says and takes is
// package defs' (defs/builtins.go); what it does to the room is here.
var (
	builtinDescriptions = defs.BuiltinDescriptions
	builtinParams       = defs.BuiltinParams
)

// invokeBuiltin runs one of the underscore builtins.
func (s *Service) invokeBuiltin(ctx context.Context, p *Principal, roomID, id string, raw json.RawMessage, params map[string]any) (*InvokeResult, error) {
	res := &InvokeResult{Invoked: true, Action: id, Agent: p.Actor(), Params: params}
	var err error
	var seq int64
	switch id {
	case "_register_action":
		var def ActionDef
		if err = defs.StrictDecode(raw, &def); err == nil {
			var r *RegisterResult
			seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
				r, err = s.registerAction(m, def)
				return err
			})
			if err == nil {
				r.Seq, res.Builtin = seq, r
			}
		}
	case "_register_view":
		var def ViewDef
		if err = defs.StrictDecode(raw, &def); err == nil {
			var r *RegisterResult
			seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
				r, err = s.registerView(m, def)
				return err
			})
			if err == nil {
				r.Seq, res.Builtin = seq, r
				s.valueRegistered(ctx, p, roomID, def.ID, r)
			}
		}
	case "_delete_action", "_delete_view":
		var target string
		if target, err = defs.StringParam(id, params, "id"); err == nil {
			scope := scopeActions
			if id == "_delete_view" {
				scope = scopeViews
			}
			seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error { return s.deleteDef(m, scope, target) })
			res.Builtin = map[string]any{"deleted": true, "id": target}
		}
	case "_send_message":
		seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
			written, sent, audit, err := s.sendMessage(m, params)
			if err == nil {
				res.written, res.Builtin = []*Entry{written}, sent
				m.audit = map[string]any{"kind": "invoke", "action": id, "builtin": true, "agent": m.actor, "params": s.auditParams(params), "ok": true, "writes": audit}
			}
			return err
		})
	case "_ack":
		seq, err = s.mutate(ctx, p, roomID, func(m *mutation) error {
			out, audit, err := s.ack(m, params)
			if err == nil {
				res.Builtin = out
				if audit == nil {
					audit = []map[string]any{}
				}
				m.audit = map[string]any{"kind": "invoke", "action": id, "builtin": true, "agent": m.actor, "params": s.auditParams(params), "ok": true, "writes": audit}
			}
			return err
		})
	}
	if err != nil {
		s.auditFailure(ctx, p, roomID, id, params, err)
		return nil, err
	}
	res.fill(seq)
	return res, nil
}

// SentMessage is what _send_message answers: the message's own seq, the
// one number reply_to, _ack and the context's messages name it by (the
// invocation's seq is the room's, one or more past it: a thread or an ack
// record is written after the message).
type SentMessage struct {
	Seq int64 `json:"seq"`
	// Thread is the thread the message is in (its first message's seq),
	// 0 for none.
	Thread int64 `json:"thread,omitempty"`
}

// sendMessage appends a message from the caller to _messages.
func (s *Service) sendMessage(m *mutation, params map[string]any) (*Entry, *SentMessage, []map[string]any, error) {
	mp, err := defs.MessageParams(params, func(to []string) error { return s.checkRecipients(m, to) })
	if err != nil {
		return nil, nil, nil, err
	}
	msg := map[string]any{"from": m.actor, "kind": mp.Kind, "body": mp.Body}
	if mp.Directed {
		msg["to"] = mp.To
	}
	thread, err := s.threadFields(m, params, msg)
	if err != nil {
		return nil, nil, nil, err
	}
	ackTo, err := s.ackAsked(m, params, msg)
	if err != nil {
		return nil, nil, nil, err
	}
	raw, _ := json.Marshal(msg)
	written, audit, err := s.applyOps(m, []op{{Scope: ScopeMessages, Append: true, Value: raw}}, "builtin:_send_message")
	if err != nil {
		return nil, nil, nil, err
	}
	sent := *written[0].SortKey
	if err := s.recordThread(m, thread, sent, msg); err != nil {
		return nil, nil, nil, err
	}
	if ackTo != nil {
		if err := s.recordAck(m, sent, ackTo); err != nil {
			return nil, nil, nil, err
		}
	}
	if _, subject := msg["subject"]; thread == 0 && subject {
		thread = sent
	}
	return written[0], &SentMessage{Seq: sent, Thread: thread}, audit, nil
}

// ackAsked are the agents a message asks to acknowledge it when its
// params say "ack": true (its recipients, or every other agent), marking
// msg so; nil when it asks none.
func (s *Service) ackAsked(m *mutation, params, msg map[string]any) ([]string, error) {
	v, ok := params["ack"]
	if !ok || v == nil {
		return nil, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return nil, errs.New(errs.InvalidParam, "ack must be true or false").With("param", "ack").WithHint(`"ack": true asks the recipients to acknowledge with _ack`)
	}
	if !b {
		return nil, nil
	}
	to, _ := msg["to"].([]string)
	ackTo, err := s.ackRecipients(m, to)
	if err != nil {
		return nil, err
	}
	if len(ackTo) == 0 {
		return nil, errs.New(errs.InvalidParam, "ack: true asks nobody: the room has no other agent").With("param", "ack").WithHint("send it without ack, or once others have joined")
	}
	msg["ack"] = true
	return ackTo, nil
}

// checkRecipients refuses a directed message to an agent the room does
// not have: it would raise nobody's directed_unread, and the sender would
// never learn that it went nowhere (a misspelt or guessed agent id is the
// usual cause, so the error names the nearest one).
func (s *Service) checkRecipients(m *mutation, to []string) error {
	rows, err := m.tx.Query(m.ctx, `SELECT id FROM agents WHERE room_id = $1`, m.room)
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	sort.Strings(ids)
	for _, id := range to {
		if _, ok := slices.BinarySearch(ids, id); ok {
			continue
		}
		e := errs.New(errs.InvalidParam, "to names %q, which is not an agent of this room", id).With("param", "to").With("not_agent", id).
			WithHint("send to agents listed in the context's agents section; nothing was sent")
		listed := ids
		if len(listed) > 50 {
			listed = listed[:50]
		}
		e.With("agents", listed)
		if near := defs.Nearest(id, slices.Clone(ids)); near != "" {
			e.With("did_you_mean", near)
		}
		return e
	}
	return nil
}

// helpLimits are the limits and values the help texts quote.
func (s *Service) helpLimits() help.Limits {
	return help.Limits{
		MaxValueBytes: s.lim.MaxValueBytes, MaxValueDepth: s.lim.MaxValueDepth,
		ViewCostPerRead: s.lim.ViewCostPerRead, ActionCostPerRead: s.lim.ActionCostPerRead, EnabledCostPerRead: s.lim.EnabledCostPerRead,
		RoomCostPerSecond: s.lim.RoomCostPerSecond, GuestShare: exprbudget.GuestShare, ViewLinkShare: exprbudget.ViewLinkShare,
		GateMinCost: exprbudget.MinCost, GateQuantum: s.lim.GateQuantum, NowRecheck: s.wait.NowRecheck,
		Expr: s.cel.Limits(), MaxContextBytes: envelope.MaxBudget, VersionsRead: versionsRead, StandardLibrary: defs.StandardLibrary,
	}
}

func (s *Service) helpKeyList(room map[string]*srow) []string {
	keys := append([]string{}, help.Keys...)
	for k := range room {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// Help returns one help key (the room's override when it has one), or the
// list of keys when key is empty.
func (s *Service) Help(ctx context.Context, p *Principal, roomID, key string) (*HelpResult, error) {
	_, rc, done, err := s.admittedRead(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.helpFrom(rc, key)
}

func (s *Service) helpFrom(rc *roomCtx, key string) (*HelpResult, error) {
	room := map[string]*srow{}
	for k, r := range rc.snap.scopes[scopeHelp] {
		if r.timer.live(rc.now) {
			room[k] = r
		}
	}
	if key == "" {
		return &HelpResult{Keys: s.helpKeyList(room), Usage: words(rc.p).Say(errs.Step{Op: errs.OpHelp, Args: map[string]any{"key": "<key>"}}) +
			" reads one key; a room overrides a key with the state entry _help.<key>"}, nil
	}
	if r, ok := room[key]; ok {
		v := r.Version
		return &HelpResult{Key: key, Content: json.RawMessage(r.Value), Source: "room", Version: &v}, nil
	}
	if c, ok := help.Content(key, words(rc.p), s.helpLimits()); ok {
		var zero int64
		return &HelpResult{Key: key, Content: c, Source: "system", Version: &zero}, nil
	}
	return nil, errs.New(errs.HelpKeyNotFound, "no help key %q", key).With("available", s.helpKeyList(room)).
		WithHint("read one of the available keys; help without a key lists them")
}

// invokeHelp answers the help builtin, unless the room registered its own
// help action (then handled is false and the action runs). It admits on
// its own: Invoke answers help before it admits (read-only callers may
// invoke help, and nothing else).
func (s *Service) invokeHelp(ctx context.Context, p *Principal, roomID string, params map[string]any) (*InvokeResult, bool, error) {
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		if dead := s.deadRemembered(ctx, p); dead != nil {
			return nil, true, dead
		}
		return nil, true, err
	}
	defer done()
	rc, err := s.readCtx(ctx, p, roomID, false)
	if err != nil {
		return nil, true, err
	}
	if a := rc.snap.actions["help"]; a != nil && a.r.timer.live(rc.now) {
		return nil, false, nil
	}
	key, _ := params["key"].(string)
	if v, ok := params["key"]; ok && key == "" && v != nil {
		return nil, true, errs.New(errs.InvalidParam, "key must be a string").With("param", "key").WithHint("one of %v", help.Keys)
	}
	out, err := s.helpFrom(rc, key)
	if err != nil {
		return nil, true, err
	}
	return &InvokeResult{Invoked: true, Action: "help", Agent: p.Actor(), Params: params, Seq: rc.snap.seq, Builtin: out}, true, nil
}

// SystemHelp answers help outside any room, worded by w: the system keys
// only.
func (s *Service) SystemHelp(key string, w errs.Words) (*HelpResult, error) {
	return s.helpFrom(&roomCtx{p: &Principal{Words: w}, snap: &snapshot{scopes: map[string]map[string]*srow{}}}, key)
}
