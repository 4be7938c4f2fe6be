// What happened, in the room's words (issue 42, bug 7). The audit and the
// state name storage: _loom.2/c:13:1, _acks/825, maya:web/loom:t:…; after
// some loom work a feed of keys was all internals. describe turns an
// audit entry, and describeEntry a state entry, into a sentence a person
// reads ("raj continued node 13 in checkout-launch", "planner
// acknowledged Ana's message"). The keys of ordinary scopes stay named as
// keys in their scope (they are the room's own vocabulary); those of the
// system's scopes never appear: each says what it is, and one the
// describer does not know says so in general words.

package web

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/activity"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// roomWords are the names the room's internals point at, as the reader
// reads them (zero: unknown, and the sentence says less).
type roomWords struct {
	agents  map[string]string // agent id → its name
	trees   map[int64]string  // loom tree id → its name
	acks    map[string]string // acknowledged message's seq → its sender
	threads map[string]string // thread (its first message's seq) → subject
	gens    map[string][2]int64
}

// wordsOf reads the names from the state the reader reads (the whole-room
// read: mutable entries) and the agents.
func wordsOf(entries []substrate.Entry, agents []agentRow) *roomWords {
	w := &roomWords{agents: map[string]string{}, trees: map[int64]string{}, acks: map[string]string{}, threads: map[string]string{}, gens: map[string][2]int64{}}
	for _, a := range agents {
		w.agents[a.ID] = a.Name()
	}
	for _, e := range entries {
		switch {
		case e.Scope == "_loom" && strings.HasPrefix(e.Key, "tree:"):
			var t struct {
				ID   int64  `json:"id"`
				Name string `json:"name"`
			}
			if json.Unmarshal(e.Value, &t) == nil && t.Name != "" {
				id, _ := strconv.ParseInt(strings.TrimPrefix(e.Key, "tree:"), 10, 64)
				w.trees[id] = t.Name
			}
		case e.Scope == "_loom" && strings.HasPrefix(e.Key, "gen:"):
			var g struct{ Tree, Node int64 }
			if json.Unmarshal(e.Value, &g) == nil {
				w.gens[strings.TrimPrefix(e.Key, "gen:")] = [2]int64{g.Tree, g.Node}
			}
		case e.Scope == substrate.ScopeAcks:
			var a substrate.AckRecord
			if json.Unmarshal(e.Value, &a) == nil && a.From != "" {
				w.acks[e.Key] = a.From
			}
		case e.Scope == substrate.ScopeThreads:
			var t substrate.ThreadRecord
			if json.Unmarshal(e.Value, &t) == nil && t.Subject != "" {
				w.threads[e.Key] = t.Subject
			}
		}
	}
	return w
}

// who is an agent by its name (its id when it has none).
func (w *roomWords) who(id string) string {
	if w != nil {
		if n := w.agents[id]; n != "" {
			return n
		}
	}
	if id == "_room" {
		return "the room"
	}
	return id
}

// tree is a loom tree by its name.
func (w *roomWords) tree(id int64) string {
	if w != nil {
		if n := w.trees[id]; n != "" {
			return n
		}
	}
	return "tree " + strconv.FormatInt(id, 10)
}

// internal reports a key of the system's (its reserved scopes and
// features', such as the loom's; the message log; features' operational
// memory in agents' scopes) rather than the room's own, which a communal
// scope such as _tasks is: the page never shows it as a key.
func internal(scope, key string) bool {
	return substrate.IsSystemScope(scope) || loom.IsScope(scope) || scope == substrate.ScopeMessages || substrate.MemoryOf(scope, key) != ""
}

// sentence is what one audit entry did, after its actor: a phrase and the
// ordinary keys it moved (at most a few, and how many more).
type sentence struct {
	What string
	Keys []string
	More int
}

// keysAtMost is how many keys a sentence names.
const keysAtMost = 4

