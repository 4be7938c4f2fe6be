// The audit scrubber on the room page (?at=seq).

package web

import (
	"context"
	"strconv"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/trajectory"
)

// scrub adds to the room page's data the state as it was at seq at, from
// the audit log (trajectory.Replay: room authority only).
func (wb *Web) scrub(ctx context.Context, p *substrate.Principal, roomID, at string, data map[string]any) error {
	seq, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return errs.New(errs.InvalidField, "at=%q is not a seq", at).WithHint("pick a seq between 1 and the room's current seq")
	}
	past, err := trajectory.Replay(ctx, wb.opt.Substrate, p, roomID, seq)
	if err != nil {
		return err
	}
	data["At"], data["Scopes"], data["More"] = seq, byScope(past.Entries), past.More
	return nil
}
