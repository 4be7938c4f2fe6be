// Package proxytest starts the reverse proxies the README documents
// (Debian's nginx and Caddy) on loopback, in front of a test server, with
// the README's own configuration snippets: a test through them checks the
// deployment a person would copy, not a configuration of the test's own.
package proxytest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// README returns the text of the first fenced block of the README whose
// info string is lang ("nginx", "caddy").
func README(t testing.TB, lang string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)\n```" + regexp.QuoteMeta(lang) + "\n(.*?)\n```").FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatalf("README has no ```%s block", lang)
	}
	return m[1]
}

// Options adjust the README's snippet for a test.
type Options struct {
	// ReadTimeout replaces the snippet's proxy read timeout (so a test of
	// keep-alives is fast). Default: the snippet's own.
	ReadTimeout time.Duration
}

// Nginx starts nginx with the README's nginx server block, listening on a
// loopback port over plain HTTP and proxying to upstream (host:port). It
// returns the proxy's base URL; the test's cleanup stops it. Skips when
// nginx is not installed.
func Nginx(t testing.TB, upstream string, opt Options) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/nginx"); err != nil {
			missing(t, "nginx")
		}
		bin = "/usr/sbin/nginx"
	}
	readme := README(t, "nginx")
	return "http://127.0.0.1:" + Start(t, "nginx", false, func(port string) (*exec.Cmd, string) {
		block := readme
		// TLS is the proxy's business and not under test: the listener is
		// plain HTTP on loopback; everything inside location is the README's.
		block = regexp.MustCompile(`listen [^;]*;`).ReplaceAllString(block, "listen 127.0.0.1:"+port+";")
		block = strings.ReplaceAll(block, "http://127.0.0.1:8080", "http://"+upstream)
		if opt.ReadTimeout > 0 {
			block = regexp.MustCompile(`proxy_read_timeout [^;]*;`).ReplaceAllString(block, fmt.Sprintf("proxy_read_timeout %dms;", opt.ReadTimeout.Milliseconds()))
		}
		dir := t.TempDir()
		for _, d := range []string{"logs", "tmp"} {
			_ = os.MkdirAll(filepath.Join(dir, d), 0o777)
		}
		_ = os.Chmod(dir, 0o777)
		conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/logs/error.log warn;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path %[1]s/tmp/body;
    proxy_temp_path %[1]s/tmp/proxy;
    fastcgi_temp_path %[1]s/tmp/fastcgi;
    uwsgi_temp_path %[1]s/tmp/uwsgi;
    scgi_temp_path %[1]s/tmp/scgi;
%[2]s
}
`, dir, block)
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-p", dir, "-c", path), filepath.Join(dir, "logs", "error.log")
	})
}

// Caddy starts Caddy with the README's Caddyfile site block, serving
// plain HTTP on a loopback port and proxying to upstream. Skips when caddy
// is not installed.
func Caddy(t testing.TB, upstream string, opt Options) string {
	t.Helper()
	bin, err := exec.LookPath("caddy")
	if err != nil {
		missing(t, "caddy")
	}
	readme := README(t, "caddy")
	return "http://127.0.0.1:" + Start(t, "caddy", false, func(port string) (*exec.Cmd, string) {
		block := readme
		block = strings.Replace(block, "sync.example.org", "http://127.0.0.1:"+port, 1)
		block = strings.ReplaceAll(block, "127.0.0.1:8080", upstream)
		if opt.ReadTimeout > 0 {
			block = regexp.MustCompile(`read_timeout \S+`).ReplaceAllString(block, fmt.Sprintf("read_timeout %dms", opt.ReadTimeout.Milliseconds()))
		}
		dir := t.TempDir()
		// default_bind: Caddy would listen on every address (":port"),
		// and a loopback listener someone else holds on that port would
		// still take the test's connections.
		conf := "{\n\tadmin off\n\tauto_https off\n\tdefault_bind 127.0.0.1\n}\n\n" + block + "\n"
		path := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "run", "--adapter", "caddyfile", "--config", path)
		cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
		logPath := filepath.Join(dir, "caddy.log")
		return cmd, logPath
	})
}

// Start starts a proxy that binds its own loopback port (it cannot be
// handed a listener): mk makes the command and its log's path for a port.
// The port is picked free and then bound by the proxy, and another
// process (an outgoing connection's local port, on a machine running other
// tests in parallel) can take it in between. The proxy then exits saying
// so, and it is started again on another port, only for that reason and
// up to 5 times. It returns the port the proxy listens on; the process
// stops when the test ends (graceful: SIGINT first, then SIGKILL after
// 5 s, for an nginx with worker processes that a SIGKILL would orphan).
func Start(t testing.TB, name string, graceful bool, mk func(port string) (cmd *exec.Cmd, logPath string)) string {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port := freePort(t)
		cmd, logPath := mk(port)
		err := startOn(t, name, port, logPath, graceful, cmd)
		if err == nil {
			return port
		}
		if attempt == 5 {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %v: another port", name, err)
	}
}

// errInUse is a proxy's exit because its port was taken.
var errInUse = errors.New("port taken before the proxy could listen on it")

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// startOn starts cmd and waits until it listens on port. Accepting a
// connection is not proof: whoever took the port accepts too, so on Linux
// the listening socket must be one of the process's own. It answers
// errInUse when the process exits with "address already in use" in its
// log, and fails the test on any other exit.
func startOn(t testing.TB, name, port, logPath string, graceful bool, cmd *exec.Cmd) error {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	if cmd.Stderr == nil {
		cmd.Stderr = logf
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		if graceful {
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
			}
		}
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if listens(cmd.Process.Pid, port) {
			t.Cleanup(stop)
			return nil
		}
		select {
		case <-exited:
			stop()
			out, _ := os.ReadFile(logPath)
			if strings.Contains(strings.ToLower(string(out)), "address already in use") {
				return fmt.Errorf("%w: 127.0.0.1:%s", errInUse, port)
			}
			t.Fatalf("%s exited at start:\n%s", name, out)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			out, _ := os.ReadFile(logPath)
			t.Fatalf("%s did not listen on %s in 20 s:\n%s", name, port, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// listens tells whether process pid holds a socket listening on the
// loopback port (Linux: /proc/net/tcp and the process's descriptors).
// Elsewhere it falls back to a connection being accepted.
func listens(pid int, port string) bool {
	table, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	local := fmt.Sprintf("0100007F:%04X", n)
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(table), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) >= 10 && f[1] == local && f[3] == "0A" {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			return true
		}
	}
	return false
}

// missing skips a test whose proxy is not installed, except in CI
// (CI=true), where .ci/run installs both and a skip would hide a missing
// install step.
func missing(t testing.TB, proxy string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not installed (.ci/run installs it)", proxy)
	}
	t.Skipf("%s is not installed", proxy)
}
