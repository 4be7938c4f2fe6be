package mcp

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/lobby"
	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/substrate/errs"
)

// A sync_wait as a task (issue 48): the tasks extension of the protocol
// revision 2026-07-28 (io.modelcontextprotocol/tasks, SEP-2663). A client
// that declares the extension in a tools/call's _meta capabilities gets a
// task at once instead of a call held for the wait; the wait runs in this
// process as a blocking call's would (the substrate's Wait, the same
// handler), and its result, the CallToolResult a blocking call returns,
// is kept in mcp_tasks for tasks/get. A client that declares nothing gets
// the blocking wait as before.

const (
	tasksExtension = "io.modelcontextprotocol/tasks"
	// MaxOpenTasks is how many tasks one grant may have working at once
	// in one room: each holds a parked wait, as a blocking call does, but
	// a client can start tasks faster than it could hold calls. (Per room,
	// so that the count is read on the room's shard on Citus; a grant's
	// rooms are the few its consent named.)
	MaxOpenTasks = 16
	// MaxRoomTasks is how many tasks may be working in one room at once,
	// of all grants: a room's waits wake together at each of its commits.
	MaxRoomTasks = 4096
	// taskPollMS is the polling interval a task suggests: a wait's end
	// reaches the model within about a second.
	taskPollMS = 1000
	// taskKeep is how long a task is kept from its creation (its ttlMs):
	// long past any wait's end (45 s at most), for a client that polls
	// again after a pause.
	taskKeep = time.Hour
)

// taskLease is how long a process's claim to run a task lasts without
// renewal; renewed every taskLease/3. A poll that finds it run out (the
// process ended) runs the wait again. A test shortens it.
var taskLease = 30 * time.Second

// maxOpenTasks and maxRoomTasks are MaxOpenTasks and MaxRoomTasks, which
// tests change.
var maxOpenTasks, maxRoomTasks = MaxOpenTasks, MaxRoomTasks

// tasks runs and answers the tasks of one endpoint.
type tasks struct {
	opt  *Options
	db   *store.DB
	wait sdk.ToolHandler // sync_wait's handler: a task's result is a blocking call's

	mu      sync.Mutex
	running map[string]*runningTask // task key → the wait this process runs
	renewer bool                    // the lease renewal loop is running
	done    []finished              // results for the writer to store
	writing bool                    // the writer is running
	closed  bool                    // the shutdown began: no new waits here
}

type runningTask struct {
	room   string
	cancel context.CancelFunc
}

func newTasks(opt *Options, wait sdk.ToolHandler) *tasks {
	t := &tasks{opt: opt, db: opt.DB, wait: wait, running: map[string]*runningTask{}}
	if opt.Shutdown != nil {
		// Waits stop as the shutdown begins and give their lease up: a
		// poll to another process runs them there.
		context.AfterFunc(opt.Shutdown, t.stopAll)
	}
	return t
}

// taskResult is a CreateTaskResult (resultType "task") and, with
// resultType "complete", a GetTaskResult: the task, and its end.
type taskResult struct {
	sdk.ResultBase
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          int64           `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs,omitempty"`
	Result         json.RawMessage `json:"result,omitempty"`
}

// ackResult answers tasks/cancel: an empty acknowledgement.
type ackResult struct {
	sdk.ResultBase
	ResultType string `json:"resultType"`
}

// taskParams are the params of tasks/get and tasks/cancel.
type taskParams struct {
	sdk.ParamsBase
	TaskID string `json:"taskId"`
}

// register adds the task methods and the middleware that answers them and
// turns a declaring client's sync_wait into a task.
func (t *tasks) register(srv *sdk.Server) {
	// The methods are answered by the middleware, which has the caller
	// (a custom method's handler is not given the request's token); these
	// only make the SDK accept them.
	refuse := func(context.Context, *sdk.ServerSession, *taskParams) (*ackResult, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "tasks are answered before this"}
	}
	for _, m := range []string{"tasks/get", "tasks/cancel"} {
		if err := sdk.AddReceivingCustomMethod(srv, m, refuse); err != nil {
			panic(err) // a method name the SDK took as standard: a build-time fault
		}
	}
	srv.AddReceivingMiddleware(t.middleware)
}

func (t *tasks) middleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		switch method {
		case "tools/call":
			if call, ok := req.(*sdk.CallToolRequest); ok && call.Params != nil && call.Params.Name == "sync_wait" && declaresTasks(call.Params.Meta) {
				if res, ok := t.start(ctx, call); ok {
					return res, nil
				}
			}
		case "tasks/get", "tasks/cancel":
			p, _ := req.GetParams().(*taskParams)
			who, ok := callerIn(req.GetExtra())
			if p == nil || !ok {
				return nil, taskNotFound()
			}
			if method == "tasks/get" {
				return t.get(ctx, who, req.GetExtra(), p.TaskID)
			}
			return t.cancel(ctx, who, p.TaskID)
		}
		return next(ctx, method, req)
	}
}

