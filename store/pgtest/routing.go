package pgtest

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/syncsubstrate/sync/store"
)

// Routing records every statement a test's pool sends to a Citus
// coordinator, to check afterwards (CheckRouting) that each is planned
// on one shard of one worker, and that no transaction reaches two
// workers.
//
// It is a small proxy speaking PostgreSQL's wire protocol, not a pgx
// tracer: it needs nothing from store (whose pool is private), it sees
// what reaches the server whichever way it was sent (a batch, a simple
// query, the notification listener's own connection), and it keeps each
// statement's parameters as the bytes and formats that were bound, so
// that EXPLAIN is run with exactly the values the statement ran with (a
// shard is chosen from them).
type Routing struct {
	t      testing.TB
	direct string // the database itself, for EXPLAIN
	url    string // through the recorder
	ln     net.Listener
	socket string

	mu    sync.Mutex
	stmts []Statement
	conns []net.Conn
	nconn int
	ntx   int
}

// Statement is one statement as it reached the coordinator.
type Statement struct {
	SQL     string
	OIDs    []uint32
	Formats []int16
	Params  [][]byte
	// Tx numbers the explicit transaction the statement ran in (0: on
	// its own).
	Tx int
}

// RoutingException is a statement allowed to reach more than one shard,
// or to write a reference table, and why it must.
type RoutingException struct {
	Match *regexp.Regexp // against the statement, whitespace collapsed
	Why   string
	// Pruned allows a statement reading several rooms at once only to
	// their shards: a plan reaching every shard of the table fails.
	Pruned bool
}

// RoutingExceptions are the statements CheckRouting lets reach several
// shards or every node. Each is off the hot path or multi-node by what
// it does; anything else a request sends names its room and is routed
// to the one worker holding it.
var RoutingExceptions = []RoutingException{
	// substrate.findToken: a token presented without its room (GET
	// /rooms), or to a room it does not belong to (to say whose it is),
	// is looked up in every room's shard. REST and MCP requests name
	// their room and look it up there.
	{Match: regexp.MustCompile(`^SELECT id FROM rooms WHERE (view_)?token_hash = \$1$`), Why: "a token presented without its room"},
	{Match: regexp.MustCompile(`^SELECT room_id, id, grants, .* FROM agents WHERE token_hash = \$1$`), Why: "a token presented without its room"},
	// The janitor finds the rooms needing work in every shard, then
	// changes each with statements naming it.
	{Match: regexp.MustCompile(`^SELECT id FROM rooms WHERE seq > \$1$`), Why: "the janitor's sweep for logs to trim"},
	{Match: regexp.MustCompile(`^SELECT DISTINCT room_id FROM state WHERE timer_effect = 'delete'`), Why: "the janitor's sweep for expired entries"},
	{Match: regexp.MustCompile(`^DELETE FROM mcp_tasks WHERE expires_at < now\(\)$`), Why: "the sweep of expired MCP tasks (every lease renewal, while a process runs a task)"},
	// Reference tables are copied to every node, so a write to one is a
	// write on every node (a two-phase commit when it shares a
	// transaction with a room's write). These are rare by design: a
	// process's heartbeat every 2 s, and sign-up, consent and token
	// grants, not requests.
	// The lobby lists a user's rooms, heads and agents, each in one
	// statement naming the rooms (substrate.RoomHeads, Presences): it
	// reaches the shards holding them, no other.
	{Match: regexp.MustCompile(`^SELECT id, seq, greatest\(r\.message_count .* FROM rooms r WHERE id = ANY\(\$1\)$`), Why: "the lobby's heads of a user's rooms", Pruned: true},
	{Match: regexp.MustCompile(`^SELECT room_id, id, name, role, status, .* FROM agents WHERE room_id = ANY\(\$1\) ORDER BY`), Why: "the lobby's agents of a user's rooms", Pruned: true},
	{Match: regexp.MustCompile(`\bsyncd_processes\b`), Why: "a process's heartbeat (every 2 s), a reference-table write"},
	// lobby.save: an MCP session's room and agent change when it embodies,
	// focuses another room or has its scope narrowed, not on every call
	// (lobby.Resolve only reads the row once it exists).
	{Match: regexp.MustCompile(`^UPDATE smcp_user_sessions SET room_id = \$2, agent_id = \$3, scope = \$4, updated_at = now\(\) WHERE grant_id = \$1$`), Why: "an MCP session's focus or embodiment changing, a reference-table write"},
}

