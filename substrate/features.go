package substrate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// Features are wired into a Service explicitly (Options.Features), never
// registered from a package's init: which features a Service runs is read
// where it is built (cmd/syncd lists them), and a binary that leaves one
// out cannot silently lose what it guards. The loom's documents and the
// models' thinking stay sealed in a Service without the loom (reserved
// below), and salience is absent only where the list says so.

// A Feature is a package built on rooms, as the core sees it: the
// reserved names it claims, its say over what a reader sees of them, and
// what a context read asks of it. Each feature package exports one
// (loom.Feature, salience.Feature).
type Feature struct {
	// Name names the feature ("loom", "salience"); required, unique among
	// a Service's features.
	Name string
	// Scopes are the reserved scope families (reservedScopes) the feature
	// owns: Name itself and every Name+".…". Only the feature writes them,
	// through MutateRoom; WriteState and actions never do. Default none.
	Scopes []string
	// Memory are the reserved key prefixes (reservedMemory) of agents' own
	// scopes that are the feature's operational memory. Default none.
	Memory []string
	// ReadRule is the feature's say over what a reader sees, of its
	// scopes and memory or of anything else; it may only narrow what the
	// core admits. Nil: no say.
	ReadRule ReadRule
	// Salience answers what a context read asks adaptive salience
	// (substrate/salienceport); at most one feature sets it. Nil: none.
	Salience Salience
}

// reservedScope is a scope family the core keeps for a feature, whether
// or not a Service wires it.
type reservedScope struct {
	Name    string
	Feature string
	// SubscopesApart keeps Name+".…" out of the room's snapshot and its
	// state reads (they have their own surface); Name itself stays in.
	SubscopesApart bool
}

// reservedScopes and reservedMemory are the names the features of this
// repository keep their records under. They are the core's, not the
// features': a Service that does not wire a feature still knows its names
// and seals them (sealRule), so rows a loom wrote (its documents, a
// model's thinking) are never read as ordinary rows by a binary built
// without it. A feature may claim only names listed here (New panics
// otherwise), so a new feature cannot forget to reserve its own.
var (
	reservedScopes = []reservedScope{{Name: "_loom", Feature: "loom", SubscopesApart: true}}
	// reservedMemory maps a key prefix to the feature it belongs to and
	// what the audit calls such an entry.
	reservedMemory = map[string]struct{ Feature, What string }{"loom:": {"loom", "loom memory"}}
)

// reservedFamily is the reserved family scope belongs to (nil when none).
func reservedFamily(scope string) *reservedScope {
	for i, f := range reservedScopes {
		if scope == f.Name || strings.HasPrefix(scope, f.Name+".") {
			return &reservedScopes[i]
		}
	}
	return nil
}

// wiring is what a Service's features add to the core.
type wiring struct {
	names []string
	// rules are the features' read rules in Options.Features' order, then
	// the seal of the reserved names no feature claimed.
	rules    []ReadRule
	salience Salience
	// claimed are the reserved scope families a wired feature owns.
	claimed map[string]bool
}

