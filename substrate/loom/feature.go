package loom

import (
	"strings"

	"github.com/syncsubstrate/sync/substrate"
)

// Feature is the loom as a Service runs it (substrate.Options.Features):
// its scopes and its agents' memory, names the core reserves for it, and
// the read rule that decides them on every surface. A Service built
// without it seals them instead.
func Feature() substrate.Feature {
	return substrate.Feature{Name: "loom", Scopes: []string{scopeLoom}, Memory: []string{memoryPrefix}, ReadRule: loomReadRule{}}
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
