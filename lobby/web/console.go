// The CEL console on the room page (?eval=expr).

package web

import (
	"context"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// console adds to the room page's data an expression evaluated with the
// reader's own authority, as sync_eval_cel would for them: its result, or
// what was wrong with it. Only an internal failure is returned.
func (wb *Web) console(ctx context.Context, p *substrate.Principal, roomID, src string, data map[string]any) error {
	data["Eval"] = src
	res, err := wb.opt.Substrate.Eval(ctx, p, roomID, src, nil)
	if err != nil {
		e := errs.From(err)
		if e.Code == errs.Internal {
			return err
		}
		data["EvalError"] = e.Message
		return nil
	}
	data["EvalResult"] = res
	return nil
}
