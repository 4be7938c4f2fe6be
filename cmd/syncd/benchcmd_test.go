package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/syncsubstrate/sync/store/pgtest"
)

// `syncd bench` without -url starts its own server (this binary, as
// `syncd serve`) and waits for its "listening" line: when that line's
// wording changed (issue 42), bench waited two minutes and gave up, and
// no test ran that path.
func TestBenchStartsItsOwnServer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "bench", "-database-url", pgtest.URL(t), "-workloads", "invoke-1",
		"-duration", "300ms", "-warmup", "100ms")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("syncd bench: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "listening on") || !strings.Contains(string(out), "invoke, 1 client") {
		t.Fatalf("syncd bench did not start its server and report invoke-1:\n%s", out)
	}
}