// declaresTasks reports whether a request's _meta declares the tasks
// extension in its client capabilities (the 2026-07-28 way: per request).
func declaresTasks(meta sdk.Meta) bool {
	caps, _ := meta[sdk.MetaKeyClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[tasksExtension]
	return ok
}

func callerIn(extra *sdk.RequestExtra) (lobby.Caller, bool) {
	if extra == nil || extra.TokenInfo == nil {
		return lobby.Caller{}, false
	}
	who, ok := extra.TokenInfo.Extra[tokenExtra].(lobby.Caller)
	return who, ok
}

// taskNotFound is the extension's error for an unknown task id, the same
// for one that never was and one of another grant's.
func taskNotFound() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Failed to retrieve task: Task not found"}
}

// newTaskID is a task id for a task in room: 130 random bits, then the
// room, so that a poll finds the task on the room's shard (Citus) without
// asking every shard. The room is the caller's own and no secret; the
// random part is what makes the id unguessable, and only the whole id's
// hash is stored.
func newTaskID(room string) string {
	return rand.Text() + "." + base64.RawURLEncoding.EncodeToString([]byte(room))
}

// taskRoom is the room a task id names (ok false: not an id of ours).
func taskRoom(id string) (room string, ok bool) {
	_, enc, found := strings.Cut(id, ".")
	if !found {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) == 0 {
		return "", false
	}
	return string(b), true
}

func taskKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// waitArgs are what start reads of a sync_wait's arguments: its room
// (the session's when none), the rest is the handler's.
type waitArgs struct {
	Room string `json:"room"`
}