// describe says what an audit entry did, in the room's words.
func describe(a activity.Activity, w *roomWords) sentence {
	if w == nil {
		w = &roomWords{} // no names: ids, and general words
	}
	var s sentence
	var ordinary, system []substrate.ScopeKey
	for _, k := range a.Keys {
		if internal(k.Scope, k.Key) {
			system = append(system, k)
		} else {
			ordinary = append(ordinary, k)
		}
	}
	s.What = w.did(a, system)
	if s.What == "wrote" && len(ordinary) == 0 && len(system) > 0 {
		s.What = w.systemDid(system)
	}
	for i, k := range ordinary {
		if i == keysAtMost {
			s.More = len(ordinary) - i
			break
		}
		s.Keys = append(s.Keys, k.Scope+"."+k.Key)
	}
	return s
}

// did is the phrase for what an audit entry did, by its kind.
func (w *roomWords) did(a activity.Activity, system []substrate.ScopeKey) string {
	switch a.Kind {
	case "invoke":
		return w.invoked(a, system)
	case "state_write":
		return "wrote"
	case "loom":
		return w.loomDid(a.Command, system)
	case "agent_join", "agent_update", "agent_embody":
		return w.agentDid(a)
	case "register_action":
		return "registered an action" + named(a.Action)
	case "register_view":
		return "registered a view"
	case "delete_action":
		return "removed an action"
	case "delete_view":
		return "removed a view"
	case "room_create":
		return "created the room"
	case "token_rotate":
		return "replaced a token"
	}
	return strings.ReplaceAll(a.Kind, "_", " ")
}

// invoked is the phrase for an invocation, refused or not.
func (w *roomWords) invoked(a activity.Activity, system []substrate.ScopeKey) string {
	refused := a.OK != nil && !*a.OK
	var what string
	switch a.Action {
	case "_send_message":
		what = "sent a message" + w.inThread(system)
		if refused {
			what = "tried to send a message"
		}
	case "_ack":
		what = "acknowledged " + w.ackedMessage(a.By, system)
		if refused {
			what = "tried to acknowledge a message"
		}
	case "_state_write", "":
		what = "wrote"
	case "_register_action", "_register_view", "_delete_action", "_delete_view":
		what = map[string]string{"_register_action": "registered an action", "_register_view": "registered a view",
			"_delete_action": "removed an action", "_delete_view": "removed a view"}[a.Action]
		if refused {
			what = "tried to change the room’s actions or views"
		}
	default:
		what = "invoked " + a.Action
		if refused {
			what = "tried " + a.Action
		}
	}
	if refused {
		if a.Error != "" {
			what += " (refused: " + strings.ReplaceAll(a.Error, "_", " ") + ")"
		} else {
			what += " (refused)"
		}
	}
	return what
}

// agentDid is the phrase for an agent joining, being added or updated.
func (w *roomWords) agentDid(a activity.Activity) string {
	whom := a.Agent
	switch {
	case a.Kind == "agent_join" && (whom == "" || whom == a.By):
		return "joined"
	case a.Kind == "agent_join":
		return "added " + w.who(whom)
	case a.Kind == "agent_embody" && (whom == "" || whom == a.By):
		return "joined through a client"
	case whom == "" || whom == a.By:
		return "updated their agent"
	}
	return "updated " + w.who(whom)
}

func named(id string) string {
	if id == "" {
		return ""
	}
	return " (" + id + ")"
}

// inThread is " in “subject”" for a message that moved a thread's record.
func (w *roomWords) inThread(keys []substrate.ScopeKey) string {
	for _, k := range keys {
		if k.Scope == substrate.ScopeThreads {
			if s := w.threads[k.Key]; s != "" {
				return " in “" + s + "”"
			}
			return " in a thread"
		}
	}
	return ""
}

