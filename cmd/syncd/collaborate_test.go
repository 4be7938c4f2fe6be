package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/store"
	"github.com/syncsubstrate/sync/store/pgtest"
	"github.com/syncsubstrate/sync/substrate"
	"github.com/syncsubstrate/sync/substrate/loom"
)

func TestCollaborateConfig(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SYNC_COLLAB_ROOM", "env-room")
	t.Setenv("SYNC_COLLAB_CHAT_KEY", "sk-from-env")
	t.Setenv("SYNC_COLLAB_MAX_CALLS", "7")
	c, err := parseCollabConfig([]string{"-room", "story", "-agent", "claude", "-chat-url", "http://127.0.0.1:9/v1", "-chat-model", "m",
		"-max-tokens", "1000", "-max-time", "90s", "-branch", "8.2", "-tree", "2"})
	if err != nil {
		t.Fatal(err)
	}
	r := c.run
	if r.Room != "story" || r.Agent != "claude" || r.MaxCalls != 7 || r.MaxTokens != 1000 || r.MaxTime != 90*time.Second ||
		r.Branch != "8.2" || r.Tree != 2 || r.ChatKey != "sk-from-env" || r.TurnCalls != 8 || r.ContextTokens != 6000 {
		t.Fatalf("%+v", r)
	}
	// Read, the keys leave the environment (a child process, such as the
	// embedded cluster, would inherit them).
	if _, ok := os.LookupEnv("SYNC_COLLAB_CHAT_KEY"); ok {
		t.Fatal("the chat key is still in the environment")
	}
	// The key file wins over the environment; the key is never a flag.
	if c, err = parseCollabConfig([]string{"-agent", "a", "-chat-url", "http://x", "-chat-model", "m", "-chat-key-file", key}); err != nil || c.run.ChatKey != "sk-from-file" {
		t.Fatalf("%v %q", err, c.run.ChatKey)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-room", ""}, "missing -room, -agent, -chat-url, -chat-model"},
		{[]string{"-agent", "a", "-chat-url", "u", "-chat-model", "m", "-chat-key", "sk"}, "flag provided but not defined: -chat-key"},
		{[]string{"-agent", "a", "-chat-url", "u", "-chat-model", "m", "-max-calls", "0"}, `max calls "0" is not a positive whole number`},
		{[]string{"-agent", "a", "-chat-url", "u", "-chat-model", "m", "-max-time", "forever"}, `max time "forever" is not a positive duration`},
		{[]string{"-agent", "a", "-chat-url", "u", "-chat-model", "m", "-chat-key-file", filepath.Join(dir, "absent")}, "chat key file:"},
	} {
		if _, err := parseCollabConfig(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

// syncd collaborate runs against the server's database: a room made by
// another process's service, the collaborator's writes visible to it.
func TestCollaborateAgainstTheServersDatabase(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	db, err := store.Open(ctx, url, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	svc := substrate.New(db, substrate.Options{Features: features()})
	t.Cleanup(svc.Close)
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "story"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.Join(ctx, admin, "story", substrate.JoinRequest{ID: "claude", Name: "Claude"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loom.Of(svc).Run(ctx, admin, "story", "→ new tree \"t\" \"Once.\"\n→ permit claude loom_write"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var auth atomic.Value
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		text := "→ add \"written by the adapter\""
		if calls.Add(1) > 1 {
			text = "→ stop"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"message": map[string]string{"content": text}}}})
	}))
	t.Cleanup(chat.Close)
	keyFile := filepath.Join(t.TempDir(), "key")
	_ = os.WriteFile(keyFile, []byte("sk-adapter"), 0o600)
	cc, err := parseCollabConfig([]string{"-database-url", url, "-room", "story", "-agent", "claude", "-chat-url", chat.URL,
		"-chat-model", "m", "-chat-key-file", keyFile, "-max-time", "30s"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- collaborate(ctx, cc) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("syncd collaborate did not stop")
	}
	res, err := loom.Of(svc).Run(ctx, admin, "story", "→ view 2")
	if err != nil || !strings.Contains(res.Text, "claude› · branch 1\nwritten by the adapter") {
		t.Fatalf("%v %v", res, err)
	}
	usage, _ := loom.Of(svc).CollaboratorUsage(ctx, admin, "story")
	if len(usage) != 1 || usage[0].Calls != 2 || usage[0].Reason != "stopped: asked by claude" {
		t.Fatalf("%+v", usage)
	}
	if a, _ := auth.Load().(string); a != "Bearer sk-adapter" {
		t.Fatalf("authorization %q", a)
	}
}

// syncd collaborate killed with -9 says nothing on its way out: its
// record shows it alive while it runs (the lease renewed), then gone
// once the lease lapses.
func TestCollaborateKilledShowsGone(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	db, err := store.Open(ctx, url, store.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	svc := substrate.New(db, substrate.Options{Features: features()})
	t.Cleanup(svc.Close)
	room, err := svc.CreateRoom(ctx, substrate.CreateRoomRequest{ID: "story"})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := svc.Authenticate(ctx, room.Token)
	if _, err := svc.Join(ctx, admin, "story", substrate.JoinRequest{ID: "claude", Name: "Claude"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loom.Of(svc).Run(ctx, admin, "story", "→ new tree \"t\" \"Once.\"\n→ permit claude loom_write"); err != nil {
		t.Fatal(err)
	}
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"message": map[string]string{"content": "I wait."}}}})
	}))
	t.Cleanup(chat.Close)
	// The lease outlasts a renewal (a write of the room, every third of
	// the lease) delayed on a loaded machine: with 1 s, a room lock or a
	// database held 700 ms made the running collaborator show gone.
	const lease = 2 * time.Second
	cmd := exec.Command(os.Args[0], "collaborate", "-database-url", url, "-room", "story", "-agent", "claude",
		"-chat-url", chat.URL, "-chat-model", "m", "-lease", lease.String(), "-max-time", "60s")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	state := func() string {
		usage, _ := loom.Of(svc).CollaboratorUsage(ctx, admin, "story")
		if len(usage) != 1 {
			return ""
		}
		return usage[0].State
	}
	until := func(want string) {
		t.Helper()
		pgtest.Eventually(t, 30*time.Second, func() bool { return state() == want }, "the record to show %q (it shows %q)", want, func() any { return state() })
	}
	until("waiting")
	// Stays: two leases running out on the real clock is what the
	// collaborator must outlive by renewing.
	time.Sleep(2*lease + 500*time.Millisecond)
	if s := state(); s != "waiting" {
		t.Fatalf("a running collaborator shows %q", s)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	until("gone")
}

// -chat-key-file - reads the key from standard input (a pipe from a
// secret store), so it is in neither the environment nor a file.
func TestCollaborateKeyFromStdin(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.WriteString("sk-from-stdin\n")
	_ = w.Close()
	stdin := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = stdin; _ = r.Close() })
	c, err := parseCollabConfig([]string{"-agent", "a", "-room", "r", "-chat-url", "http://x", "-chat-model", "m", "-chat-key-file", "-"})
	if err != nil || c.run.ChatKey != "sk-from-stdin" {
		t.Fatalf("%v %q", err, c.run.ChatKey)
	}
}