// start makes a sync_wait a task: it answers ok=false when the call
// should run as a blocking one (no caller, no room: the blocking call
// answers the error at once), or the task, or the limit's error as the
// call's result.
func (t *tasks) start(ctx context.Context, call *sdk.CallToolRequest) (sdk.Result, bool) {
	who, ok := callerIn(call.Extra)
	if !ok {
		return nil, false
	}
	var args waitArgs
	if len(call.Params.Arguments) > 0 && json.Unmarshal(call.Params.Arguments, &args) != nil {
		return nil, false
	}
	sess, err := t.opt.Lobby.Resolve(ctx, who)
	if err != nil {
		return nil, false
	}
	room := args.Room
	if room == "" {
		room = sess.RoomID
	}
	if room == "" {
		return nil, false
	}
	raw := call.Params.Arguments
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	id := newTaskID(room)
	key := taskKey(id)
	var created time.Time
	var open, inRoom int
	err = t.db.InTx(ctx, func(ctx context.Context, tx store.Tx) error {
		// A room's creations in turn, so that both counts hold: a lock per
		// grant let several grants pass the room's bound together. The
		// transaction is two counts and an insert, so the turn is short.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('mcp_tasks:' || $1, 0))`, room); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp_tasks WHERE room_id = $1 AND grant_id = $2 AND status = 'working'`, room, who.GrantID).Scan(&open); err != nil {
			return err
		}
		if open >= maxOpenTasks {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM mcp_tasks WHERE room_id = $1 AND status = 'working'`, room).Scan(&inRoom); err != nil {
			return err
		}
		if inRoom >= maxRoomTasks {
			return nil
		}
		return tx.QueryRow(ctx, `INSERT INTO mcp_tasks (room_id, task_key, grant_id, tool, arguments, lease_until, expires_at)
			VALUES ($1, $2, $3, 'sync_wait', $4, now() + $5::interval, now() + $6::interval) RETURNING created_at`,
			room, key, who.GrantID, raw, taskLease.String(), taskKeep.String()).Scan(&created)
	})
	if err != nil {
		t.opt.Logger.Error("create an MCP task", "err", err)
		return result(nil, errs.New(errs.Unavailable, "the wait could not be started as a task").WithHint("call sync_wait again"), sess), true
	}
	if open >= maxOpenTasks {
		return result(nil, errs.New(errs.RateLimited, "%d waits of this connection are open as tasks in room %s, the most at once", open, room).
			With("open_tasks", open).WithHint("let one end or cancel one (tasks/cancel) before starting another"), sess), true
	}
	if inRoom >= maxRoomTasks {
		return result(nil, errs.New(errs.RoomBusy, "%d waits are open as tasks in room %s, the most at once", inRoom, room).
			With("room_tasks", inRoom).WithHint("retry once some have ended, or wait with a blocking call"), sess), true
	}
	if !t.run(key, room, call) {
		// The shutdown began: the lease runs out and the next poll, to
		// another process, runs the wait.
		t.opt.Logger.Info("MCP task left to another process", "room", room)
	}
	return &taskResult{ResultType: "task", TaskID: id, Status: "working", CreatedAt: stamp(created), LastUpdatedAt: stamp(created),
		TTLMs: taskKeep.Milliseconds(), PollIntervalMs: taskPollMS}, true
}

// run runs a task's wait in this process, beside the request that started
// it (or the poll that took it over), and stores its result.
func (t *tasks) run(key, room string, call *sdk.CallToolRequest) bool {
	ctx, cancel := context.WithCancel(context.Background())
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		cancel()
		return false
	}
	t.running[key] = &runningTask{room: room, cancel: cancel}
	if !t.renewer {
		t.renewer = true
		go t.renew()
	}
	t.mu.Unlock()
	// The request's values (its token, its headers) ride along; its end
	// does not end the wait.
	plain := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: call.Params.Name, Arguments: call.Params.Arguments}, Extra: call.Extra}
	go func() {
		defer cancel()
		res, _ := t.wait(ctx, plain) // its errors are results
		if ctx.Err() != nil {
			// Cancelled, or the shutdown: no result; give the lease up.
			t.forget(key)
			t.release(room, key)
			return
		}
		raw, err := json.Marshal(res)
		if err != nil {
			t.opt.Logger.Error("encode an MCP task's result", "err", err)
			t.forget(key)
			return
		}
		t.complete(finished{room: room, key: key, result: raw})
	}()
	return true
}

// finished is a wait's result to store.
type finished struct {
	room, key string
	result    []byte
}

// complete queues a result for the one writer, which stores what queued
// while it wrote in one statement per room: a write that wakes a thousand
// waits costs a few statements, not a thousand.
func (t *tasks) complete(f finished) {
	t.mu.Lock()
	t.done = append(t.done, f)
	if !t.writing {
		t.writing = true
		go t.write()
	}
	t.mu.Unlock()
}

func (t *tasks) write() {
	for {
		t.mu.Lock()
		batch := t.done
		t.done = nil
		if len(batch) == 0 {
			t.writing = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		byRoom := map[string][]finished{}
		for _, f := range batch {
			byRoom[f.room] = append(byRoom[f.room], f)
		}
		for room, fs := range byRoom {
			keys, results := make([]string, len(fs)), make([]string, len(fs))
			for i, f := range fs {
				keys[i], results[i] = f.key, string(f.result)
			}
			// By its room: one shard on Citus.
			_, err := t.db.Exec(context.Background(), `UPDATE mcp_tasks m SET status = 'completed', result = r.result, updated_at = now()
				FROM unnest($2::text[], $3::jsonb[]) AS r(task_key, result)
				WHERE m.room_id = $1 AND m.task_key = r.task_key AND m.status = 'working'`, room, keys, results)
			if err != nil {
				t.opt.Logger.Error("store MCP task results", "room", room, "tasks", len(fs), "err", err)
			}
			for _, f := range fs {
				t.forget(f.key)
			}
		}
	}
}

func (t *tasks) forget(key string) {
	t.mu.Lock()
	delete(t.running, key)
	t.mu.Unlock()
}

// release gives a lease up at once, so that the next poll takes the task.
func (t *tasks) release(room, key string) {
	_, _ = t.db.Exec(context.Background(), `UPDATE mcp_tasks SET lease_until = now() WHERE room_id = $1 AND task_key = $2 AND status = 'working'`, room, key)
}

// stop cancels the wait of the task key if this process runs it.
func (t *tasks) stop(key string) {
	t.mu.Lock()
	if r, ok := t.running[key]; ok {
		r.cancel()
	}
	t.mu.Unlock()
}

func (t *tasks) stopAll() {
	t.mu.Lock()
	t.closed = true
	for _, r := range t.running {
		r.cancel()
	}
	t.mu.Unlock()
}

// renew keeps the leases of the waits this process runs while there are
// any, stops those cancelled elsewhere (a tasks/cancel to another
// process), and purges expired tasks. One loop for all of them.
func (t *tasks) renew() {
	tick := time.NewTicker(taskLease / 3)
	defer tick.Stop()
	for range tick.C {
		t.mu.Lock()
		byRoom := map[string][]string{}
		for k, r := range t.running {
			byRoom[r.room] = append(byRoom[r.room], k)
		}
		if len(byRoom) == 0 {
			t.renewer = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), taskLease/3)
		// One statement per room, each on the room's shard (Citus): one
		// over several rooms would be a transaction on several workers.
		live, failed := map[string]bool{}, false
		for room, keys := range byRoom {
			rows, err := t.db.Query(ctx, `UPDATE mcp_tasks SET lease_until = now() + $3::interval
				WHERE room_id = $1 AND task_key = ANY ($2::text[]) AND status = 'working' RETURNING task_key`,
				room, keys, taskLease.String())
			var kept []string
			if err == nil {
				kept, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				t.opt.Logger.Warn("renew MCP task leases", "room", room, "err", err)
				failed = true
				continue
			}
			for _, k := range kept {
				live[k] = true
			}
			for _, k := range keys {
				if !live[k] {
					t.stop(k) // cancelled or gone: no one waits for it
				}
			}
		}
		if !failed {
			// The sweep of every room's expired tasks (multi-shard on
			// Citus, as the janitor's sweeps are).
			if _, err := t.db.Exec(ctx, `DELETE FROM mcp_tasks WHERE expires_at < now()`); err != nil {
				t.opt.Logger.Warn("purge expired MCP tasks", "err", err)
			}
		}
		cancel()
	}
}

// get answers tasks/get: the task as stored, its result once it ended.
// A working task whose lease ran out (the process running it ended) is
// taken over: its wait runs here, for what is left of its timeout.
func (t *tasks) get(ctx context.Context, who lobby.Caller, extra *sdk.RequestExtra, id string) (sdk.Result, error) {
	room, ok := taskRoom(id)
	if !ok {
		return nil, taskNotFound()
	}
	key := taskKey(id)
	var status string
	var args, res []byte
	var created, updated time.Time
	var expired bool
	err := t.db.QueryRow(ctx, `SELECT status, arguments, result, created_at, updated_at, lease_until < now()
		FROM mcp_tasks WHERE room_id = $1 AND task_key = $2 AND grant_id = $3 AND expires_at > now()`, room, key, who.GrantID).
		Scan(&status, &args, &res, &created, &updated, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, taskNotFound()
	}
	if err != nil {
		t.opt.Logger.Error("read an MCP task", "err", err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task could not be read; poll again"}
	}
	if status == "working" && expired {
		t.takeOver(ctx, room, key, args, created, extra)
	}
	out := &taskResult{ResultType: "complete", TaskID: id, Status: status, CreatedAt: stamp(created), LastUpdatedAt: stamp(updated),
		TTLMs: taskKeep.Milliseconds(), PollIntervalMs: taskPollMS}
	if status == "completed" {
		out.Result = res
	}
	return out, nil
}

// takeOver claims a task whose lease ran out and runs its wait again with
// the time left of the timeout it asked for (the default timeout when it
// named none). The claim is one conditional update: of several processes
// polled at once, one runs it.
func (t *tasks) takeOver(ctx context.Context, room, key string, args []byte, created time.Time, extra *sdk.RequestExtra) {
	tag, err := t.db.Exec(ctx, `UPDATE mcp_tasks SET lease_until = now() + $3::interval
		WHERE room_id = $1 AND task_key = $2 AND status = 'working' AND lease_until < now()`, room, key, taskLease.String())
	if err != nil || tag.RowsAffected() != 1 {
		return
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		m = map[string]json.RawMessage{}
	}
	// The wait ends when it would have in the process that started it: at
	// the timeout it asked for (decoded as the call decodes it, a number
	// spelt as a string too), or the default, capped at the maximum, and
	// counted from its start.
	var in waitIn
	_ = decodeArgs("sync_wait", args, &in) // it was decoded once already; a failure is a zero timeout
	asked := t.opt.Substrate.WaitTimeout(time.Duration(in.TimeoutMS) * time.Millisecond).Milliseconds()
	left := asked - time.Since(created).Milliseconds()
	m["timeout_ms"], _ = json.Marshal(max(left, 1))
	raw, _ := json.Marshal(m)
	t.run(key, room, &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: "sync_wait", Arguments: raw}, Extra: extra})
}

// cancel answers tasks/cancel: a working task of the caller's ends
// cancelled, its wait stopped (here at once; in another process at its
// next lease renewal). One that ended already is acknowledged as it is.
func (t *tasks) cancel(ctx context.Context, who lobby.Caller, id string) (sdk.Result, error) {
	room, ok := taskRoom(id)
	if !ok {
		return nil, taskNotFound()
	}
	key := taskKey(id)
	var status string
	err := t.db.QueryRow(ctx, `SELECT status FROM mcp_tasks WHERE room_id = $1 AND task_key = $2 AND grant_id = $3 AND expires_at > now()`,
		room, key, who.GrantID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, taskNotFound()
	}
	if err == nil && status == "working" {
		// By its room: one shard on Citus.
		_, err = t.db.Exec(ctx, `UPDATE mcp_tasks SET status = 'cancelled', updated_at = now()
			WHERE room_id = $1 AND task_key = $2 AND status = 'working'`, room, key)
	}
	if err != nil {
		t.opt.Logger.Error("cancel an MCP task", "err", err)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the task could not be cancelled; try again"}
	}
	t.stop(key)
	return &ackResult{ResultType: "complete"}, nil
}
