package migrations_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/migrations"
)

// shardKey is the column each room-owned table is distributed by on
// Citus (README, "Scaling out"): the room. Every other table is small, per
// user or per client, and a reference table.
var shardKey = func() map[string]string {
	m := map[string]string{}
	for _, t := range migrations.RoomTables {
		m[t.Name] = t.Column
	}
	return m
}()

// crossRoom are the statements that search every room, each with why it
// must. Anything else on a room-owned table names its room, so that with
// rooms as the shard key it reaches one shard.
var crossRoom = map[string]string{
	// substrate.findToken: a token presented without a room (GET /rooms),
	// or to a room it does not belong to (to say whose it is).
	`SELECT id FROM rooms WHERE token_hash = $1`:                                                                       "token lookup without a room",
	`SELECT id FROM rooms WHERE view_token_hash = $1`:                                                                  "token lookup without a room",
	`SELECT room_id, id, grants, last_heartbeat < now() - make_interval(secs => $2) FROM agents WHERE token_hash = $1`: "token lookup without a room",
	// substrate.RetainLogs: the janitor picks the rooms whose logs need
	// trimming, then trims each with statements that name it.
	`SELECT id FROM rooms WHERE seq > $1`: "janitor sweep",
	// substrate.PurgeExpired: likewise for rooms with expired entries.
	`SELECT DISTINCT room_id FROM state WHERE timer_effect = 'delete' AND (timer_expires_at < now() - interval '1 minute' OR timer_ticks_left <= 0)`: "janitor sweep",
}

var (
	tableRE = regexp.MustCompile(`(?is)\b(?:FROM|JOIN|INTO|UPDATE)\s+(rooms_retired|rooms|agents|state_archive|state|vocabulary_usage)\b`)
	stmtRE  = regexp.MustCompile(`(?is)^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b`)
)

// names reports whether a statement names its room on table's shard key:
// a comparison with a parameter (or ANY of one), an insert that sets it
// (its table aliased or not),
// or a join on the room with another room-owned table (co-located: the
// statement reaches that table's room on the same shard, and the other
// table's own reference is checked in turn).
func names(stmt, table string) bool {
	key := shardKey[table]
	if regexp.MustCompile(`(?is)\b(?:\w+\.)?` + key + `\s*(?:=\s*(?:\$\d+|ANY\s*\(\s*\$\d+)|IN\s*\()`).MatchString(stmt) {
		return true
	}
	if regexp.MustCompile(`(?is)\b(?:\w+\.)?` + key + `\s*=\s*\w+\.(?:id|room_id)\b`).MatchString(stmt) {
		return true
	}
	return regexp.MustCompile(`(?is)INSERT\s+INTO\s+` + table + `(?:\s+AS\s+\w+)?\s*\(\s*` + key + `\b`).MatchString(stmt)
}

// Every SQL statement in the code that touches a room-owned table names
// its room, or is one of the few listed cross-room statements: the schema
// and queries stay ready to shard by room.
func TestStatementsNameTheirRoom(t *testing.T) {
	root := ".."
	// Statements are often assembled from constants (entryCols + "WHERE
	// …"): parse each package, learn its string constants, then check
	// every literal or concatenation as the string it builds.
	pkgs := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := walkGo(root, func(path, _ string) error {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var bad []string
	check := func(pos token.Pos, s string) {
		if !stmtRE.MatchString(s) {
			return
		}
		stmt := strings.Join(strings.Fields(s), " ")
		if _, ok := crossRoom[stmt]; ok {
			seen[stmt] = true
			return
		}
		for _, m := range tableRE.FindAllStringSubmatch(stmt, -1) {
			if !names(stmt, m[1]) {
				bad = append(bad, fset.Position(pos).String()+": "+m[1]+" without its room: "+stmt)
				return
			}
		}
	}
	for _, files := range pkgs {
		consts := map[string]ast.Expr{}
		for _, f := range files {
			for _, decl := range f.Decls {
				if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
					for _, spec := range g.Specs {
						v := spec.(*ast.ValueSpec)
						for i, name := range v.Names {
							if i < len(v.Values) {
								consts[name.Name] = v.Values[i]
							}
						}
					}
				}
			}
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.GenDecl:
					// Constants are fragments: checked where they are used.
					return x.Tok != token.CONST
				case *ast.Ident:
					if _, ok := consts[x.Name]; ok {
						if s, ok := stringOf(x, consts, 0); ok {
							check(x.Pos(), s)
						}
					}
				case *ast.BinaryExpr:
					if x.Op == token.ADD {
						if s, ok := stringOf(x, consts, 0); ok {
							check(x.Pos(), s)
							return false
						}
					}
				case *ast.BasicLit:
					if s, ok := stringOf(x, consts, 0); ok {
						check(x.Pos(), s)
					}
				}
				return true
			})
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	for stmt := range crossRoom {
		if !seen[stmt] {
			t.Errorf("listed cross-room statement no longer in the code (remove it from crossRoom): %s", stmt)
		}
	}
}

// stringOf is the string e builds from literals and the package's
// constants; other operands (variables, calls) stand as " ? ". It reports
// false when e holds no string literal at all.
func stringOf(e ast.Expr, consts map[string]ast.Expr, depth int) (string, bool) {
	if depth > 20 {
		return " ? ", false
	}
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind != token.STRING {
			return " ? ", false
		}
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if x.Op != token.ADD {
			return " ? ", false
		}
		l, lok := stringOf(x.X, consts, depth+1)
		r, rok := stringOf(x.Y, consts, depth+1)
		return l + r, lok || rok
	case *ast.ParenExpr:
		return stringOf(x.X, consts, depth+1)
	case *ast.Ident:
		if c, ok := consts[x.Name]; ok {
			return stringOf(c, consts, depth+1)
		}
	}
	return " ? ", false
}
