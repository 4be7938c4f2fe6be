// The loom's read rule: the caller's loom permissions, and what of the
// loom's scopes and an agent's loom memory a reader may see.

package loom

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// loadCaller reads the caller's permissions, kind and position.
func (r *loomRun) loadCaller() error {
	row := func(scope, key string) (json.RawMessage, bool, error) {
		var raw json.RawMessage
		ok, err := r.get(scope, key, &raw)
		return raw, ok, err
	}
	var err error
	if r.perms, r.kind, err = loomPermsOf(r.p, row); err != nil {
		return err
	}
	if r.p.Kind == substrate.KindAgent {
		if _, err := r.get(r.p.AgentID, "loom:pos", &r.stored); err != nil {
			return err
		}
		r.pos = r.stored
	}
	return nil
}

// loomPermsOf is p's loom permissions and kind (human or model), from its
// perm record (→ permit) read with row. The → commands and every other
// read path (loomReadRule) decide with it, so they cannot disagree.
func loomPermsOf(p *substrate.Principal, row substrate.RowFunc) (perms []string, kind string, err error) {
	switch {
	case p.Kind == substrate.KindRoom:
		return Permissions, "human", nil
	case p.ReadOnly() && p.ReadsAs() != "",
		p.Kind == substrate.KindAgent && p.AgentID == substrate.ScopeShared && p.ReadsAs() != "" && !strings.HasPrefix(p.ReadsAs(), "_"):
		// Read-only for an agent (ReadOnlyOf), a person: its permissions
		// that read. A communal definition registered by an agent
		// (roomCtx.stateAs), a model: that agent's permissions, never more
		// than the defaults of an agent "_shared" would give.
		agent, _, err := loomPermsOf(&substrate.Principal{Kind: substrate.KindAgent, RoomID: p.RoomID, AgentID: p.ReadsAs()}, row)
		if err != nil {
			return nil, "", err
		}
		kind := "model"
		if p.ReadOnly() {
			kind = "human"
		}
		return slices.DeleteFunc(slices.Clone(agent), func(x string) bool { return !slices.Contains(defaultLoomPerms, x) }), kind, nil
	case p.ReadOnly():
		return defaultLoomPerms, "human", nil
	}
	var rec struct {
		Perms []string `json:"perms"`
		Kind  string   `json:"kind"`
	}
	raw, ok, err := row(scopeLoom, "perm:"+p.AgentID)
	if err != nil {
		return nil, "", err
	}
	perms, kind = defaultLoomPerms, "model"
	if p.Person {
		kind = "human"
	}
	if ok {
		// Only → permit writes the record; one that does not decode
		// grants nothing rather than failing every read.
		if json.Unmarshal(raw, &rec) != nil {
			rec.Perms, rec.Kind = nil, ""
		}
		perms = rec.Perms
		if rec.Kind != "" {
			kind = rec.Kind
		}
	}
	// Room authority ("*", which an owner's embodied agent has) may do
	// everything; what writes is still an agent, a model unless marked
	// a person with → permit <agent> human or driven by one from the
	// web pages (substrate.Principal.Person).
	if p.Admin() {
		perms = Permissions
	}
	return perms, kind, nil
}

// loomReadRule is the loom's read rule: a _loom* scope is visible exactly
// when the → commands would show it (_loom.doc with doc_read, the other
// _loom scopes with loom_aware), and an agent's operational memory (every
// loom:… key of its scope: its thinking, trace, pins, stashes) only to
// the agent and room authority: people observe models' thinking; other agents, view links
// and observers do not.
type loomReadRule struct{}

func (loomReadRule) Reader(p *substrate.Principal, row substrate.RowFunc) (substrate.Reader, error) {
	perms, _, err := loomPermsOf(p, row)
	if err != nil {
		return substrate.Reader{}, err
	}
	aware, docs := slices.Contains(perms, PermAware), slices.Contains(perms, PermDocRead)
	thinker := func(scope string) bool { return p.Admin() || (p.Kind == substrate.KindAgent && p.AgentID == scope) }
	return substrate.Reader{
		Sees: func(scope, key string) bool {
			switch {
			case scope == scopeLoomDoc:
				return docs
			case isLoomScope(scope):
				return aware
			case key != "" && !strings.HasPrefix(scope, "_") && isMemory(key):
				return thinker(scope)
			}
			return true
		},
		HiddenPrefixes: func(scope string) []string {
			if strings.HasPrefix(scope, "_") || thinker(scope) {
				return nil
			}
			return []string{memoryPrefix}
		},
		Refusal: refusal,
		// What the reader sees depends on its permissions and, for
		// thoughts and traces, on whose they are: only room authority and
		// the agent itself (never a _shared registrant) read those.
		Key: shareKey(p, perms),
	}, nil
}

// refusal says, in the loom's words, why a read its rule refused is
// refused.
func refusal(scope, key string) error {
	switch {
	case key != "" && !strings.HasPrefix(scope, "_") && isThought(key):
		return errs.New(errs.ScopeDenied, "%s/%s is %s's thinking (→ think), which only %s and room authority read", scope, key, scope, scope).
			WithHint("read the agent's other entries, or ask the room's owner")
	case key != "" && !strings.HasPrefix(scope, "_") && isTrace(key):
		return errs.New(errs.ScopeDenied, "%s/%s is %s's loom trace (the commands it ran), which only %s and room authority read", scope, key, scope, scope).
			WithHint("read the agent's other entries, or ask the room's owner")
	case key != "" && !strings.HasPrefix(scope, "_") && isMemory(key):
		return errs.New(errs.ScopeDenied, "%s/%s is %s's operational memory (pins, stashes: → memory), which only %s and room authority read", scope, key, scope, scope).
			WithHint("read the agent's other entries, or ask the room's owner")
	case scope == scopeLoomDoc:
		return errs.New(errs.ScopeDenied, "scope %q holds the loom's documents, which this reader may not read (%s is not enabled)", scope, PermDocRead).
			With("permission", PermDocRead).WithHint("ask the room's owner: → permit <agent> %s", PermDocRead)
	case isLoomScope(scope):
		return errs.New(errs.ScopeDenied, "scope %q belongs to the loom, which this reader may not see (%s is not enabled)", scope, PermAware).
			With("permission", PermAware).WithHint("ask the room's owner: → permit <agent> %s", PermAware)
	}
	return nil
}

// shareKey names what loomReadRule's reader for p sees: its reading
// permissions, and whose thoughts and traces it reads (room authority
// all of them; an agent its own).
func shareKey(p *substrate.Principal, perms []string) string {
	who := ""
	switch {
	case p.Admin():
		who = "*"
	case p.Kind == substrate.KindAgent:
		who = "agent:" + p.AgentID
	}
	return who + "\x00" + strings.Join(perms, ",")
}
