package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/syncsubstrate/sync/store/embedpg"
)

// procStat is what /proc tells about a process.
type procStat struct {
	ok    bool
	cpu   float64 // user + system CPU seconds so far
	rssKB int64
	fds   int
}

// clockTicks is USER_HZ, 100 on every Linux platform Go supports.
const clockTicks = 100

// readProc reads pid's CPU time, resident set and open descriptors; ok is
// false when there is no such process here (or pid is 0).
func readProc(pid int) procStat {
	if pid <= 0 {
		return procStat{}
	}
	dir := "/proc/" + strconv.Itoa(pid)
	raw, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return procStat{}
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. utime and stime are fields 14 and 15 of the line.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return procStat{}
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	p := procStat{ok: true, cpu: float64(ut+st) / clockTicks}
	if status, err := os.ReadFile(dir + "/status"); err == nil {
		for line := range strings.Lines(string(status)) {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				p.rssKB, _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			}
		}
	}
	if ents, err := os.ReadDir(dir + "/fd"); err == nil {
		p.fds = len(ents)
	}
	return p
}

// watcher samples the server process over a measured window.
type watcher struct {
	pid          int
	start, end   time.Time
	done         chan struct{}
	cpu0, cpu1   float64
	maxRSS       int64
	fds          int
	haveCPUStart bool
	profiled     chan struct{} // closed when the CPU profile is saved (or failed)
}

// watch samples pid's CPU at from and until, and its resident set every
// quarter second between.
func (b *bencher) watch(from, until time.Time) *watcher {
	w := &watcher{pid: b.opt.PID, start: from, end: until, done: make(chan struct{}), profiled: make(chan struct{})}
	go func() {
		defer close(w.profiled)
		if err := b.cpuProfile(from, until); err != nil {
			fmt.Fprintf(b.opt.Log, "syncd bench: %s: CPU profile: %v\n", b.opt.workload, err)
		}
	}()
	if w.pid <= 0 {
		close(w.done)
		return w
	}
	go func() {
		defer close(w.done)
		time.Sleep(time.Until(from))
		p := readProc(w.pid)
		if !p.ok {
			return
		}
		w.cpu0, w.cpu1, w.haveCPUStart, w.maxRSS, w.fds = p.cpu, p.cpu, true, p.rssKB, p.fds
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for time.Now().Before(until) {
			<-t.C
			p := readProc(w.pid)
			if !p.ok {
				return
			}
			w.maxRSS = max(w.maxRSS, p.rssKB)
			w.cpu1, w.fds = p.cpu, p.fds
		}
	}()
	return w
}

// finish waits for the window's last sample and puts it in res.
func (w *watcher) finish(res *Result) {
	<-w.done
	<-w.profiled
	if !w.haveCPUStart {
		return
	}
	res.ServerCPU = 100 * (w.cpu1 - w.cpu0) / w.end.Sub(w.start).Seconds()
	res.ServerRSSMiB = float64(w.maxRSS) / 1024
	res.ServerFDs = w.fds
}

// cpuProfile saves the server's CPU profile from from to until (in whole
// seconds, at least one) as <workload>.pprof in Options.CPUProfileDir,
// when that is set.
func (b *bencher) cpuProfile(from, until time.Time) error {
	if b.opt.CPUProfileDir == "" || b.opt.MetricsURL == "" {
		return nil
	}
	secs := int(math.Ceil(until.Sub(from).Seconds()))
	time.Sleep(time.Until(from))
	url := strings.TrimSuffix(b.opt.MetricsURL, "/metrics") + "/debug/pprof/profile?seconds=" + strconv.Itoa(max(1, secs))
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second+time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("%s: HTTP %d %s (is the server's -pprof on?)", url, res.StatusCode, raw)
	}
	path := filepath.Join(b.opt.CPUProfileDir, b.opt.workload+".pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(b.opt.Log, "syncd bench: %s: CPU profile in %s (go tool pprof -top %s)\n", b.opt.workload, path, path)
	return nil
}

