package mcp

import (
	"context"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/substrate/loom"
)

// The loom (seed 002) for models: one tool taking the seed's → command
// lines as written. The domain (parsing, authority, rendering) is the
// loom package's (substrate/loom), which the REST API calls too: people
// and models have the same operations.

type loomIn struct {
	Commands string `json:"commands,omitempty"`
}

// LoomOut is what sync_loom returns: the text to read, ambient line first
// and failed commands as ✗ lines. (tools/list is paid for in every
// conversation: the schema stays this small; the REST endpoint returns
// each step's outcome as well.)
type LoomOut struct {
	Text string `json:"text,omitempty"`
}

func loomTool() tool {
	t := typed(&sdk.Tool{Name: "sync_loom", Title: "Loom", Annotations: &sdk.ToolAnnotations{},
		Description: "→ view 23, → help"}, nil,
		func(ctx context.Context, c *call, in *loomIn) (*LoomOut, error) {
			room := c.room("")
			p, err := c.principal(ctx, room)
			if err != nil {
				return nil, err
			}
			res, err := loom.Of(c.opt.Substrate).Run(ctx, p, room, in.Commands)
			if err != nil {
				return nil, err
			}
			return &LoomOut{Text: res.Text}, nil
		})
	// tools/list is paid for in every conversation and had 66 tokens left
	// for this tool: the input schema keeps its one property only.
	// Arguments are still decoded strictly (unknown ones refused), and
	// empty commands are answered with the nearest command, help.
	in := t.def.InputSchema.(*jsonschema.Schema)
	in.Required, in.AdditionalProperties = nil, nil
	return t
}
