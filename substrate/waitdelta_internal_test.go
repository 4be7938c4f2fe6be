package substrate

import (
	"testing"

	"github.com/syncsubstrate/sync/substrate/delta"
)

// The delta's rule names the reserved scopes whose changes change views
// and actions; they are the core's.
func TestDeltaNamesTheCoresReservedScopes(t *testing.T) {
	for _, c := range [][2]string{{delta.ScopeActions, scopeActions}, {delta.ScopeViews, scopeViews}, {delta.ScopeCooldowns, scopeCooldowns}} {
		if c[0] != c[1] {
			t.Errorf("delta names %q where the core has %q", c[0], c[1])
		}
	}
}
