package defs

// What an expression's source names, found once per source. A context
// read of an agent asks, for every view of the room, whether it reads the
// clock, agents or messages, which scopes, views and state entries it names
// (since_your_last_read, a wait's delta): regular expressions over the same
// few sources on every read were a seventh of an agent's read. The answers
// depend on the source text alone, never on a reader or a room, so one
// process-wide table serves every read.

import (
	"regexp"
	"slices"

	"github.com/syncsubstrate/sync/substrate/internal/memo"
)

// Facts are what one expression's source names. Shared: read-only.
type Facts struct {
	// AnyTime: src reads something that changes without a write to a
	// scope it names (gateReadsAnyTime, or state whole).
	AnyTime bool
	Scopes  []string    // scopeRef: the scopes read (state.x, state.?x)
	Views   []string    // viewRefs: the views named, in order, repeats included
	Paths   [][2]string // statePath: scope and key of each entry named
	// Actions are the actions named (actions.<id>, actions.?<id>,
	// actions["id"]); AllActions: actions read whole (passed along,
	// iterated, counted), which any action's change may change.
	Actions    []string
	AllActions bool
	// WholeState: state read whole (passed along, iterated) or by a
	// computed name (state[x]), so any scope may be read.
	WholeState bool
}

// actionRef finds each use of actions and the action it names, if any.
// It may match a string literal: a delta may show too much, never too
// little.
var actionRef = regexp.MustCompile(`(^|[^.\w])actions\b\s*(?:\.\s*\??\s*([A-Za-z_]\w*)|\[\s*"([^"\\]+)"\s*\])?`)

// stateComputed finds state read by a computed scope name.
var stateComputed = regexp.MustCompile(`(^|[^.\w])state\s*\[`)

// srcFactsTable is every source's facts, process-wide: they depend on
// the source text alone. Past maxSrcFacts it starts over.
var srcFactsTable = memo.NewTable[string, *Facts](maxSrcFacts)

// maxSrcFacts bounds the table (sources are few per room, rooms many).
const maxSrcFacts = 8192

// FactsOf is what src names (an empty source names nothing).
func FactsOf(src string) *Facts {
	if src == "" {
		return &noFacts
	}
	return srcFactsTable.Get(src, scanFacts)
}

var noFacts Facts

// scanFacts reads src with the regular expressions (the one place they
// run over an expression's source for these questions).
func scanFacts(src string) *Facts {
	f := &Facts{AnyTime: scanReadsAnyTime(src), WholeState: stateComputed.MatchString(src)}
	for _, m := range stateUse.FindAllStringSubmatch(src, -1) {
		switch m[3] {
		case "", "all", "exists", "exists_one", "map", "filter":
			f.WholeState = true
		}
	}
	for _, m := range scopeRef.FindAllStringSubmatch(src, -1) {
		f.Scopes = append(f.Scopes, m[1])
	}
	for _, m := range viewRefs.FindAllStringSubmatch(src, -1) {
		f.Views = append(f.Views, m[1]+m[2])
	}
	for _, m := range statePath.FindAllStringSubmatch(src, -1) {
		f.Paths = append(f.Paths, [2]string{m[1], m[2]})
	}
	for _, m := range actionRef.FindAllStringSubmatch(src, -1) {
		switch id := m[2] + m[3]; id {
		case "", "all", "exists", "exists_one", "map", "filter":
			f.AllActions = true
		default:
			f.Actions = append(f.Actions, id)
		}
	}
	// Every reader gets these very slices (the core's ViewRefs,
	// StatePaths): clipped, an append by one of them copies instead of
	// writing into the table's spare capacity under another reader.
	f.Scopes, f.Views, f.Paths = slices.Clip(f.Scopes), slices.Clip(f.Views), slices.Clip(f.Paths)
	return f
}

// scopeRef finds the scopes an expression reads (state.x, state.?x).
var scopeRef = regexp.MustCompile(`state\.\??([A-Za-z_][\w:@-]*)`)

// viewRefs finds views.<id> and views["id"] in an expression.
var viewRefs = regexp.MustCompile(`views(?:\.([A-Za-z_][A-Za-z0-9_]*)|\["([^"\\]+)"\])`)

// statePath finds state.<scope>.<key> (or .?key, or ["key"]) in an
// expression's source: what the room's rules read.
var statePath = regexp.MustCompile(`state\.([A-Za-z_][\w:@.-]*?)(?:\.\??|\[")([A-Za-z_0-9][\w:@.-]*?)(?:"\]|\b)`)

// gateReadsAnyTime finds what changes without a write the delta can see:
// the clock, presence, messages (and their read marks), state by a
// computed name. It may match a string literal: a delta may show too
// much, never too little.
var gateReadsAnyTime = regexp.MustCompile(`(^|[^.\w])(now|agents|messages)\b|state\s*\[`)

// stateUse finds each use of state and what follows it.
var stateUse = regexp.MustCompile(`(^|[^.\w])state\b\s*(\.\s*\??\s*([A-Za-z_]\w*))?`)

func scanReadsAnyTime(src string) bool {
	if gateReadsAnyTime.MatchString(src) {
		return true
	}
	for _, m := range stateUse.FindAllStringSubmatch(src, -1) {
		switch m[3] {
		case "", "all", "exists", "exists_one", "map", "filter":
			return true
		}
	}
	return false
}
