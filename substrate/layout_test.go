package substrate_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The core and its features (ARCHITECTURE §2, issue 27): the core
// (this package) is the only code that reads or writes room rows; the
// features reach rooms through its exported operations (doc.go is the
// map).

// features are the packages built on rooms. A new package under
// substrate/ that imports the core is one (or the REST adapter): listing
// it here says so, and the rules below hold it.
var features = map[string]string{
	"substrate/loom": "the loom (seed 002)",
	// It imports the core only for the agent's authority (Service,
	// Principal, AgentPrincipal); rooms it reaches through the loom.
	"substrate/loom/collab": "the instruct collaborator that runs itself as an agent (seed 002)",
	"substrate/trajectory":  "trajectory export, a key's history, replay",
	"substrate/salience":    "adaptive salience: _attention, _vocabulary_health (seed 000 §VII)",
	// The statements and the read rule they apply are the core's
	// (SearchRows), search's cost and caps substrate/searchrule's; the
	// request, paging and views matched are the feature.
	"substrate/search": "full-text search: its request, paging, snippets and views (issue 31)",
	// The reads (RoomHeads, Presences, RoomView) and the read rule are the
	// core's; what a room reads like at a glance is the feature.
	"substrate/roomview": "what the lobby shows of a room: its summary, presence lapsed to idle (seed 003 §II)",
	// What a reader may know of an audit entry is the core's
	// (AuditSeenBy, deciding by authority.AuditSeenOf and AuditNarrowed);
	// the feed's paging and shape are the feature.
	"substrate/activity": "the room's activity feed and the agents a room had at a past seq",
	// A fixture for tests, built only through the core's operations.
	"substrate/reviewroom": "the review room: a busy room with planted signals for salience's precision (issue 43)",
}

// adapters are the packages under substrate/ that serve the core to a
// surface rather than build on rooms.
var adapters = map[string]bool{"substrate/rest": true}

// roomTables are the tables the core owns.
var roomTables = []string{"rooms", "rooms_retired", "agents", "state", "state_archive", "vocabulary_usage"}

// mayQueryRooms are the packages whose SQL may name a room table: the
// core, the store (the pool, the test database helper), and measuring
// instruments that are not the product.
var mayQueryRooms = map[string]string{
	"substrate":       "the core",
	"store":           "the pool and migrations runner",
	"store/pgtest":    "the test database helper",
	"cmd/syncd/bench": "syncd bench -pgbench runs the invocation's transaction shape on the real tables",
}

// coreLibraries are the packages under substrate/ the core may import:
// leaf libraries, not features built on rooms. The machinery beneath the
// rules (substrate/internal/...) is listed in machinery below.
var coreLibraries = map[string]bool{"substrate/errs": true, "substrate/expr": true, "substrate/help": true,
	// The authority rules (who may read and write what, the one read
	// rule) as pure functions: the core keeps the SQL that finds a
	// credential, and re-exports the names (issue 45).
	"substrate/authority": true,
	// What an action or a view is and makes one valid, its templates and
	// params, what an expression names, a room's and an agent's records
	// and requests: rules and shapes that need no room (issue 45).
	"substrate/defs": true,
	// The rule of a room's expression budget: whose budget, what is
	// charged, the refusal; the buckets are workmeter's (issue 45).
	"substrate/exprbudget": true,
	// The envelope's shape, request, encoding and size budget, fitted
	// from plain inputs the core hands it (no room, no SQL); its sections
	// filled from a Reading (what the read built, the snapshot's rows,
	// the statements the core runs for the rest), the action view,
	// threads' and acks' records as shown, CEL's agents and messages, the
	// results of wait, eval and help, a state read's query, its thinning
	// by the read rule and its gates, and the reader's state's rules
	// (entries hidden one by one, gated ones admitted, the gates' and
	// action guards' evaluation).
	"substrate/envelope": true,
	// What changed, as the rules say it: what a wait's wake-up or a read
	// since a seq shows of a snapshot the core hands it, what a wait's
	// condition depends on and how long it waits, and the audit record
	// (its changes, caps and timers).
	"substrate/delta": true,
	// A started timer: when it hides or shows its item, when that next
	// changes by the clock alone, how it is shown.
	"substrate/timer": true,
	// What the core asks salience and the read it hands it, answered
	// from what the core filled it with (the read rule already applied):
	// salience imports it without a rule of its own.
	"substrate/salienceport": true,
	// The write path's rules: a write's validation, a stored value's
	// checks, what a set, merge or increment leaves, the entry as a
	// write's response shows it (no room, no SQL).
	"substrate/write": true,
	// Search's own rules: its request and rows, the scope rule its
	// statement narrows by, its cost, its cap per credential, its
	// languages (no room, no SQL; the statements are search.go's).
	"substrate/searchrule": true,
}

