package substrate

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/syncsubstrate/sync/substrate/defs"
	"github.com/syncsubstrate/sync/substrate/envelope"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/exprbudget"
	"github.com/syncsubstrate/sync/substrate/help"
)

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
		if !contains(keys, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// Help returns one help key (the room's override when it has one), or the
// list of keys when key is empty.
func (s *Service) Help(ctx context.Context, p *Principal, roomID, key string) (*HelpResult, error) {
	if err := s.requireRoom(ctx, p, roomID); err != nil {
		return nil, err
	}
	ctx, done, err := s.work(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	defer done()
	rc, err := s.readCtx(ctx, p, roomID, false)
	if err != nil {
		return nil, err
	}
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
