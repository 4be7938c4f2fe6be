package migrations_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/migrations"
)

// owners names the one package that may write SQL against each table
// (ARCHITECTURE §2a): every other package goes through its operations.
var owners = map[string]string{
	"rooms":                  "substrate",
	"rooms_retired":          "substrate",
	"agents":                 "substrate",
	"state":                  "substrate",
	"state_archive":          "substrate",
	"vocabulary_usage":       "substrate",
	"smcp_user_rooms":        "lobby",
	"smcp_user_sessions":     "lobby",
	"smcp_users":             "oauth",
	"smcp_credentials":       "oauth",
	"smcp_invites":           "oauth",
	"smcp_recovery_codes":    "oauth",
	"smcp_sessions":          "oauth",
	"smcp_webauthn_sessions": "oauth",
	"smcp_oauth_clients":     "oauth",
	"smcp_oauth_tokens":      "oauth",
	"smcp_oauth_grant_ends":  "oauth",
	"smcp_consents":          "oauth",
	"smcp_server_keys":       "oauth",
	"syncd_processes":        "store",
	"mcp_tasks":              "mcp",
}

// Every table the migrations create has an owner here, and no package but
// its owner mentions it in SQL (tests may: they set up and inspect state).
func TestEachTableHasOneOwner(t *testing.T) {
	created := map[string]bool{}
	createRE := regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)`)
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := fs.ReadFile(migrations.FS, path)
		for _, m := range createRE.FindAllStringSubmatch(string(raw), -1) {
			created[m[1]] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for table := range created {
		if owners[table] == "" {
			t.Errorf("table %s has no owner in this test: add it", table)
		}
	}

	var violations []string
	err = walkGo("..", func(path, rel string) error {
		pkg := filepath.ToSlash(filepath.Dir(rel))
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(raw)
		for table, owner := range owners {
			if pkg == owner {
				continue
			}
			re := regexp.MustCompile(`(?i)\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+` + table + `\b`)
			if re.MatchString(src) {
				violations = append(violations, rel+" uses "+table+" (owned by "+owner+")")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(violations)
	if len(violations) > 0 {
		t.Fatalf("SQL outside a table's owner (go through the owner's operations):\n  %s", strings.Join(violations, "\n  "))
	}
}

// notProduct are packages that are measuring instruments rather than the
// product, exempt from the ownership and sharding rules, with why.
var notProduct = map[string]string{
	// syncd bench -pgbench measures PostgreSQL's bound by running the
	// invocation's transaction shape with pgbench on the real tables, in
	// rooms of its own (pgb…) that it creates and removes.
	"cmd/syncd/bench": "the PostgreSQL bound",
	// pgtest.CheckRouting's exceptions name the tables of the statements
	// they allow; it plans statements, never runs one on a room table.
	"store/pgtest": "the tests' database and routing check",
}

// walkGo calls fn for every non-test Go file under root (path, and path
// relative to root), skipping hidden directories, node_modules, testdata
// and the packages in notProduct.
func walkGo(root string, fn func(path, rel string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || notProduct[filepath.ToSlash(rel)] != "") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		return fn(path, rel)
	})
}
