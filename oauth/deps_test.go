package oauth_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The authorization server sees rooms only through RoomDirectory, whose
// types are in the leaf package lobby/roomdir: it must not import the
// lobby, the substrate or anything of theirs, which would pull in cel-go
// (and the room internals) with them.
func TestOAuthDoesNotImportRooms(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list oauth's dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/syncsubstrate/sync/oauth").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/syncsubstrate/sync/"
	allowed := map[string]bool{ // the module's packages oauth may depend on
		mod + "oauth": true, mod + "lobby/roomdir": true, mod + "store": true, mod + "migrations": true,
		mod + "substrate/errs": true, mod + "substrate/httpmw": true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "cel.dev/") || strings.Contains(pkg, "cel-go") {
			t.Errorf("oauth depends on %s (cel-go)", pkg)
		}
		if strings.HasPrefix(pkg, mod) && !allowed[pkg] && !strings.HasPrefix(pkg, mod+"oauth/") {
			t.Errorf("oauth depends on %s: rooms are reached only through RoomDirectory", pkg)
		}
	}
}
