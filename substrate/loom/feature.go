package loom

import (
	"strings"

	"github.com/syncsubstrate/sync/substrate"
)

// The loom's scopes and read rule are the core's to enforce on every
// surface from the moment a binary can write them (it imports this
// package).
func init() {
	substrate.RegisterScopes(substrate.Scopes{Name: scopeLoom, SubscopesApart: true})
	substrate.RegisterReadRule(loomReadRule{})
	substrate.RegisterMemory(memoryPrefix, "loom memory")
}

// memoryPrefix starts every key the loom keeps in an agent's scope: its
// operational memory (seed 002, "Memory Tools": its own working memory),
// read by the agent and room authority only, as its thoughts and trace.
const memoryPrefix = "loom:"

func isMemory(key string) bool { return strings.HasPrefix(key, memoryPrefix) }

// thoughtPrefix starts the keys of → think entries in the thinker's scope.
const thoughtPrefix = "loom:think:"

func isThought(key string) bool { return strings.HasPrefix(key, thoughtPrefix) }

// tracePrefix starts the keys of an agent's loom trace: each command line
// it ran, which carries what the command wrote (a node's text, a
// document's line). It is read as thoughts are, so an agent granted the
// scope but denied the loom does not read the loom through it.
const tracePrefix = "loom:t:"

func isTrace(key string) bool { return strings.HasPrefix(key, tracePrefix) }

// IsThought reports an agent's thinking (→ think): pages show it folded.
func IsThought(scope, key string) bool {
	return !strings.HasPrefix(scope, "_") && isThought(key)
}

// IsScope reports one of the loom's own scopes (_loom, _loom.*), which
// hold its machinery: pages show them folded.
func IsScope(scope string) bool { return isLoomScope(scope) }