// machinery are the packages beneath the rules (issue 45): each makes one
// rule fast (group commit, a cache, a memo, a batch, a coalescer, a
// clock) and is consulted only by the core files that own that rule,
// listed here. A cache stores what its owner computed, keyed by what the
// owner says decides it; it cannot decide what a reader sees, because it
// cannot name a rule: a machinery package imports neither the core nor a
// feature nor a surface. An owner is a core file, or a file of a core
// library (envelope/json.go) below the core.
var machinery = map[string][]string{
	"substrate/internal/coalesce":    {"readpath.go", "substrate.go"},
	"substrate/internal/sweep":       {"janitor.go"},
	"substrate/internal/waitbatch":   {"wait.go", "substrate.go"},
	"substrate/internal/waitclock":   {"wait.go"},
	"substrate/internal/buildcache":  {"snapshot.go"},
	"substrate/internal/memo":        {"defs/facts.go", "snapshot.go"},
	"substrate/internal/jsoncache":   {"envelope/json.go", "snapshot.go"},
	"substrate/internal/jsontext":    {"envelope/json.go", "write/write.go", "defs/params.go"},
	"substrate/internal/workmeter":   {"substrate.go", "exprbudget/exprbudget.go"},
	"substrate/internal/earliest":    {"wait.go"},
	"substrate/internal/fairshare":   {"envelope/budget.go"},
	"substrate/internal/groupcommit": {"mutation.go"},
	// Token lookups an invocation may answer from memory; what it may
	// do with one is authority.go's.
	"substrate/internal/tokenmemory": {"authority.go", "substrate.go"},
	"substrate/internal/readmarks":   {"readpath.go", "mutation.go", "substrate.go"},
	// The snapshot an unchanged room is read from; the read path decides
	// whether it serves a read (readpath.go's readRoomCached).
	"substrate/internal/readcache": {"snapshot.go"},
	// The values of views the same for every reader of a state; which
	// views those are, and what decides their value (viewKey), is
	// views.go's and lobbyops.go's (PublicView).
	"substrate/internal/viewmemo": {"views.go", "lobbyops.go", "snapshot.go"},
}

const module = "github.com/syncsubstrate/sync/"

// goFiles parses every non-test Go file of the repository (tests may set
// up and inspect rows), by package directory.
func goFiles(t *testing.T) map[string][]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string][]*ast.File{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", filepath.Dir(path))
		out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// No package but the core (and the store) names a room table in SQL: a
// feature that needs a new kind of read gets a core operation (a bounded
// walk, a prefix list), not SQL of its own.
func TestOnlyTheCoreQueriesRoomRows(t *testing.T) {
	sqlRE := regexp.MustCompile(`(?i)\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+(` + strings.Join(roomTables, "|") + `)\b`)
	var violations []string
	for dir, files := range goFiles(t) {
		if mayQueryRooms[dir] != "" {
			continue
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				if s, err := strconv.Unquote(lit.Value); err == nil {
					if m := sqlRE.FindStringSubmatch(s); m != nil {
						violations = append(violations, dir+": "+m[0])
					}
				}
				return true
			})
		}
	}
	sort.Strings(violations)
	if len(violations) > 0 {
		t.Fatalf("SQL over room rows outside the core (use or add a core operation: substrate/doc.go):\n  %s", strings.Join(violations, "\n  "))
	}
}

