// Package proxytest starts the reverse proxies the README documents
// (Debian's nginx and Caddy) on loopback, in front of a test server, with
// the README's own configuration snippets: a test through them checks the
// deployment a person would copy, not a configuration of the test's own.
package proxytest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
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
	block := README(t, "nginx")
	port := freePort(t)
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
	return run(t, "nginx", port, filepath.Join(dir, "logs", "error.log"), exec.Command(bin, "-p", dir, "-c", path))
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
	block := README(t, "caddy")
	port := freePort(t)
	block = strings.Replace(block, "sync.example.org", "http://127.0.0.1:"+port, 1)
	block = strings.ReplaceAll(block, "127.0.0.1:8080", upstream)
	if opt.ReadTimeout > 0 {
		block = regexp.MustCompile(`read_timeout \S+`).ReplaceAllString(block, fmt.Sprintf("read_timeout %dms", opt.ReadTimeout.Milliseconds()))
	}
	dir := t.TempDir()
	conf := "{\n\tadmin off\n\tauto_https off\n}\n\n" + block + "\n"
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--adapter", "caddyfile", "--config", path)
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	logPath := filepath.Join(dir, "caddy.log")
	return run(t, "caddy", port, logPath, cmd)
}

// run starts cmd, waits until port accepts connections, and stops the
// process (by its own pid) when the test ends.
func run(t testing.TB, name, port, logPath string, cmd *exec.Cmd) string {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logf.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
		if err == nil {
			c.Close()
			return "http://127.0.0.1:" + port
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited at start:\n%s", name, out)
		default:
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(logPath)
			t.Fatalf("%s did not listen on %s in 20 s:\n%s", name, port, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