// NewRouting gives the test a new, migrated database on the Citus
// cluster behind a recorder, and skips the test without Citus (routing
// is a property of a distributed plan).
func NewRouting(t testing.TB) *Routing {
	t.Helper()
	if !Citus() {
		t.Skipf("pgtest: routing needs a Citus cluster (%s=2)", CitusEnv)
	}
	direct := URL(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Query().Get("port")
	if port == "" {
		port = "5432"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Routing{t: t, direct: direct, ln: ln, socket: filepath.Join(u.Query().Get("host"), ".s.PGSQL."+port)}
	host, lport, _ := net.SplitHostPort(ln.Addr().String())
	q := u.Query()
	q.Set("host", host)
	q.Set("port", lport)
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	r.url = u.String()
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// URL reaches the database through the recorder.
func (r *Routing) URL() string { return r.url }

// DirectURL reaches the database without being recorded.
func (r *Routing) DirectURL() string { return r.direct }

// DB opens a pool of MaxConns connections through the recorder, closed
// when the test ends.
func (r *Routing) DB(t testing.TB) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), r.url, store.Options{MaxConns: MaxConns})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(db.Close)
	return db
}

// Reset forgets the statements recorded so far (a test's set-up, when
// it is not what the test checks).
func (r *Routing) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = nil
}

// Statements are those recorded so far.
func (r *Routing) Statements() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stmts)
}

func (r *Routing) close() {
	r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
}

func (r *Routing) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		pg, err := net.Dial("unix", r.socket)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, pg)
		r.nconn++
		r.mu.Unlock()
		go func() { _, _ = io.Copy(c, pg); c.Close() }()
		go func() { r.record(c, pg); pg.Close() }()
	}
}

// record copies what the client sends to the server, noting each
// statement bound (extended protocol) or sent as a simple query.
func (r *Routing) record(c, pg net.Conn) {
	in := bufio.NewReader(io.TeeReader(c, pg))
	// The untyped start-up messages: an SSL or GSS request, answered
	// with one byte, precedes the start-up message proper.
	for {
		var head [8]byte
		if _, err := io.ReadFull(in, head[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(head[:4]))
		if _, err := in.Discard(n - 8); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(head[4:]); code != 80877103 && code != 80877104 {
			break
		}
	}
	prepared := map[string]Statement{}
	tx := 0
	for {
		kind, err := in.ReadByte()
		if err != nil {
			return
		}
		var size [4]byte
		if _, err := io.ReadFull(in, size[:]); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(size[:]))-4)
		if _, err := io.ReadFull(in, body); err != nil {
			return
		}
		m := message(body)
		switch kind {
		case 'P':
			name, sql := m.str(), m.str()
			s := Statement{SQL: sql}
			for range m.i16() {
				s.OIDs = append(s.OIDs, m.u32())
			}
			prepared[name] = s
		case 'B':
			m.str() // portal
			s, ok := prepared[m.str()]
			if !ok {
				continue
			}
			for range m.i16() {
				s.Formats = append(s.Formats, m.i16())
			}
			for range m.i16() {
				if n := int32(m.u32()); n >= 0 {
					s.Params = append(s.Params, slices.Clone(m.take(int(n))))
				} else {
					s.Params = append(s.Params, nil)
				}
			}
			tx = r.note(s, tx)
		case 'Q':
			tx = r.note(Statement{SQL: m.str()}, tx)
		case 'X':
			return
		}
	}
}

var (
	beginRE = regexp.MustCompile(`(?i)^\s*(BEGIN|START\s+TRANSACTION)\b`)
	endRE   = regexp.MustCompile(`(?i)^\s*(COMMIT|END|ABORT|ROLLBACK)\s*(;|$|AND\b|TRANSACTION\s*$|WORK\s*$|PREPARED\b)`)
)

// note records s in the connection's transaction tx, and returns the
// transaction the next statement is in.
func (r *Routing) note(s Statement, tx int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if beginRE.MatchString(s.SQL) {
		r.ntx++
		tx = r.ntx
	}
	s.Tx = tx
	r.stmts = append(r.stmts, s)
	if endRE.MatchString(s.SQL) {
		return 0
	}
	return tx
}

type message []byte

func (m *message) take(n int) []byte {
	if n > len(*m) {
		n = len(*m)
	}
	b := (*m)[:n]
	*m = (*m)[n:]
	return b
}