// Imports point one way: features import the core, never the other way;
// features import neither the database driver nor the store, so they
// cannot open SQL of their own.
func TestFeaturesReachRoomsOnlyThroughTheCore(t *testing.T) {
	var violations []string
	for dir, files := range goFiles(t) {
		if dir != "substrate" && !strings.HasPrefix(dir, "substrate/") {
			continue
		}
		for _, f := range files {
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				local := strings.TrimPrefix(path, module)
				switch {
				case dir == "substrate" && strings.HasPrefix(local, "substrate/") && !coreLibraries[local] && machinery[local] == nil:
					violations = append(violations, "the core imports "+local+": ask a feature through an interface it registers")
				case coreLibraries[dir] && (local == "substrate" || features[local] != "" || adapters[local]):
					violations = append(violations, dir+" (beneath the core) imports "+local+": the core hands it plain data")
				case dir != "substrate" && machinery[dir] == nil && (strings.HasPrefix(path, "github.com/jackc/pgx") || local == "store" || strings.HasPrefix(local, "store/")):
					violations = append(violations, dir+" imports "+path+": reach rooms through the core's operations")
				}
			}
		}
	}
	sort.Strings(violations)
	if len(violations) > 0 {
		t.Fatalf("layout broken:\n  %s", strings.Join(violations, "\n  "))
	}
}

// Every package under substrate/ that imports the core is a listed
// feature (or an adapter), and every listed feature exists: the list is
// the map of what is built on rooms.
func TestFeaturesAreListed(t *testing.T) {
	files := goFiles(t)
	var problems []string
	for dir, fs := range files {
		if !strings.HasPrefix(dir, "substrate/") || adapters[dir] || features[dir] != "" {
			continue
		}
		for _, f := range fs {
			for _, im := range f.Imports {
				if path, _ := strconv.Unquote(im.Path.Value); path == module+"substrate" {
					problems = append(problems, dir+" imports the core but is not in features")
					break
				}
			}
		}
	}
	for dir := range features {
		if len(files[dir]) == 0 {
			problems = append(problems, dir+" is listed in features but has no Go files")
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("features list out of date (substrate/layout_test.go):\n  %s", strings.Join(slices.Compact(problems), "\n  "))
	}
}

// The machinery stays beneath the rules: every package under
// substrate/internal/ is listed with the core files that own it; it
// imports nothing of the module but errs, the store and other machinery;
// and only its owners import it (no feature, adapter or surface reaches
// a cache around the rule that fills it).
func TestMachineryStaysBeneathTheRules(t *testing.T) {
	fset := token.NewFileSet()
	var problems []string
	seen := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		rel = filepath.ToSlash(rel)
		dir := filepath.ToSlash(filepath.Dir(rel))
		if strings.HasPrefix(dir, "substrate/internal/") {
			seen[dir] = true
			if machinery[dir] == nil {
				problems = append(problems, dir+" is not listed in machinery: name the core files that own it")
			}
		}
		for _, im := range f.Imports {
			imp, _ := strconv.Unquote(im.Path.Value)
			local, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			if machinery[dir] != nil && local != "substrate/errs" && local != "store" && machinery[local] == nil {
				problems = append(problems, rel+" (machinery) imports "+local+": machinery takes what it needs through its own interface")
			}
			owners, isMachinery := machinery[local]
			if !isMachinery || machinery[dir] != nil {
				continue
			}
			owner := strings.TrimPrefix(rel, "substrate/") // json.go, envelope/json.go
			if (dir != "substrate" && !coreLibraries[dir]) || !slices.Contains(owners, owner) {
				problems = append(problems, rel+" imports "+local+", which only "+strings.Join(owners, ", ")+" may consult")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir := range machinery {
		if !seen[dir] {
			problems = append(problems, dir+" is listed in machinery but has no Go files")
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("machinery out of place (substrate/layout_test.go):\n  %s", strings.Join(slices.Compact(problems), "\n  "))
	}
}

// The core's libraries lie beneath it: of the module they import only
// one another and machinery (whose owners the machinery test checks),
// never the core, a feature or a surface, so a rule there (the authority
// rules) cannot depend on what it governs.
func TestCoreLibrariesStayBeneathTheCore(t *testing.T) {
	var problems []string
	for dir, files := range goFiles(t) {
		if !coreLibraries[dir] {
			continue
		}
		for _, f := range files {
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				if local, ours := strings.CutPrefix(path, module); ours && !coreLibraries[local] && machinery[local] == nil {
					problems = append(problems, dir+" imports "+local+": a core library imports only other core libraries and machinery")
				}
			}
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatalf("core libraries out of place (substrate/layout_test.go):\n  %s", strings.Join(slices.Compact(problems), "\n  "))
	}
}
