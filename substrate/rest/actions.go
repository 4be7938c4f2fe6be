package rest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/errs"
)

func (a *api) registerAction(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var def substrate.ActionDef
	if !a.decode(w, r, &def, false) {
		return
	}
	res, err := a.svc.RegisterAction(r.Context(), p, r.PathValue("room"), def)
	a.reply(w, r, createdOr(res != nil && res.Created), res, err)
}

func createdOr(created bool) int {
	if created {
		return http.StatusCreated
	}
	return http.StatusOK
}

func (a *api) listActions(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	list, err := a.svc.ListActions(r.Context(), p, r.PathValue("room"))
	a.reply(w, r, http.StatusOK, map[string]any{"actions": list}, err)
}

func (a *api) getAction(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	act, err := a.svc.GetAction(r.Context(), p, r.PathValue("room"), r.PathValue("action"))
	a.reply(w, r, http.StatusOK, act, err)
}

func (a *api) deleteAction(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	seq, err := a.svc.DeleteAction(r.Context(), p, r.PathValue("room"), r.PathValue("action"))
	a.reply(w, r, http.StatusOK, map[string]any{"deleted": true, "id": r.PathValue("action"), "seq": seq}, err)
}

func (a *api) invoke(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Params json.RawMessage `json:"params,omitempty"`
	}
	if !a.decodeBody(w, r, &body, true, false) {
		return
	}
	res, err := a.svc.Invoke(r.Context(), p, r.PathValue("room"), r.PathValue("action"), body.Params)
	a.reply(w, r, http.StatusOK, res, err)
}

func (a *api) registerView(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var def substrate.ViewDef
	if !a.decode(w, r, &def, false) {
		return
	}
	res, err := a.svc.RegisterView(r.Context(), p, r.PathValue("room"), def)
	a.reply(w, r, createdOr(res != nil && res.Created), res, err)
}

func (a *api) listViews(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	list, err := a.svc.ListViews(r.Context(), p, r.PathValue("room"))
	a.reply(w, r, http.StatusOK, map[string]any{"views": list}, err)
}

func (a *api) getView(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	v, err := a.svc.GetView(r.Context(), p, r.PathValue("room"), r.PathValue("view"))
	a.reply(w, r, http.StatusOK, v, err)
}

func (a *api) deleteView(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	seq, err := a.svc.DeleteView(r.Context(), p, r.PathValue("room"), r.PathValue("view"))
	a.reply(w, r, http.StatusOK, map[string]any{"deleted": true, "id": r.PathValue("view"), "seq": seq}, err)
}

func (a *api) context(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	q, err := substrate.ParseContextRequest(r.URL.Query().Get)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	env, err := a.svc.Context(r.Context(), p, r.PathValue("room"), q)
	a.reply(w, r, http.StatusOK, env, err)
}

func (a *api) wait(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	// The request is parsed in a call that has returned by the time the
	// wait sleeps: whatever this frame holds, each parked wait's stack
	// holds too (substrate.Service.Wait).
	q, err := waitRequest(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.svc.Wait(r.Context(), p, q.room, q.condition, q.timeout, q.ctx)
	a.reply(w, r, http.StatusOK, res, err)
}

// waitReq is what GET /rooms/:id/wait asks for.
type waitReq struct {
	room, condition string
	timeout         time.Duration
	ctx             substrate.ContextRequest
}

// waitRequest parses a wait's query: its context parameters and timeout.
func waitRequest(r *http.Request) (*waitReq, error) {
	query := r.URL.Query()
	q, err := substrate.ParseContextRequest(query.Get)
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if v := query.Get("timeout"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return nil, errs.New(errs.InvalidField, "timeout=%q is not a number of milliseconds", v).WithHint("e.g. timeout=25000 (capped at the server's maximum)")
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	return &waitReq{room: r.PathValue("room"), condition: query.Get("condition"), timeout: timeout, ctx: q}, nil
}

func (a *api) eval(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	var body struct {
		Expr   string          `json:"expr"`
		Params json.RawMessage `json:"params,omitempty"`
	}
	if !a.decode(w, r, &body, false) {
		return
	}
	res, err := a.svc.Eval(r.Context(), p, r.PathValue("room"), body.Expr, body.Params)
	a.reply(w, r, http.StatusOK, res, err)
}

func (a *api) help(w http.ResponseWriter, r *http.Request, p *substrate.Principal) {
	res, err := a.svc.Help(r.Context(), p, r.PathValue("room"), r.URL.Query().Get("key"))
	a.reply(w, r, http.StatusOK, res, err)
}