// wire checks fs and assembles their wiring. A feature that claims a name
// the core does not reserve, or one another claimed, is a programming
// error: New panics, as on a bad expression environment.
func wire(fs []Feature) wiring {
	w := wiring{claimed: map[string]bool{}}
	memory := map[string]bool{}
	for _, f := range fs {
		if f.Name == "" || slices.Contains(w.names, f.Name) {
			panic(fmt.Sprintf("substrate: feature name %q is empty or listed twice", f.Name))
		}
		w.names = append(w.names, f.Name)
		for _, sc := range f.Scopes {
			if fam := reservedFamily(sc); fam == nil || fam.Name != sc || fam.Feature != f.Name || w.claimed[sc] {
				panic(fmt.Sprintf("substrate: feature %q claims scope family %q, which the core does not reserve for it (reservedScopes)", f.Name, sc))
			}
			w.claimed[sc] = true
		}
		for _, prefix := range f.Memory {
			if r, ok := reservedMemory[prefix]; !ok || r.Feature != f.Name || memory[prefix] {
				panic(fmt.Sprintf("substrate: feature %q claims memory prefix %q, which the core does not reserve for it (reservedMemory)", f.Name, prefix))
			}
			memory[prefix] = true
		}
		if f.ReadRule != nil {
			w.rules = append(w.rules, f.ReadRule)
		}
		if f.Salience != nil {
			if w.salience != nil {
				panic(fmt.Sprintf("substrate: feature %q is a second salience", f.Name))
			}
			w.salience = f.Salience
		}
	}
	var seal sealRule
	for _, f := range reservedScopes {
		if !w.claimed[f.Name] {
			seal.scopes = append(seal.scopes, f)
		}
	}
	for prefix, r := range reservedMemory {
		if !memory[prefix] {
			seal.memory = append(seal.memory, prefix)
			seal.owner = append(seal.owner, r.Feature)
		}
	}
	if len(seal.scopes) > 0 || len(seal.memory) > 0 {
		w.rules = append(w.rules, seal)
	}
	return w
}

// Features are the names of the features the Service runs, in
// Options.Features' order.
func (s *Service) Features() []string { return slices.Clone(s.wired.names) }

// sealRule is the read rule of the reserved names no wired feature
// claims: their scopes are read by nobody (the system aside), and their
// memory keys by the agent whose scope holds them and room authority
// only, as the strictest feature would have it.
type sealRule struct {
	scopes []reservedScope
	memory []string
	owner  []string // the feature of each memory prefix
}

func (r sealRule) Reader(p *Principal, _ RowFunc) (Reader, error) {
	own := func(scope string) bool { return p.Admin() || (p.Kind == KindAgent && p.AgentID == scope) }
	family := func(scope string) *reservedScope {
		for i, f := range r.scopes {
			if scope == f.Name || strings.HasPrefix(scope, f.Name+".") {
				return &r.scopes[i]
			}
		}
		return nil
	}
	memory := func(scope, key string) int {
		if key == "" || strings.HasPrefix(scope, "_") {
			return -1
		}
		for i, prefix := range r.memory {
			if strings.HasPrefix(key, prefix) {
				return i
			}
		}
		return -1
	}
	who := "-"
	switch {
	case p.Admin():
		who = "*"
	case p.Kind == KindAgent:
		who = "agent:" + p.AgentID
	}
	return Reader{
		Sees: func(scope, key string) bool {
			if family(scope) != nil {
				return false
			}
			return memory(scope, key) < 0 || own(scope)
		},
		HiddenPrefixes: func(scope string) []string {
			if strings.HasPrefix(scope, "_") || own(scope) {
				return nil
			}
			return r.memory
		},
		Refusal: func(scope, key string) error {
			if f := family(scope); f != nil {
				return errs.New(errs.ScopeDenied, "scope %q belongs to the %s, which this server does not run: nobody reads it here", scope, f.Feature).
					WithHint("read the room on a server that runs the %s", f.Feature)
			}
			if i := memory(scope, key); i >= 0 {
				return errs.New(errs.ScopeDenied, "%s/%s is %s's operational memory (the %s's), which only %s and room authority read", scope, key, scope, r.owner[i], scope).
					WithHint("read the agent's other entries, or ask the room's owner")
			}
			return nil
		},
		// What the seal shows depends only on whose memory the reader reads.
		Key: "seal:" + who,
	}, nil
}

// sealed is the refusal of a feature's write to a reserved scope family
// no wired feature claims (nil when scope is not one).
func (w *wiring) sealed(scope string) error {
	if f := reservedFamily(scope); f != nil && !w.claimed[f.Name] {
		return errs.New(errs.ScopeDenied, "scope %q belongs to the %s, which this server does not run", scope, f.Feature).
			WithHint("write it on a server that runs the %s", f.Feature)
	}
	return nil
}
