// Where participants stand in a tree: the ambient position, presence,
// moving, and the turn on a branch (its lease).

package loom

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// position computes the ambient metadata at node n.
func (r *loomRun) position(t *loomTree, n *Node) (*Position, error) {
	ps := &Position{Tree: t.ID, TreeName: t.Name, Node: n.ID, Depth: n.Depth, Branch: n.Branch}
	var err error
	if n.Parent > 0 {
		if ps.Siblings, err = r.count(treeScope(t.ID), "c:"+strconv.FormatInt(n.Parent, 10)+":"); err != nil {
			return nil, err
		}
	} else {
		ps.Siblings = 1
	}
	id := strconv.FormatInt(n.ID, 10)
	if ps.Annotations, err = r.count(treeScope(t.ID), "a:"+id+":"); err != nil {
		return nil, err
	}
	if ps.Links, err = r.count(treeScope(t.ID), "l:"+id+":"); err != nil {
		return nil, err
	}
	if ps.Others, err = r.presence(t); err != nil {
		return nil, err
	}
	ps.Ambient = fmt.Sprintf("⟨node:%d depth:%d siblings:%d annotations:%d links:%d⟩", n.ID, n.Depth, ps.Siblings, ps.Annotations, ps.Links)
	for _, o := range ps.Others {
		ps.Ambient += fmt.Sprintf(" ⟨%s %s active in branch:%s⟩", o.Kind, o.Actor, o.Branch)
	}
	return ps, nil
}

// presence lists the others active in tree t: the _loom.live scope holds
// only a few mutable entries.
func (r *loomRun) presence(t *loomTree) ([]Presence, error) {
	kvs, err := r.tx.List(substrate.ListQuery{Scope: scopeLoomLive, Prefix: "at:" + strconv.FormatInt(t.ID, 10) + ":"})
	if err != nil {
		return nil, err
	}
	var out []Presence
	for _, kv := range kvs {
		var pr Presence
		if json.Unmarshal(kv.Value, &pr) != nil || pr.Actor == r.actor || r.now.Sub(pr.At) > r.l.opt.PresenceWindow {
			continue
		}
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b Presence) int { return strings.Compare(a.Actor, b.Actor) })
	return out, nil
}

// moveTo records that the caller is now at node n of tree t.
func (r *loomRun) moveTo(t *loomTree, n *Node) {
	r.newPos = &loomPos{Tree: t.ID, Node: n.ID}
	if !r.tx.Writes() {
		return
	}
	r.putTimed(scopeLoomLive, "at:"+strconv.FormatInt(t.ID, 10)+":"+r.actor,
		Presence{Actor: r.actor, Kind: r.kind, Branch: n.Branch, Node: n.ID, At: r.now}, r.l.opt.PresenceWindow)
}

// lease takes (or extends) the caller's turn on branch b of tree t, or
// says who holds it and until when.
func (r *loomRun) lease(t *loomTree, b string) error {
	key := "lease:" + strconv.FormatInt(t.ID, 10) + ":" + b
	var l loomLease
	ok, err := r.get(scopeLoomLive, key, &l)
	if err != nil {
		return err
	}
	if ok && l.Holder != r.actor && l.Until.After(r.now) {
		left := l.Until.Sub(r.now).Round(time.Second)
		return loomErr(errs.BranchHeld, "branch %s is %s's turn until %s (%s left)", b, l.Holder, l.Until.UTC().Format("15:04:05Z"), left).
			WithHint("wait for them to yield, or write elsewhere: → branch from <node> starts a branch of your own").
			With("holder", l.Holder).With("until", l.Until.UTC()).With("branch", b)
	}
	r.putTimed(scopeLoomLive, key, loomLease{Holder: r.actor, Until: r.now.Add(r.l.opt.LeaseTTL)}, r.l.opt.LeaseTTL)
	return nil
}
