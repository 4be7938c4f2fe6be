// Package embedpg runs a private PostgreSQL cluster for one process: it finds
// the server binaries, initialises a cluster on first start, runs it
// listening only on a Unix socket inside its own directory, and stops it
// cleanly. The server uses it when DATABASE_URL is unset; tests use it for
// their throwaway clusters.
//
// The process that runs the cluster owns it, holding an exclusive lock on
// Dir/owner.lock (which names its pid) until the cluster has stopped; the
// kernel releases the lock if the process dies. Another Start waits for the
// owner to stop, or, with Options.Attach, uses the owner's running cluster.
package embedpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configure Start.
type Options struct {
	// Dir holds the cluster: Dir/data (PGDATA), Dir/run (the socket) and
	// Dir/postgres.log. Created if missing. Required.
	Dir string
	// BinDir is where initdb and postgres live. Default: found on PATH, else
	// the newest /usr/lib/postgresql/*/bin.
	BinDir string
	// Database is created on first start if missing. Default "sync".
	Database string
	// Settings are extra server settings passed as -c name=value.
	Settings map[string]string
	// Port, when set, makes the server listen on 127.0.0.1:Port as well as
	// on its socket (named for that port): the nodes of a Citus cluster
	// reach each other over TCP. Default: the socket only, port 5432.
	Port int
	// NoSync makes initdb skip fsync (throwaway test clusters only).
	NoSync bool
	// StartTimeout bounds initdb plus start-up. Default 60 s.
	StartTimeout time.Duration
	// Attach lets Start use the cluster another process owns and runs (a
	// short command beside a running server: `syncd invite`); Stop then
	// leaves it running, and the command loses its database if the owner
	// stops meanwhile (Explain says so). Without it, Start waits up to
	// OwnerWait for the owner to stop its cluster and then runs its own:
	// a server must not depend on a cluster another process will stop.
	Attach bool
	// OwnerWait bounds the wait for another process's cluster: for the
	// owner to stop it (without Attach), or to accept connections (with
	// Attach). Past it, Start fails saying which process holds it.
	// Default 60 s.
	OwnerWait time.Duration
	// Logger receives progress. Default slog.Default().
	Logger *slog.Logger
}

// Cluster is a running embedded PostgreSQL server.
type Cluster struct {
	opt      Options
	shared   bool     // run by another process; Stop leaves it running
	ownerPID int      // that process, when known
	lock     *os.File // Dir/owner.lock, locked while we own the cluster
	cred     *syscall.Credential
	mu       sync.Mutex // cmd, exited, waitErr: Restart replaces them
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error
	url      string
	stop     sync.Once
	stopErr  error
}

const superuser = "sync"

// ErrNoBinaries means no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("embedded PostgreSQL: no server binaries found (looked for initdb and postgres on PATH and in /usr/lib/postgresql/*/bin). " +
	"Install them (Debian/Ubuntu: apt-get install postgresql; Fedora: dnf install postgresql-server; macOS: brew install postgresql) " +
	"or set DATABASE_URL to use an existing PostgreSQL server")

