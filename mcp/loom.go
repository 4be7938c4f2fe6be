package mcp

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/loom"
)

// The loom (seed 002) for models: one tool taking the seed's → command
// lines as written. The domain (parsing, authority, rendering) is the
// loom package's (substrate/loom), which the REST API calls too: people
// and models have the same operations.

type loomIn struct {
	Commands string `json:"commands,omitempty"`
	Room     string `json:"room,omitempty" jsonschema:"Room id (default: your current room)."`
}

// LoomOut is what sync_loom returns, as the loom's intermediary
// assembled it (loom.ForModel), in pieces a model reads without unpicking
// one escaped string: where the caller is, each command's result within
// budget, the operational memory, what faded and the marker. Text that
// runs over lines is a list of its lines, so the JSON a host hands the
// model (structuredContent) holds no "\n" escapes. The order is what
// matters first: orientation on a first call, position, results, then
// memory.
type LoomOut struct {
	// Onboarding is the orientation of the agent's first loom call.
	Onboarding []string `json:"onboarding,omitempty"`
	// Position is where the caller is after the call.
	Position *LoomPosition `json:"position,omitempty"`
	// Results are the commands with their results, in order.
	Results []LoomResult `json:"results"`
	// Memory is the operational memory block's lines.
	Memory []string `json:"memory,omitempty"`
	// Faded names what the previous result showed that this one does not.
	Faded string `json:"faded,omitempty"`
	// Marker ends the result: its number, shown once.
	Marker string `json:"marker,omitempty"`
}

// LoomPosition is the ambient metadata (seed 002) as fields.
type LoomPosition struct {
	Tree        int64  `json:"tree"`
	TreeName    string `json:"tree_name"`
	Node        int64  `json:"node"`
	Depth       int    `json:"depth"`
	Branch      string `json:"branch"`
	Siblings    int    `json:"siblings"`
	Annotations int    `json:"annotations"`
	Links       int    `json:"links"`
	// Others are the other participants active in the tree:
	// "model claude in branch 5.2 at node 22".
	Others []string `json:"others,omitempty"`
}

// LoomResult is one command's outcome.
type LoomResult struct {
	Command string   `json:"command"`
	Result  []string `json:"result"`
}

// loomOut is res as LoomOut.
func loomOut(res *loom.Result) *LoomOut {
	out := &LoomOut{Results: make([]LoomResult, 0, len(res.Steps))}
	parts := res.Parts
	if parts == nil {
		parts = &loom.ModelParts{}
	}
	out.Onboarding = lines(parts.Onboard, "")
	if ps := res.Position; ps != nil {
		out.Position = &LoomPosition{Tree: ps.Tree, TreeName: ps.TreeName, Node: ps.Node, Depth: ps.Depth, Branch: ps.Branch,
			Siblings: ps.Siblings, Annotations: ps.Annotations, Links: ps.Links}
		for _, o := range ps.Others {
			out.Position.Others = append(out.Position.Others, fmt.Sprintf("%s %s in branch %s at node %d", o.Kind, o.Actor, o.Branch, o.Node))
		}
	}
	for i, st := range res.Steps {
		text := st.Text
		if i < len(parts.Steps) {
			text = parts.Steps[i]
		}
		out.Results = append(out.Results, LoomResult{Command: st.Command, Result: lines(text, "")})
	}
	out.Memory = lines(strings.TrimPrefix(parts.Memory, "⟨memory⟩"), "  ")
	out.Faded = strings.Trim(parts.Faded, "⟨⟩")
	out.Marker = strings.Trim(parts.Marker, "⟨⟩")
	return out
}

// lines splits text into its lines, each without the indent pad, and
// without blank lines at either end.
func lines(text, pad string) []string {
	text = strings.Trim(text, "\n")
	if strings.TrimSpace(text) == "" {
		return nil
	}
	out := strings.Split(text, "\n")
	for i, l := range out {
		out[i] = strings.TrimPrefix(strings.TrimRight(l, " "), pad)
	}
	return out
}

// loomDescription is what a model knows of the loom before calling it:
// what it is for, when to use it, and the commands with their meaning
// (seed 002's loom-aware addendum, in brief; the sync_loom prompt and the
// onboarding of an agent's first call give the rest).
const loomDescription = "The loom (seed 002): trees of text that people, base models and you write together, " +
	"branching and comparing continuations. Use it to read or extend a story or document tree, annotate, and keep your own working memory. " +
	"Put commands one per line after →; a result gives your position, each command's result and your memory; a failed line stops the call. " +
	"view N [full] · view branch:B as:prose · list N continuations|annotations|links · tree · switch to N · " +
	"add \"text\" (child of your node) · branch from N · continue from N [n:3] (base model writes) · annotate N \"note\" · link N to M · " +
	"edit N \"text\" · read|write doc:\"name\" · pin N (keep in memory) · stash \"label\" \"text\" · recall \"label\" · drop … · memory · " +
	"think … ← (private) · yield (end your turn) · help"

func loomTool() tool {
	// Annotations left at MCP's defaults on purpose, since they are what
	// the loom is: it writes (not read-only), "write doc" replaces a
	// document (destructive), a repeated add adds again (not idempotent),
	// and "continue from" asks a base model outside sync (open world).
	t := typed(&sdk.Tool{Name: "sync_loom", Title: "Loom", Annotations: &sdk.ToolAnnotations{},
		Description: loomDescription}, nil,
		func(ctx context.Context, c *call, in *loomIn) (*LoomOut, error) {
			room := c.room(in.Room)
			p, err := c.principal(ctx, room)
			if err != nil {
				return nil, err
			}
			res, err := loom.Of(c.opt.Substrate).ForModel(ctx, p, room, in.Commands)
			if err != nil {
				return nil, withoutSteps(err)
			}
			return loomOut(res), nil
		})
	// tools/list is paid for in every conversation: the input schema keeps
	// its two properties only. Arguments are still decoded strictly
	// (unknown ones refused), and empty commands are answered with the
	// nearest command, help.
	in := t.def.InputSchema.(*jsonschema.Schema)
	in.Required, in.AdditionalProperties = nil, nil
	return t
}

// withoutSteps is err with the per-line steps REST returns as results a
// model reads: the message keeps its first paragraph (which line failed,
// what ran, what did not), and each line's outcome is a result of its
// lines, as on success, instead of one escaped string.
func withoutSteps(err error) error {
	e := errs.From(err)
	steps, ok := e.Details["steps"].([]loom.Step)
	if !ok {
		return err
	}
	c := *e
	c.Details = maps.Clone(e.Details)
	delete(c.Details, "steps")
	if head, _, found := strings.Cut(c.Message, "\n\n"); found {
		c.Message = head
	}
	results := make([]LoomResult, 0, len(steps))
	for _, st := range steps {
		results = append(results, LoomResult{Command: st.Command, Result: lines(st.Text, "")})
	}
	c.Details["results"] = results
	return &c
}

// addLoomPrompt offers the loom-aware addendum (seed 002) as the prompt
// "loom", for a host to put in the model's system prompt.
func addLoomPrompt(srv *sdk.Server, opt *Options) {
	srv.AddPrompt(&sdk.Prompt{Name: "loom", Title: "Loom-aware addendum",
		Description: "How to work in a room's loom with sync_loom: the environment, what each result holds, the commands."},
		func(context.Context, *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Description: "The loom-aware addendum (seed 002)",
				Messages: []*sdk.PromptMessage{{Role: "user", Content: &sdk.TextContent{Text: loom.Of(opt.Substrate).Addendum()}}}}, nil
		})
}