// ackedMessage is whose message an acknowledgement was of.
func (w *roomWords) ackedMessage(by string, keys []substrate.ScopeKey) string {
	for _, k := range keys {
		if k.Scope != substrate.ScopeAcks {
			continue
		}
		switch from := w.acks[k.Key]; from {
		case "":
		case by:
			return "their own message"
		default:
			return w.who(from) + "’s message"
		}
	}
	return "a message"
}

// systemDid says what a write to the system's scopes alone did.
func (w *roomWords) systemDid(keys []substrate.ScopeKey) string {
	var parts []string
	add := func(p string) {
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	for _, k := range keys {
		switch {
		case loom.IsScope(k.Scope):
			add("changed the loom")
		case substrate.MemoryOf(k.Scope, k.Key) != "":
			add("updated their own notes")
		case k.Scope == substrate.ScopeMessages:
			add("wrote a message")
		case k.Scope == substrate.ScopeThreads:
			add("updated a thread")
		case k.Scope == substrate.ScopeAcks:
			add("updated an acknowledgement")
		case k.Scope == "_actions":
			add("changed an action")
		case k.Scope == "_views":
			add("changed a view")
		default:
			add("updated the room’s own records")
		}
	}
	return strings.Join(parts, " and ")
}

// loomDid says what a loom command did, from the verb and the keys it
// moved: the tree by name, the nodes by number.
func (w *roomWords) loomDid(verb string, keys []substrate.ScopeKey) string {
	m := w.loomMoved(keys)
	if m.tree >= 0 {
		m.in = " in " + w.tree(m.tree)
	}
	if did, ok := m.nodeDid(verb); ok {
		return did
	}
	return w.loomOtherDid(verb, m)
}

// loomMoves is what a loom command's keys say it moved.
type loomMoves struct {
	tree                int64  // -1 when none
	made, parent, about int64  // a node written, its parent, a node annotated or linked
	doc                 string // a document written
	in                  string // " in <tree>", "" without a tree
}

// loomMoved reads the tree, the nodes and the document a command's keys
// name.
func (w *roomWords) loomMoved(keys []substrate.ScopeKey) loomMoves {
	m := loomMoves{tree: -1}
	for _, k := range keys {
		rest, isTree := strings.CutPrefix(k.Scope, "_loom.")
		if id, err := strconv.ParseInt(rest, 10, 64); isTree && err == nil {
			m.tree = id
			m.nodeKey(k.Key)
			continue
		}
		switch {
		case k.Scope == "_loom" && strings.HasPrefix(k.Key, "gen:"):
			if g, ok := w.gens[strings.TrimPrefix(k.Key, "gen:")]; ok {
				m.tree, m.parent = g[0], g[1]
			}
		case k.Scope == "_loom" && strings.HasPrefix(k.Key, "tree:") && m.tree < 0:
			m.tree, _ = strconv.ParseInt(strings.TrimPrefix(k.Key, "tree:"), 10, 64)
		case k.Scope == "_loom.live" && m.tree < 0:
			// at:<tree>:<actor>, lease:<tree>:<branch>, bm:<tree>:<label>
			if f := strings.SplitN(k.Key, ":", 3); len(f) >= 2 {
				if id, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					m.tree = id
				}
			}
		case k.Scope == "_loom.doc":
			m.doc = strings.TrimPrefix(k.Key, "d:")
		}
	}
	return m
}

// nodeKey reads one key of a tree's scope: a node, a child, an
// annotation or a link.
func (m *loomMoves) nodeKey(key string) {
	f := strings.Split(key, ":")
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return n
	}
	switch f[0] {
	case "n":
		m.made = max(m.made, num(1))
	case "c":
		m.parent = num(1)
	case "a", "l":
		m.about = num(1)
	}
}

func loomNode(n int64) string { return "node " + strconv.FormatInt(n, 10) }