// FindBinaries returns the directory holding initdb and postgres.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dir := filepath.Dir(real)
			if isExec(filepath.Join(dir, "postgres")) {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func pgMajor(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Start initialises the cluster if needed, starts the server and waits until
// it accepts connections and Database exists.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	dir := opt.Dir
	sockDir := filepath.Join(dir, "run")
	cred, err := prepareDirs(dir, sockDir)
	if err != nil {
		return nil, err
	}

	if opt.OwnerWait == 0 {
		opt.OwnerWait = 60 * time.Second
	}
	dataDir := filepath.Join(dir, "data")
	c := &Cluster{opt: opt}
	c.url = (&url.URL{Scheme: "postgres", User: url.User(superuser), Path: "/" + opt.Database,
		RawQuery: opt.query(sockDir).Encode()}).String()
	if err := c.claim(ctx, dataDir); err != nil {
		return nil, err
	}
	if c.shared {
		return c, nil
	}
	started := false
	defer func() {
		if !started {
			c.release()
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()

	if err := initCluster(ctx, opt, dataDir, cred); err != nil {
		return nil, err
	}
	c.cred = cred
	if err := c.launch(); err != nil {
		return nil, err
	}
	started = true // Stop releases the lock from here on
	if err := c.waitReady(ctx); err != nil {
		_ = c.Stop(context.Background())
		return nil, err
	}
	return c, nil
}

// launch starts the postgres process of the cluster (initialised) that
// this process owns.
func (c *Cluster) launch() error {
	opt := c.opt
	dataDir, sockDir := filepath.Join(opt.Dir, "data"), filepath.Join(opt.Dir, "run")
	logf, err := os.OpenFile(filepath.Join(opt.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("embedpg: %w", err)
	}
	args := postgresArgs(dataDir, sockDir, opt.Port, opt.Settings)
	cmd := exec.Command(filepath.Join(opt.BinDir, "postgres"), args...)
	cmd.Env = pgEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a terminal's Ctrl-C reaches only us, and we stop
	// PostgreSQL after the HTTP server has drained. Pdeathsig stops it if we
	// die without a chance to.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	exited := make(chan struct{})
	running := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the starting OS thread exits, so pin this
		// goroutine (and thread) for the server's lifetime.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		running <- err
		if err == nil {
			err = cmd.Wait()
			c.mu.Lock()
			c.waitErr = err
			c.mu.Unlock()
		}
		logf.Close()
		close(exited)
	}()
	if err := <-running; err != nil {
		return fmt.Errorf("embedpg: start postgres: %w", err)
	}
	c.mu.Lock()
	c.cmd, c.exited = cmd, exited
	c.mu.Unlock()
	opt.Logger.Info("started embedded PostgreSQL", "pid", cmd.Process.Pid, "socket_dir", sockDir)
	return nil
}

// running is the current postgres process and the channel closed when it
// has exited.
func (c *Cluster) running() (*exec.Cmd, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd, c.exited
}

// Kill ends the server as a crash would (kill -9 of the postmaster and of
// every backend) and waits until none of them runs: tests of what clients
// see when a node of a cluster dies. Restart starts it again; Stop after
// Kill only releases the cluster.
//
// Killing the process group is not enough: every child of the postmaster
// calls setsid() (InitPostmasterChild), so the backends are in sessions
// of their own, and a backend that outlives its postmaster for a moment
// still answers the statement it reads first (TestKillAndRestart, under
// load). They are found, as the postmaster's children, before it dies.
func (c *Cluster) Kill() error {
	if c.shared {
		return errors.New("embedpg: Kill: the cluster is another process's")
	}
	cmd, exited := c.running()
	// Stopped, the postmaster forks no backend between the listing and
	// the kill.
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP)
	backends := childrenOf(cmd.Process.Pid)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("embedpg: kill postgres: %w", err)
	}
	for _, pid := range backends {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-exited
	// The backends are not this process's children: nothing to wait on
	// but /proc. A killed process goes in milliseconds; one that does not
	// (stuck in the kernel) is an error, not a hang.
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range backends {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("embedpg: backend %d of the killed server still runs after 10 s", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	c.opt.Logger.Info("killed embedded PostgreSQL", "pid", cmd.Process.Pid, "backends", len(backends))
	return nil
}

// childrenOf lists the processes whose parent is pid, from /proc (none
// where there is no /proc: there Kill kills the process group only).
func childrenOf(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie, dead but not yet reaped by
// whoever adopted it, does not).
func alive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// procStat reads a process's parent and state from /proc/pid/stat; the
// command name before them is in parentheses and may hold spaces.
func procStat(pid int) (ppid int, state byte, ok bool) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(string(raw[i+1:]))
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0][0], err == nil
}

// Restart starts the server again after Kill (crash recovery replays the
// WAL: what was committed is there) on the same directory and port, and
// waits until it accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.shared {
		return errors.New("embedpg: Restart: the cluster is another process's")
	}
	_, exited := c.running()
	select {
	case <-exited:
	default:
		return errors.New("embedpg: Restart: the server is running (Kill it first)")
	}
	ctx, cancel := context.WithTimeout(ctx, c.opt.StartTimeout)
	defer cancel()
	// A killed backend may still hold the shared memory for a moment, and
	// the postmaster refuses to start beside it: try again until it goes.
	for {
		if err := c.launch(); err != nil {
			return err
		}
		err := c.waitReady(ctx)
		if err == nil {
			return nil
		}
		_, exited := c.running()
		select {
		case <-exited:
		default:
			return err // running, but not ready in time
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// defaults fills in the options' defaults and makes Dir absolute; BinDir
// defaults to the binaries FindBinaries finds.
func (opt *Options) defaults() error {
	if opt.Dir == "" {
		return errors.New("embedpg: Options.Dir is required")
	}
	if opt.Database == "" {
		opt.Database = "sync"
	}
	if opt.StartTimeout == 0 {
		opt.StartTimeout = 60 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	dir, err := filepath.Abs(opt.Dir)
	if err != nil {
		return err
	}
	opt.Dir = dir
	if opt.BinDir == "" {
		if opt.BinDir, err = FindBinaries(); err != nil {
			return err
		}
	}
	return nil
}

// prepareDirs makes dir and the socket directory sockDir private, owned
// by the account PostgreSQL runs as (cred; nil: this process's).
func prepareDirs(dir, sockDir string) (*syscall.Credential, error) {
	// The kernel limits a socket path to 107 bytes (".s.PGSQL.65535").
	if n := len(filepath.Join(sockDir, ".s.PGSQL.65535")); n > 107 {
		return nil, fmt.Errorf("embedpg: socket path under %s is %d bytes, over the 107 the kernel allows; choose a shorter data directory", dir, n)
	}
	// Missing ancestors are made traversable: as root, the cluster belongs
	// to the postgres account, which must be able to reach it.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("embedpg: %w", err)
	}
	cred, err := runAs(dir)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{dir, sockDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("embedpg: %w", err)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("embedpg: %w", err)
		}
	}
	if cred != nil {
		if err := chownTree(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("embedpg: hand %s to the postgres account: %w", dir, err)
		}
	}
	return cred, nil
}

// initCluster runs initdb in dataDir unless a cluster is there.
func initCluster(ctx context.Context, opt Options, dataDir string, cred *syscall.Credential) error {
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	opt.Logger.Info("initialising embedded PostgreSQL cluster", "dir", dataDir, "bin", opt.BinDir)
	args := []string{"-D", dataDir, "-U", superuser, "-A", "trust", "-E", "UTF8", "--locale=C"}
	if opt.NoSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(opt.BinDir, "initdb"), args...)
	cmd.Env = pgEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dataDir) // a half-made cluster would block the next start
		return fmt.Errorf("embedpg: initdb failed: %w\n%s", err, out)
	}
	return nil
}

