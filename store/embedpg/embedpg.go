// Package embedpg runs a private PostgreSQL cluster for one process: it finds
// the server binaries, initialises a cluster on first start, runs it
// listening only on a Unix socket inside its own directory, and stops it
// cleanly. The server uses it when DATABASE_URL is unset; tests use it for
// their throwaway clusters.
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
	// NoSync makes initdb skip fsync (throwaway test clusters only).
	NoSync bool
	// StartTimeout bounds initdb plus start-up. Default 60 s.
	StartTimeout time.Duration
	// Logger receives progress. Default slog.Default().
	Logger *slog.Logger
}

// Cluster is a running embedded PostgreSQL server.
type Cluster struct {
	opt     Options
	shared  bool // run by another process; Stop leaves it running
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	url     string
	stop    sync.Once
	stopErr error
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
	if opt.Dir == "" {
		return nil, errors.New("embedpg: Options.Dir is required")
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
		return nil, err
	}
	opt.Dir = dir
	if opt.BinDir == "" {
		if opt.BinDir, err = FindBinaries(); err != nil {
			return nil, err
		}
	}
	sockDir := filepath.Join(dir, "run")
	// The kernel limits a socket path to 107 bytes.
	if n := len(filepath.Join(sockDir, ".s.PGSQL.5432")); n > 107 {
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

	ctx, cancel := context.WithTimeout(ctx, opt.StartTimeout)
	defer cancel()

	dataDir := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
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
			return nil, fmt.Errorf("embedpg: initdb failed: %w\n%s", err, out)
		}
	}

	c := &Cluster{opt: opt, exited: make(chan struct{})}
	c.url = (&url.URL{Scheme: "postgres", User: url.User(superuser), Path: "/" + opt.Database,
		RawQuery: url.Values{"host": {sockDir}, "sslmode": {"disable"}}.Encode()}).String()

	// Another process (a running syncd, when this is `syncd invite`)
	// already runs the cluster: use it, and leave stopping it to its owner.
	if conn, err := pgx.Connect(ctx, c.URLFor("postgres")); err == nil {
		defer conn.Close(ctx)
		opt.Logger.Info("using the embedded PostgreSQL another process runs", "socket_dir", sockDir)
		c.shared = true
		if err := ensureDatabase(ctx, conn, opt.Database); err != nil {
			return nil, err
		}
		return c, nil
	}

	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedpg: %w", err)
	}
	args := []string{"-D", dataDir, "-k", sockDir, "-c", "listen_addresses=", "-c", "unix_socket_permissions=0700"}
	keys := make([]string, 0, len(opt.Settings))
	for k := range opt.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+opt.Settings[k])
	}
	c.cmd = exec.Command(filepath.Join(opt.BinDir, "postgres"), args...)
	c.cmd.Env = pgEnv()
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// Own process group: a terminal's Ctrl-C reaches only us, and we stop
	// PostgreSQL after the HTTP server has drained. Pdeathsig stops it if we
	// die without a chance to.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}

	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the starting OS thread exits, so pin this
		// goroutine (and thread) for the server's lifetime.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := c.cmd.Start()
		started <- err
		if err == nil {
			c.waitErr = c.cmd.Wait()
		}
		logf.Close()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("embedpg: start postgres: %w", err)
	}
	opt.Logger.Info("started embedded PostgreSQL", "pid", c.cmd.Process.Pid, "socket_dir", sockDir)

	if err := c.waitReady(ctx, sockDir, logPath); err != nil {
		_ = c.Stop(context.Background())
		return nil, err
	}
	return c, nil
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

func (c *Cluster) waitReady(ctx context.Context, sockDir, logPath string) error {
	adminURL := (&url.URL{Scheme: "postgres", User: url.User(superuser), Path: "/postgres",
		RawQuery: url.Values{"host": {sockDir}, "sslmode": {"disable"}}.Encode()}).String()
	var lastErr error
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("embedpg: postgres exited during start-up (%v); last lines of %s:\n%s", c.waitErr, logPath, tail(logPath, 20))
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
		select {
		case <-c.exited:
			return
		default:
		}
		_ = c.cmd.Process.Signal(syscall.SIGINT)
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case <-c.exited:
		case <-ctx.Done():
			_ = c.cmd.Process.Kill()
			<-c.exited
			c.stopErr = fmt.Errorf("embedpg: killed after %v", ctx.Err())
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.exited
			c.stopErr = errors.New("embedpg: killed after 30 s without shutting down")
		}
		c.opt.Logger.Info("stopped embedded PostgreSQL")
	})
	return c.stopErr
}
