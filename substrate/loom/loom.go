package loom

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// The loom (seed 002): trees of immutable nodes that people and models
// navigate and extend with the same commands. A loom lives in a room:
//
//   - _loom (mutable, communal, system-written): tree:<id> records (name,
//     counters), trees (the tree counter), perm:<agent> (loom permissions,
//     set by room authority), gen:<n> (queued generation requests) and gens.
//   - _loom.<tree> (append entries, read by key): n:<id> nodes,
//     c:<parent>:<k> the k-th child of a node, a:<node>:<k> annotations,
//     l:<node>:<k> links. Append entries are not part of the room's
//     snapshot, so a tree of 100,000 nodes costs a read nothing until a
//     command addresses it, and every lookup is by primary key (exact keys,
//     never ranges, so it does not depend on the database's collation).
//   - _loom.live (mutable): lease:<tree>:<branch> (the turn on a branch),
//     at:<tree>:<actor> (presence), bm:<tree>:<label> (bookmarks).
//   - _loom.doc (mutable): d:<name> documents, as lines.
//   - the agent's own scope: loom:pos, loom:pins, loom:stash:<label>,
//     loom:onboarded (mutable) and loom:t:… (trace) and loom:think:…
//     (append): operational memory nobody else reads.
//
// Scopes starting with _loom are written only through these operations
// and hidden from contexts' state (they have their own surface).
const (
	scopeLoom     = "_loom"
	scopeLoomLive = "_loom.live"
	scopeLoomDoc  = "_loom.doc"
)

func treeScope(tree int64) string { return "_loom." + strconv.FormatInt(tree, 10) }

func isLoomScope(scope string) bool {
	return scope == scopeLoom || strings.HasPrefix(scope, scopeLoom+".")
}

// Loom permissions (seed 002 §Permissions).
const (
	PermAware    = "loom_aware"
	PermWrite    = "loom_write"
	PermGenerate = "loom_generate"
	PermDocRead  = "doc_read"
	PermDocWrite = "doc_write"
)

// Permissions are all of them, in the seed's order.
var Permissions = []string{PermAware, PermWrite, PermGenerate, PermDocRead, PermDocWrite}

// defaultLoomPerms are an agent's permissions until room authority sets
// them: it may look and read, not write.
var defaultLoomPerms = []string{PermAware, PermDocRead}

// Options configure the loom.
type Options struct {
	// GeneratorURL is an OpenAI-compatible completions endpoint
	// (…/v1/completions). Empty: continue queues a generation request in
	// room state for an external agent or person (→ fulfil).
	GeneratorURL string
	// GeneratorModel is sent as "model". Default "base".
	GeneratorModel string
	// GeneratorKey, when set, is sent as a bearer token.
	GeneratorKey string
	// MaxTokens caps tokens:N per continuation. Default 256.
	MaxTokens int
	// MaxN caps n:N continuations per command. Default 4.
	MaxN int
	// GeneratorTimeout bounds one generator call. Default 60 s.
	GeneratorTimeout time.Duration
	// LeaseTTL is how long a writer keeps its turn on a branch after its
	// last write. Default 60 s.
	LeaseTTL time.Duration
	// PresenceWindow is how long a participant shows as active after its
	// last command in a tree. Default 2 min.
	PresenceWindow time.Duration
	// ResultChars is the size above which a result is summarised with the
	// command that returns the rest. Default 4,000.
	ResultChars int
	// MemoryTokens is the budget of the operational memory block a model
	// gets with every result (ForModel). Default 400.
	MemoryTokens int
	// ResultTokens is the size above which ForModel summarises a
	// command's result (unless the command asked for full). Default 600.
	ResultTokens int
	// Client makes generator calls. Default http.DefaultClient.
	Client *http.Client
}