// postgresArgs is the server's command line: a socket in sockDir (and
// loopback TCP when port is set), and the settings in a stable order.
func postgresArgs(dataDir, sockDir string, port int, settings map[string]string) []string {
	listen := ""
	if port != 0 {
		listen = "127.0.0.1"
	}
	args := []string{"-D", dataDir, "-k", sockDir, "-c", "listen_addresses=" + listen, "-c", "unix_socket_permissions=0700"}
	if port != 0 {
		args = append(args, "-p", strconv.Itoa(port))
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	return args
}

// claim makes this process the cluster's owner (c.lock), once the previous
// owner has stopped its cluster; with Attach, it uses a running owner's
// cluster instead (c.shared). It gives up after OwnerWait.
func (c *Cluster) claim(ctx context.Context, dataDir string) error {
	lockPath := filepath.Join(c.opt.Dir, "owner.lock")
	deadline := time.Now().Add(c.opt.OwnerWait)
	logged := false
	pause := func() error {
		select {
		case <-ctx.Done():
			return fmt.Errorf("embedpg: stopped while waiting for the process that runs the embedded PostgreSQL in %s: %w", c.opt.Dir, ctx.Err())
		case <-time.After(100 * time.Millisecond):
			return nil
		}
	}
	for c.lock == nil {
		f, holder, err := tryLock(lockPath)
		if err != nil {
			return err
		}
		if f != nil {
			c.lock = f
			break
		}
		if c.opt.Attach {
			if ok, err := c.attach(ctx, holder); ok || err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("embedpg: the embedded PostgreSQL in %s belongs to process %d, which did not accept connections within %v "+
					"(it is starting or stopping); run this again once that syncd is up, or has stopped", c.opt.Dir, holder, c.opt.OwnerWait)
			}
		} else {
			// The pid is written just after the lock is taken.
			if !logged && (holder != 0 || time.Until(deadline) < c.opt.OwnerWait-time.Second) {
				c.opt.Logger.Info(fmt.Sprintf("waiting for the previous syncd (pid %d) to stop its embedded PostgreSQL", holder),
					"dir", c.opt.Dir, "pid", holder, "up_to", c.opt.OwnerWait)
				logged = true
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("embedpg: the embedded PostgreSQL in %s still belongs to process %d after %v; "+
					"stop that syncd first (kill %d), give this one a data directory of its own (SYNC_DATA_DIR), "+
					"or, for several processes on one database, run PostgreSQL yourself and set DATABASE_URL", c.opt.Dir, holder, c.opt.OwnerWait, holder)
			}
		}
		if err := pause(); err != nil {
			return err
		}
	}
	if err := writePID(c.lock); err != nil {
		c.release()
		return err
	}
	// A PostgreSQL nobody owns may still run: one of a syncd that locked
	// nothing (an older version, stopping during an upgrade), or one still
	// exiting after its owner died.
	logged = false
	for {
		pm := livePostmaster(dataDir)
		if pm == 0 {
			return nil
		}
		if c.opt.Attach {
			if ok, err := c.attach(ctx, 0); ok || err != nil {
				c.release()
				return err
			}
		}
		if !logged {
			c.opt.Logger.Info(fmt.Sprintf("waiting for the PostgreSQL (pid %d) that another process started to stop", pm), "dir", dataDir, "up_to", c.opt.OwnerWait)
			logged = true
		}
		if time.Now().After(deadline) {
			c.release()
			return fmt.Errorf("embedpg: a PostgreSQL (pid %d) another process started still runs in %s after %v; "+
				"stop the syncd that runs it, or PostgreSQL itself (kill -INT %d), and start again", pm, dataDir, c.opt.OwnerWait, pm)
		}
		if err := pause(); err != nil {
			c.release()
			return err
		}
	}
}

