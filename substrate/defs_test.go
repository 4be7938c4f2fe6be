package substrate_test

import (
	"testing"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/defs"
)

// The definitions name the scopes as the core does: a definition's scope
// "self" or "_shared" means to defs what it means to the core.
func TestDefsNameTheCoreScopes(t *testing.T) {
	if defs.ScopeShared != substrate.ScopeShared || defs.ScopeSelf != substrate.ScopeSelf {
		t.Fatalf("defs names the scopes %q and %q, the core %q and %q", defs.ScopeShared, defs.ScopeSelf, substrate.ScopeShared, substrate.ScopeSelf)
	}
}