// nodeDid says what a command that writes nodes did; false for another
// verb.
func (m loomMoves) nodeDid(verb string) (string, bool) {
	in, made, parent := m.in, m.made, m.parent
	switch verb {
	case "continue", "generated":
		switch {
		case made > 0 && parent > 0:
			return "continued " + loomNode(parent) + in, true
		case parent > 0:
			// Queued for a generator (→ fulfil answers it), while the
			// request lasts: its record names the node.
			return "asked for a continuation of " + loomNode(parent) + in, true
		}
		return "asked for a continuation" + in, true
	case "fulfil":
		if parent > 0 {
			return "wrote the continuation of " + loomNode(parent) + in, true
		}
		return "answered a continuation request" + in, true
	case "generating":
		return "started a continuation" + in, true
	case "add", "edit", "branch":
		did := map[string]string{"add": "added", "edit": "rewrote", "branch": "branched from"}[verb]
		switch {
		case verb == "edit" && parent > 0:
			return "rewrote a child of " + loomNode(parent) + in, true
		case verb == "branch" && parent > 0:
			return "branched from " + loomNode(parent) + in, true
		case made > 0 && parent > 0:
			return did + " " + loomNode(made) + " after " + loomNode(parent) + in, true
		case made > 0:
			return did + " " + loomNode(made) + in, true
		}
		return map[string]string{"add": "added a node", "edit": "rewrote a node", "branch": "branched"}[verb] + in, true
	}
	return "", false
}

// loomOtherDid says what any other loom command did.
func (w *roomWords) loomOtherDid(verb string, m loomMoves) string {
	in := m.in
	switch verb {
	case "new":
		if m.tree >= 0 {
			return "started the tree " + w.tree(m.tree)
		}
		return "started a tree"
	case "annotate":
		if m.about > 0 {
			return "annotated " + loomNode(m.about) + in
		}
		return "annotated a node" + in
	case "link":
		if m.about > 0 {
			return "linked " + loomNode(m.about) + in
		}
		return "linked a node" + in
	case "bookmark":
		return "set a bookmark" + in
	case "switch", "jump", "follow":
		return "moved to another place" + in
	case "yield":
		return "gave up the turn" + in
	case "write":
		if m.doc != "" {
			return "wrote the document “" + m.doc + "”"
		}
		return "wrote a document"
	case "permit", "deny":
		return "changed who may use the loom"
	case "stop":
		return "stopped a continuation" + in
	case "memory", "pin", "stash", "recall", "drop", "think":
		return "updated their loom notes"
	case "collab", "collab heartbeat":
		return "worked with others in the loom" + in
	case "error":
		return "tried a loom command that failed" + in
	}
	if verb == "" {
		return "used the loom" + in
	}
	return fmt.Sprintf("used the loom (%s)%s", verb, in)
}

// lastChange is the header's last change: who, what, and the key when it
// is the room's own.
type lastChange struct {
	By, ByID, What, Key string
}

// describeEntry says what the newest version of a state entry was, in
// the room's words: an ordinary key is named, a system's record says
// what it is.
func describeEntry(e *substrate.Entry, w *roomWords) lastChange {
	if w == nil {
		w = &roomWords{}
	}
	c := lastChange{By: w.who(e.Writer), ByID: e.Writer, What: "wrote"}
	if !internal(e.Scope, e.Key) {
		c.Key = e.Scope + "." + e.Key
		return c
	}
	switch {
	case e.Scope == substrate.ScopeAcks:
		from := w.acks[e.Key]
		switch {
		case from == "":
			c.What = "updated an acknowledgement"
		case from == e.Writer:
			c.What = "asked for their message to be acknowledged"
		default:
			c.What = "acknowledged " + w.who(from) + "’s message"
		}
	case e.Scope == substrate.ScopeThreads:
		c.What = "wrote in a thread"
		if s := w.threads[e.Key]; s != "" {
			c.What = "wrote in “" + s + "”"
		}
	default:
		c.What = w.systemDid([]substrate.ScopeKey{{Scope: e.Scope, Key: e.Key}})
	}
	return c
}