// attach uses the cluster another process runs, if it accepts
// connections: ok reports whether it did.
func (c *Cluster) attach(ctx context.Context, owner int) (ok bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, c.URLFor("postgres"))
	if err != nil {
		return false, nil
	}
	defer conn.Close(context.Background())
	c.opt.Logger.Info("using the embedded PostgreSQL another process runs", "socket_dir", filepath.Join(c.opt.Dir, "run"), "owner_pid", owner)
	c.shared, c.ownerPID = true, owner
	return true, ensureDatabase(ctx, conn, c.opt.Database)
}

// tryLock takes the owner's lock without waiting: f is the locked file, or
// nil with holder the pid the holder wrote (0 if not yet written).
func tryLock(path string) (f *os.File, holder int, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("embedpg: %w", err)
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return f, 0, nil
	}
	defer f.Close()
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, 0, fmt.Errorf("embedpg: lock %s: %w", path, err)
	}
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	holder, _ = strconv.Atoi(strings.TrimSpace(string(b[:n])))
	return nil, holder, nil
}

// writePID names this process in the lock it holds, for whoever waits.
func writePID(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("embedpg: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return fmt.Errorf("embedpg: %w", err)
	}
	return nil
}

// livePostmaster is the pid of the PostgreSQL server that postmaster.pid
// names, if that process lives; 0 otherwise (a stale file is PostgreSQL's
// own to clear).
func livePostmaster(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
		return pid
	}
	return 0
}

// release gives up the ownership, once the cluster has stopped (or never
// started).
func (c *Cluster) release() {
	if c.lock != nil {
		_ = c.lock.Close()
		c.lock = nil
	}
}

