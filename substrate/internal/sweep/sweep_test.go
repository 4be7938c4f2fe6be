package sweep

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink the sweep's goroutine writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The jobs run in turn at each tick, a failing one does not stop the
// next, and each is logged by what it did; the sweep ends with its
// context.
func TestEveryRunsEachJobInTurnAndLogsWhatItDid(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan string)
	jobs := []Job{
		{Run: func(context.Context) (int64, error) { ran <- "fail"; return 0, errors.New("boom") }, Failed: "first failed", Done: "first done"},
		{Run: func(context.Context) (int64, error) { ran <- "purge"; return 3, nil }, Failed: "second failed", Done: "second done", Level: slog.LevelDebug},
	}
	ended := make(chan struct{})
	go func() { Every(ctx, time.Millisecond, log, jobs...); close(ended) }()
	for _, want := range []string{"fail", "purge", "fail", "purge"} {
		if got := <-ran; got != want {
			t.Fatalf("ran %q, want %q", got, want)
		}
	}
	cancel()
	// A job may be running at the cancel: let it finish.
	go func() {
		for range ran {
		}
	}()
	<-ended
	out := logs.String()
	for _, want := range []string{`level=WARN msg="first failed" err=boom`, `level=DEBUG msg="second done" count=3`} {
		if !strings.Contains(out, want) {
			t.Errorf("log has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "first done") || strings.Contains(out, "second failed") {
		t.Errorf("a job was logged for what it did not do:\n%s", out)
	}
}