// server is a syncd process bench started.
type server struct {
	url, dbURL string
	metrics    string // its /metrics ("" if it did not say)
	pid        int
	stop       func()
}

// startServer starts syncd as a separate process on a free loopback port,
// rate limits and access log off, on opt.DatabaseURL or on an embedded
// cluster of its own (fsync on) in a temporary directory.
func startServer(ctx context.Context, opt *Options) (*server, error) {
	exe := opt.Exec
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "syncd-bench-")
	if err != nil {
		return nil, err
	}
	// As root the embedded cluster runs as the postgres account, which
	// must be able to enter the directory.
	_ = os.Chmod(dir, 0o755)
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	cleanups = append(cleanups, func() { _ = os.RemoveAll(dir) })
	dbURL := opt.DatabaseURL
	if dbURL == "" {
		fmt.Fprintf(opt.Log, "syncd bench: starting an embedded PostgreSQL in %s…\n", dir)
		cluster, err := embedpg.Start(ctx, embedpg.Options{Dir: filepath.Join(dir, "postgres"), Logger: slog.New(slog.NewTextHandler(opt.Log, nil))})
		if err != nil {
			cleanup()
			return nil, err
		}
		cleanups = append(cleanups, func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cluster.Stop(sctx)
		})
		dbURL = cluster.URL()
	}
	// A port chosen here rather than by the server: its public URL
	// (http://localhost:PORT, the OAuth resource and the passkeys' origin)
	// must name the port it listens on. Open sign-up lets the soak sign
	// its person up.
	port, err := freePort()
	if err != nil {
		cleanup()
		return nil, err
	}
	args := []string{"serve", "-addr", "127.0.0.1:" + port, "-metrics-addr", "127.0.0.1:0", "-log-format", "json", "-access-log", "false", "-rate-limit", "-1",
		"-signup", "open", "-data-dir", dir}
	if opt.CPUProfileDir != "" {
		args = append(args, "-pprof")
	}
	args = append(args, opt.ServerFlags...)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cleanup()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	cleanups = append(cleanups, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	found, metrics := make(chan string, 1), make(chan string, 1)
	go func() {
		// Read the server's log to the end (so it never blocks on a full
		// pipe); pass on its warnings and errors.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec struct {
				Msg   string `json:"msg"`
				Level string `json:"level"`
				Addr  string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) != nil {
				continue
			}
			// The line reads "syncd listening: open <public URL>" (the
			// first minute names the URL to open), so match its start.
			if strings.HasPrefix(rec.Msg, "syncd listening") {
				found <- rec.Addr
			} else if rec.Msg == "metrics listening" {
				metrics <- "http://" + rec.Addr + "/metrics"
			} else if rec.Level == "WARN" || rec.Level == "ERROR" {
				fmt.Fprintf(opt.Log, "syncd: %s\n", sc.Bytes())
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case addr := <-found:
		fmt.Fprintf(opt.Log, "syncd bench: server pid %d listening on %s\n", cmd.Process.Pid, addr)
		srv := &server{url: "http://" + addr, dbURL: dbURL, pid: cmd.Process.Pid, stop: cleanup}
		select {
		case srv.metrics = <-metrics:
		case <-time.After(2 * time.Second):
		}
		return srv, nil
	case <-exited:
		cleanup()
		return nil, errors.New("the server exited before listening (run it alone to see why)")
	case <-time.After(2 * time.Minute):
		cleanup()
		return nil, errors.New("the server did not listen within 2 minutes")
	case <-ctx.Done():
		cleanup()
		return nil, ctx.Err()
	}
}

// procThreads is pid's thread count (0 when unknown).
func procThreads(pid int) int {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// freePort is a loopback TCP port free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	_, port, err := net.SplitHostPort(ln.Addr().String())
	return port, err
}
