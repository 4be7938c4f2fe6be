package mcp

import (
	"context"
	"maps"

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

// LoomOut is what sync_loom returns: the text to read, assembled by the
// loom's intermediary (loom.ForModel: memory block, ambient line, what
// faded, results within budget, marker) and failed commands as ✗ lines. (tools/list is paid for in every
// conversation: the schema stays this small; the REST endpoint returns
// each step's outcome as well.)
type LoomOut struct {
	Text string `json:"text,omitempty"`
}

// loomDescription is what a model knows of the loom before calling it:
// what it is for, when to use it, and the commands with their meaning
// (seed 002's loom-aware addendum, in brief; the sync_loom prompt and the
// onboarding of an agent's first call give the rest).
const loomDescription = "The loom (seed 002): trees of text that people, base models and you write together, " +
	"branching and comparing continuations. Use it to read or extend a story or document tree, annotate, and keep your own working memory. " +
	"Put commands one per line after →; each result starts with your memory and position ⟨node depth siblings …⟩. " +
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
			return &LoomOut{Text: res.Text}, nil
		})
	// tools/list is paid for in every conversation: the input schema keeps
	// its two properties only. Arguments are still decoded strictly
	// (unknown ones refused), and empty commands are answered with the
	// nearest command, help.
	in := t.def.InputSchema.(*jsonschema.Schema)
	in.Required, in.AdditionalProperties = nil, nil
	return t
}

// withoutSteps is err without the per-line steps REST returns: a model
// reads every line's outcome in the message already, once.
func withoutSteps(err error) error {
	e := errs.From(err)
	if _, ok := e.Details["steps"]; !ok {
		return err
	}
	c := *e
	c.Details = maps.Clone(e.Details)
	delete(c.Details, "steps")
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