// runAs returns the credential to run PostgreSQL under: nil when we are not
// root, the postgres account when we are (PostgreSQL refuses to run as root).
func runAs(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("embedpg: running as root, and PostgreSQL refuses to run as root; " +
			"no unprivileged 'postgres' account exists to run it as (installing the postgresql package creates one). " +
			"Run syncd as an ordinary user, create the account, or set DATABASE_URL")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// Every ancestor must be traversable by that account.
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err == nil {
			sys, _ := st.Sys().(*syscall.Stat_t)
			ok := st.Mode().Perm()&0o001 != 0 || (sys != nil && int(sys.Uid) == uid && st.Mode().Perm()&0o100 != 0)
			if !ok {
				return nil, fmt.Errorf("embedpg: running as root, PostgreSQL runs as the postgres account, which cannot enter %s; "+
					"choose a data directory outside it (SYNC_DATA_DIR, e.g. /var/lib/syncd)", p)
			}
		}
		if p == "/" || p == "." {
			break
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownTree(root string, uid, gid int) error {
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func pgEnv() []string {
	env := []string{"LC_ALL=C", "LANG=C"}
	if p := os.Getenv("PATH"); p != "" {
		env = append(env, "PATH="+p)
	}
	return env
}

// query is the connection parameters of a URL to the cluster: its socket,
// and its port when not the default.
func (opt *Options) query(sockDir string) url.Values {
	q := url.Values{"host": {sockDir}, "sslmode": {"disable"}}
	if opt.Port != 0 {
		q.Set("port", strconv.Itoa(opt.Port))
	}
	return q
}

func (c *Cluster) waitReady(ctx context.Context) error {
	sockDir, logPath := filepath.Join(c.opt.Dir, "run"), filepath.Join(c.opt.Dir, "postgres.log")
	_, exited := c.running()
	adminURL := (&url.URL{Scheme: "postgres", User: url.User(superuser), Path: "/postgres",
		RawQuery: c.opt.query(sockDir).Encode()}).String()
	var lastErr error
	for {
		select {
		case <-exited:
			c.mu.Lock()
			werr := c.waitErr
			c.mu.Unlock()
			return fmt.Errorf("embedpg: postgres exited during start-up (%v); last lines of %s:\n%s", werr, logPath, tail(logPath, 20))
		case <-ctx.Done():
			return fmt.Errorf("embedpg: postgres did not accept connections in time (%v); last lines of %s:\n%s", lastErr, logPath, tail(logPath, 20))
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, adminURL)
		cancel()
		if err == nil {
			defer conn.Close(context.Background())
			return ensureDatabase(ctx, conn, c.opt.Database)
		}
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
}

// ensureDatabase creates the database on first start.
func ensureDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("embedpg: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("embedpg: create database: %w", err)
		}
	}
	return nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Explain adds to err, the failure of a command that attached to another
// process's cluster (Options.Attach), that the owner stopped the cluster
// while the command ran, when it did.
func (c *Cluster) Explain(err error) error {
	if err == nil || !c.shared {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if conn, cerr := pgx.Connect(ctx, c.URLFor("postgres")); cerr == nil {
		conn.Close(ctx)
		return err
	}
	owner := "another process"
	if c.ownerPID != 0 {
		owner = fmt.Sprintf("process %d", c.ownerPID)
	}
	return fmt.Errorf("%w (the embedded PostgreSQL this command used is run by %s, a syncd, which stopped it while the command ran: "+
		"run the command again; with no syncd running, it starts the cluster itself)", err, owner)
}

// URL is the connection string for the cluster's database (Unix socket).
func (c *Cluster) URL() string { return c.url }

// URLFor is the connection string for another database on the cluster.
func (c *Cluster) URLFor(database string) string {
	u, _ := url.Parse(c.url)
	u.Path = "/" + database
	return u.String()
}

// Stop shuts the server down (fast shutdown: open transactions roll back,
// everything committed is on disk) and waits for it, up to ctx's deadline,
// after which it is killed.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.shared {
		return nil
	}
	c.stop.Do(func() {
		defer c.release() // after the cluster has exited: the next owner may start it
		cmd, exited := c.running()
		if cmd == nil {
			return
		}
		select {
		case <-exited:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-exited:
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-exited
			c.stopErr = fmt.Errorf("embedpg: killed after %v", ctx.Err())
		case <-t.C:
			_ = cmd.Process.Kill()
			<-exited
			c.stopErr = errors.New("embedpg: killed after 30 s without shutting down")
		}
		c.opt.Logger.Info("stopped embedded PostgreSQL")
	})
	return c.stopErr
}