func (o *Options) fill() {
	if o.GeneratorModel == "" {
		o.GeneratorModel = "base"
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 256
	}
	if o.MaxN <= 0 {
		o.MaxN = 4
	}
	if o.GeneratorTimeout <= 0 {
		o.GeneratorTimeout = 60 * time.Second
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 60 * time.Second
	}
	if o.PresenceWindow <= 0 {
		o.PresenceWindow = 2 * time.Minute
	}
	if o.ResultChars <= 0 {
		o.ResultChars = 4000
	}
	if o.MemoryTokens <= 0 {
		o.MemoryTokens = 400
	}
	if o.ResultTokens <= 0 {
		o.ResultTokens = 600
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	// Redirects are not followed: Go's client keeps Authorization on a
	// redirect to another port or scheme of the same host, so the
	// generator's key would reach a server it was not configured for.
	c := *o.Client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	o.Client = &c
}

// Loom runs the → commands of one Service's rooms.
type Loom struct {
	svc *substrate.Service
	opt Options
	log *slog.Logger
}

type featureKey struct{}

// Attach configures the loom of svc with opt; call it once, before the
// service serves (later calls return the loom already attached).
func Attach(svc *substrate.Service, opt Options) *Loom {
	return svc.Feature(featureKey{}, func() any {
		opt.fill()
		return &Loom{svc: svc, opt: opt, log: svc.Logger()}
	}).(*Loom)
}

// Of is the loom of svc: the one Attach configured, else one with the
// default options (queued generation requests, no generator) that is not
// attached, so that Attach, whenever it comes, still configures the loom.
func Of(svc *substrate.Service) *Loom {
	if l, ok := svc.Feature(featureKey{}, nil).(*Loom); ok {
		return l
	}
	opt := Options{}
	opt.fill()
	return &Loom{svc: svc, opt: opt, log: svc.Logger()}
}

// Node is one node of a tree.
type Node struct {
	ID      int64  `json:"id"`
	Parent  int64  `json:"parent,omitempty"`
	Content string `json:"content"`
	// By is the agent (or "_room") that wrote it, or for a configured
	// generator "gen:<model>".
	By string `json:"by"`
	// Model is true for model-written content (continuations, and agents
	// whose loom kind is model), false for a person's.
	Model bool `json:"model"`
	// Edge is primary, context or instruction.
	Edge string `json:"edge"`
	// Branch names the line the node is on: the first child of a node
	// continues its branch, the k-th (k>1) starts branch "<parent>.<k>".
	Branch     string    `json:"branch"`
	Depth      int       `json:"depth"`
	K          int       `json:"k,omitempty"`
	EditedFrom int64     `json:"edited_from,omitempty"`
	For        string    `json:"requested_by,omitempty"`
	At         time.Time `json:"created_at"`
}

// Result is what a run of commands returns.
type Result struct {
	// Text is every step's text, for a model's context.
	Text  string `json:"text"`
	Steps []Step `json:"steps"`
	// Errors counts the steps that failed.
	Errors int `json:"errors"`
	// Position is where the caller is after the run.
	Position *Position `json:"position,omitempty"`
	// Parts are ForModel's pieces of Text (nil from Run).
	Parts *ModelParts `json:"-"`
	// onboard is the orientation an agent's first command brought.
	onboard string
}

// Step is one command's outcome.
type Step struct {
	Command string    `json:"command"`
	Verb    string    `json:"verb"`
	OK      bool      `json:"ok"`
	Text    string    `json:"text"`
	Error   errs.Code `json:"error,omitempty"`
	Nodes   []Node    `json:"nodes,omitempty"`
}

// Position is the ambient metadata of seed 002 §Ambient Context.
type Position struct {
	Tree        int64  `json:"tree"`
	TreeName    string `json:"tree_name"`
	Node        int64  `json:"node"`
	Depth       int    `json:"depth"`
	Siblings    int    `json:"siblings"`
	Annotations int    `json:"annotations"`
	Links       int    `json:"links"`
	Branch      string `json:"branch"`
	// Others are the other participants active in this tree.
	Others []Presence `json:"others,omitempty"`
	// Ambient is the metadata line: ⟨node:47 depth:12 siblings:2 …⟩.
	Ambient string `json:"ambient"`
}

// Presence is another participant active in the tree.
type Presence struct {
	Actor  string    `json:"actor"`
	Kind   string    `json:"kind"`
	Branch string    `json:"branch"`
	Node   int64     `json:"node"`
	At     time.Time `json:"at"`
}
