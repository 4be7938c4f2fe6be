package rest

import (
	"encoding/json"
	"net/http"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
	"github.com/syncsubstrate/sync/substrate/trajectory"
)

// trajectoryFlushEvery is how many lines go out between flushes.
const trajectoryFlushEvery = 100

// trajectory streams the room's audit entries as JSON Lines, one
// ⟨state, action, next-state⟩ step per line.
func (a *api) trajectory(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	q := r.URL.Query()
	var tq trajectory.Query
	var err error
	if tq.After, err = intParam(q.Get("after"), "after"); err != nil {
		a.fail(w, r, err)
		return
	}
	if tq.Limit, err = intParam(q.Get("limit"), "limit"); err != nil {
		a.fail(w, r, err)
		return
	}
	if q.Has("limit") && tq.Limit == 0 {
		a.fail(w, r, errs.New(errs.InvalidField, "limit=0 asks for nothing").WithHint("send limit between 1 and %d, or omit it", trajectory.MaxLimit).With("field", "limit"))
		return
	}
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	lines := 0
	err = trajectory.Stream(r.Context(), a.svc, p, r.PathValue("room"), tq, func(st *trajectory.Step) error {
		if lines == 0 {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
		}
		lines++
		if err := enc.Encode(st); err != nil {
			return err
		}
		if lines%trajectoryFlushEvery == 0 {
			return rc.Flush()
		}
		return nil
	})
	switch {
	case err != nil && lines == 0:
		a.fail(w, r, err)
	case err != nil:
		// The status is sent: say on a last line that the stream broke.
		a.log.Warn("trajectory stream ended early", "room", r.PathValue("room"), "lines", lines, "err", err)
		e := errs.From(err).In(Words)
		_ = enc.Encode(map[string]any{"error": e.Code, "message": e.Message, "hint": "read on with after=<the last seq received>"})
	case lines == 0:
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
	}
}

// history lists one key's versions, newest first.
func (a *api) history(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	q := r.URL.Query()
	hq := trajectory.HistoryQuery{Scope: q.Get("scope"), Key: q.Get("key")}
	var err error
	if hq.Before, err = intParam(q.Get("before"), "before"); err != nil {
		a.fail(w, r, err)
		return
	}
	if hq.Limit, err = intParam(q.Get("limit"), "limit"); err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := trajectory.History(r.Context(), a.svc, p, r.PathValue("room"), hq)
	a.reply(w, r, http.StatusOK, res, err)
}

// replay answers the room's mutable state rebuilt at a seq.
func (a *api) replay(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	v := r.URL.Query().Get("seq")
	if v == "" {
		a.fail(w, r, errs.New(errs.InvalidField, "replay needs seq").WithHint("send GET /rooms/:id/replay?seq=<seq>; GET /rooms/:id gives the latest seq").With("field", "seq"))
		return
	}
	seq, err := intParam(v, "seq")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := trajectory.Replay(r.Context(), a.svc, p, r.PathValue("room"), seq)
	a.reply(w, r, http.StatusOK, res, err)
}
