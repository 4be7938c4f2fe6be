// The audit scrubber (?at=seq): the room as it was at a past seq, on a
// page of its own so that nothing on it shows the present as if it were
// the past. It shows the header at that seq, the state (with the agents
// and actions the state held then), what happened at that seq, the
// difference from now, and steps back and forth (played by the script).
// Room authority only (trajectory.Replay).

package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/activity"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/trajectory"
)

// diffRow is one entry that differs between the past seq and now; for
// two objects, Fields says which of their fields differ (then Then and
// Now hold just those).
type diffRow struct {
	Scope, Key string
	Then, Now  json.RawMessage // nil: absent
	Fields     []string
}

// pastAction is an action's definition as the past held it.
type pastAction struct {
	ID          string `json:"-"`
	Description string `json:"description"`
	If          string `json:"if"`
	Enabled     string `json:"enabled"`
}

// pastPage serves /rooms/{id}?at=seq.
func (wb *Web) pastPage(w http.ResponseWriter, r *http.Request, p *substrate.Principal, roomID, who, access, viewToken, at string) {
	data, err := wb.past(r.Context(), p, roomID, at)
	if err != nil {
		wb.fail(w, r, err)
		return
	}
	data["Who"], data["ViewToken"] = who, viewToken
	data["Playing"] = r.URL.Query().Get("play") != ""
	wb.render(w, r, http.StatusOK, "roompast", data, viewToken != "")
}

func (wb *Web) past(ctx context.Context, p *substrate.Principal, roomID, at string) (map[string]any, error) {
	seq, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return nil, errs.New(errs.InvalidField, "at=%q is not a seq", at).WithHint("pick a seq between 1 and the room's current seq")
	}
	svc := wb.opt.Substrate
	room, err := svc.GetRoom(ctx, p, roomID)
	if err != nil {
		return nil, err
	}
	if seq < 1 || seq > room.Seq {
		return nil, errs.New(errs.InvalidField, "at=%d is not a seq of this room", seq).WithHint("pick a seq between 1 and %d, the room's current seq", room.Seq)
	}
	then, err := trajectory.Replay(ctx, svc, p, roomID, seq)
	if err != nil {
		return nil, err
	}
	now, err := svc.ReadState(ctx, p, roomID, substrate.ReadQuery{Disabled: true})
	if err != nil {
		return nil, err
	}
	var step *trajectory.Step
	if err := trajectory.Stream(ctx, svc, p, roomID, trajectory.Query{After: seq - 1, Limit: 1}, func(s *trajectory.Step) error {
		if s.Seq == seq {
			step = s
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var label string
	var meta map[string]any
	if json.Unmarshal(room.Meta, &meta) == nil {
		label, _ = meta["label"].(string)
	}
	data := map[string]any{
		"Room": room, "Label": label, "At": seq, "Seq": room.Seq, "Step": step,
		"Scopes": byScope(then.Entries), "More": then.More, "Truncated": then.Truncated,
		"Diff": diffState(then.Entries, now.Entries), "CanReplay": true,
	}
	if step != nil {
		// The step in the activity feed's words, at a time people read.
		at, _ := time.Parse(time.RFC3339Nano, step.TS)
		row := activityOf(activity.Activity{Seq: step.Seq, TS: at, By: step.By, Kind: step.Kind, Action: step.Action, OK: step.OK, Error: step.Error}, wordsOf(then.Entries, nil))
		data["Happened"] = row
		if step.Kind == "invoke" && len(step.Params) > 0 && string(step.Params) != "{}" {
			data["StepParams"] = step.Params
		}
	}
	if data["PastAgents"], err = activity.AgentsJoinedBy(ctx, svc, p, roomID, seq); err != nil {
		return nil, err
	}
	// The actions as they were defined then (the replayed _actions scope).
	var actions []pastAction
	for _, e := range then.Entries {
		if e.Scope != "_actions" {
			continue
		}
		a := pastAction{ID: e.Key}
		_ = json.Unmarshal(e.Value, &a)
		actions = append(actions, a)
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].ID < actions[j].ID })
	data["PastActions"] = actions
	if seq > 1 {
		data["Prev"] = seq - 1
	}
	if seq < room.Seq {
		data["Next"] = seq + 1
	}
	return data, nil
}

// diffState lists the entries that differ between then and now, by
// scope and key.
func diffState(then, now []substrate.Entry) []diffRow {
	type k struct{ s, k string }
	a, b := map[k]json.RawMessage{}, map[k]json.RawMessage{}
	for _, e := range then {
		a[k{e.Scope, e.Key}] = e.Value
	}
	for _, e := range now {
		b[k{e.Scope, e.Key}] = e.Value
	}
	var out []diffRow
	for key, v := range a {
		if w, ok := b[key]; !ok || !sameJSON(v, w) {
			out = append(out, fieldDiff(diffRow{Scope: key.s, Key: key.k, Then: v, Now: w}))
		}
	}
	for key, w := range b {
		if _, ok := a[key]; !ok {
			out = append(out, diffRow{Scope: key.s, Key: key.k, Now: w})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Scope != out[j].Scope {
			return out[i].Scope < out[j].Scope
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// sameJSON compares two JSON values by meaning (stored JSON may differ in
// spacing or key order).
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ra, _ := json.Marshal(x)
	rb, _ := json.Marshal(y)
	return bytes.Equal(ra, rb)
}

// fieldDiff narrows a changed object to the fields that changed.
func fieldDiff(d diffRow) diffRow {
	var a, b map[string]json.RawMessage
	if d.Then == nil || d.Now == nil || json.Unmarshal(d.Then, &a) != nil || json.Unmarshal(d.Now, &b) != nil {
		return d
	}
	then, now := map[string]json.RawMessage{}, map[string]json.RawMessage{}
	for k, v := range a {
		if w, ok := b[k]; !ok || !sameJSON(v, w) {
			then[k], now[k] = v, w
			d.Fields = append(d.Fields, k)
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok {
			now[k] = w
			d.Fields = append(d.Fields, k)
		}
	}
	sort.Strings(d.Fields)
	d.Then, _ = json.Marshal(then)
	d.Now, _ = json.Marshal(now)
	return d
}