func (m *message) str() string {
	i := slices.Index(*m, 0)
	if i < 0 {
		return string(m.take(len(*m)))
	}
	s := string((*m)[:i])
	*m = (*m)[i+1:]
	return s
}

func (m *message) i16() int16 {
	b := m.take(2)
	if len(b) < 2 {
		return 0
	}
	return int16(binary.BigEndian.Uint16(b))
}

func (m *message) u32() uint32 {
	b := m.take(4)
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

var (
	plannedRE  = regexp.MustCompile(`(?is)^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|VALUES|MERGE)\b`)
	tableRE    = regexp.MustCompile(`(?is)\b(?:FROM|JOIN|INTO|UPDATE)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)`)
	writeRE    = regexp.MustCompile(`(?is)\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO)\s+(?:ONLY\s+)?([a-z_][a-z0-9_]*)`)
	taskRE     = regexp.MustCompile(`Task Count: (\d+)`)
	nodeRE     = regexp.MustCompile(`Node: host=\S+ port=(\d+)`)
	pulledRE   = regexp.MustCompile(`Distributed Subplan|pull to coordinator|repartition|Citus MERGE`)
	citusScanR = regexp.MustCompile(`Custom Scan \(Citus`)
)

// plan is what EXPLAIN said of one statement.
type plan struct {
	problem string // "" for a statement planned on one shard
	tasks   int    // the most tasks of one distributed scan
	node    string // the worker port it runs on, when it touches a room table
}

// CheckRouting runs EXPLAIN on the coordinator for each distinct
// statement recorded (with its recorded parameters), and fails the test
// for each planned on several shards, pulled to the coordinator, or
// writing a reference table, unless RoutingExceptions allows it; and for
// each explicit transaction whose statements on room tables run on more
// than one worker. It returns how many distinct statements it checked.
func (r *Routing) CheckRouting(t testing.TB) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.direct)
	if err != nil {
		t.Fatalf("pgtest: routing: %v", err)
	}
	defer conn.Close(ctx)
	kinds := map[string]string{} // table: "distributed" or "reference"
	rows, err := conn.Query(ctx, `SELECT logicalrelid::regclass::text, CASE WHEN partmethod = 'h' THEN 'distributed' ELSE 'reference' END
		FROM pg_dist_partition WHERE partmethod = 'h' OR repmodel = 't'`)
	if err != nil {
		t.Fatalf("pgtest: routing: %v", err)
	}
	for rows.Next() {
		var name, kind string
		if err := rows.Scan(&name, &kind); err != nil {
			t.Fatal(err)
		}
		kinds[name] = kind
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatalf("pgtest: routing: %v", rows.Err())
	}

	var shards int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'rooms'::regclass`).Scan(&shards); err != nil {
		t.Fatalf("pgtest: routing: %v", err)
	}
	plans := map[string]plan{}
	key := func(s Statement) string {
		return fmt.Sprintf("%s\x00%v\x00%q", s.SQL, s.Formats, s.Params)
	}
	checked := 0
	txNodes := map[int]map[string][]string{}
	failed := map[string]bool{}
	for _, s := range r.Statements() {
		// Only statements PostgreSQL plans; a simple query of several
		// statements (none is sent on a request's path) is not explained.
		if !plannedRE.MatchString(s.SQL) || strings.Contains(strings.TrimRight(strings.TrimSpace(s.SQL), "; \n\t"), ";") {
			continue
		}
		k := key(s)
		p, ok := plans[k]
		if !ok {
			p = r.explain(ctx, conn, s, kinds)
			plans[k] = p
			checked++
			// Once a statement: its other parameters plan alike.
			if sql := oneLine(s.SQL); p.problem != "" && !failed[sql] && !excepted(sql, p, shards) {
				failed[sql] = true
				t.Errorf("pgtest: routing: %s:\n\t%s", p.problem, sql)
			}
		}
		if s.Tx != 0 && p.node != "" {
			if txNodes[s.Tx] == nil {
				txNodes[s.Tx] = map[string][]string{}
			}
			txNodes[s.Tx][p.node] = append(txNodes[s.Tx][p.node], oneLine(s.SQL))
		}
	}
	workers := map[string]bool{}
	for _, nodes := range txNodes {
		for n := range nodes {
			workers[n] = true
		}
		if len(nodes) > 1 {
			var b strings.Builder
			for n, stmts := range nodes {
				fmt.Fprintf(&b, "\n\tworker port %s: %s", n, strings.Join(stmts, "\n\t\t"))
			}
			t.Errorf("pgtest: routing: a transaction touches %d workers:%s", len(nodes), b.String())
		}
	}
	t.Logf("pgtest: routing: %d distinct statements planned, %d transactions on room tables, on %d workers", checked, len(txNodes), len(workers))
	return checked
}

// explain plans s on the coordinator (its transaction rolled back:
// EXPLAIN runs nothing, and a failed one must not end the check).
func (r *Routing) explain(ctx context.Context, conn *pgx.Conn, s Statement, kinds map[string]string) plan {
	sql := oneLine(s.SQL)
	var touches []string // room tables it reads or writes
	for _, m := range tableRE.FindAllStringSubmatch(sql, -1) {
		if kinds[m[1]] == "distributed" {
			touches = append(touches, m[1])
		}
	}
	var p plan
	for _, m := range writeRE.FindAllStringSubmatch(sql, -1) {
		if kinds[m[1]] == "reference" {
			p.problem = "writes the reference table " + m[1] + " (on every node)"
		}
	}
	res := conn.PgConn().ExecParams(ctx, "EXPLAIN (COSTS OFF) "+s.SQL, s.Params, s.OIDs, s.Formats, nil).Read()
	if res.Err != nil {
		return plan{problem: "EXPLAIN failed: " + res.Err.Error()}
	}
	var lines []string
	for _, row := range res.Rows {
		if len(row) > 0 {
			lines = append(lines, string(row[0]))
		}
	}
	text := strings.Join(lines, "\n")
	if !citusScanR.MatchString(text) {
		return p // no distributed table: planned by PostgreSQL on the coordinator
	}
	scans := len(citusScanR.FindAllString(text, -1))
	tasks := taskRE.FindAllStringSubmatch(text, -1)
	multi := false
	for _, m := range tasks {
		n, _ := strconv.Atoi(m[1])
		p.tasks = max(p.tasks, n)
		multi = multi || n != 1
	}
	switch {
	case pulledRE.MatchString(text):
		p.problem = "pulled to the coordinator"
	case multi:
		p.problem = "planned on several shards"
	case scans > 1:
		p.problem = "planned as several distributed queries"
	case !strings.HasPrefix(strings.TrimSpace(lines[0]), "Custom Scan (Citus"):
		p.problem = "combined on the coordinator"
	}
	if p.problem != "" {
		p.problem += "\n\t" + strings.ReplaceAll(text, "\n", "\n\t")
	}
	if len(touches) > 0 {
		if m := nodeRE.FindStringSubmatch(text); m != nil {
			p.node = m[1]
		}
	}
	return p
}

// excepted reports whether RoutingExceptions allow statement sql,
// planned as p, with shards the shard count of the room tables.
func excepted(sql string, p plan, shards int) bool {
	for _, e := range RoutingExceptions {
		if e.Match.MatchString(sql) {
			return !e.Pruned || p.tasks > 0 && p.tasks < shards
		}
	}
	return false
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// RoomsOnEveryWorker returns n room ids, prefix-1, prefix-2 and on,
// skipping ids until every worker holds at least one of the rooms (n
// must be at least the number of workers), so that a test's rooms are
// spread as a deployment's are.
func (r *Routing) RoomsOnEveryWorker(t testing.TB, prefix string, n int) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var workers int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'`).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if n < workers {
		t.Fatalf("pgtest: %d rooms cannot cover %d workers", n, workers)
	}
	var ids []string
	seen := map[int]bool{}
	for i := 1; len(ids) < n && i < 1000; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		port, err := shardPort(ctx, conn, id)
		if err != nil {
			t.Fatal(err)
		}
		// The rooms still to choose must be able to reach the workers
		// not yet covered.
		if !seen[port] || n-len(ids) > workers-len(seen) {
			seen[port] = true
			ids = append(ids, id)
		}
	}
	if len(seen) < workers {
		t.Fatalf("pgtest: rooms %v cover %d of %d workers", ids, len(seen), workers)
	}
	return ids
}

// WorkerOf is the port of the worker holding room id.
func (r *Routing) WorkerOf(t testing.TB, id string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.direct)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	port, err := shardPort(ctx, conn, id)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
