package mcp_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// readStream reads an event stream to its end: whether it was
// acknowledged, and how it ended (nil: cleanly).
func readStream(body io.ReadCloser) (acked bool, err error) {
	defer body.Close()
	r := bufio.NewReader(body)
	for {
		line, err := r.ReadString('\n')
		acked = acked || strings.Contains(line, "notifications/subscriptions/acknowledged")
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return acked, err
		}
	}
}

// Ending Options.Shutdown (the server's shutdown begins) ends a held
// listen stream at once and cleanly, so its client reconnects elsewhere;
// a listen stream opened after it ends as soon as it began; an ordinary
// request (a tool call) is answered as before.
func TestShutdownEndsListenStreams(t *testing.T) {
	shutdown, begin := context.WithCancel(context.Background())
	defer begin()
	srv := startServerOpts(t, pgtest.New(t), serverOpts{shutdown: shutdown})
	alice := signup(t, srv, "alice")
	token := mintToken(t, srv, alice, nil)["access_token"].(string)

	held := make(chan error, 1)
	res := openListen(t, srv.base, token)
	lines := bufio.NewReader(res.Body)
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("listen stream before the shutdown: %v", err)
		}
		if strings.Contains(line, "notifications/subscriptions/acknowledged") {
			break
		}
	}
	go func() {
		_, err := readStream(io.NopCloser(lines))
		res.Body.Close()
		held <- err
	}()

	begin()
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the held listen stream was cut, not ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held listen stream did not end when the shutdown began")
	}

	// A stream that begins now ends at once.
	ended := make(chan error, 1)
	go func() {
		_, err := readStream(openListen(t, srv.base, token).Body)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("a listen stream opened during the shutdown was cut, not ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a listen stream opened during the shutdown was held")
	}

	// Ordinary requests go on.
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: srv.base + "/mcp", HTTPClient: &http.Client{Transport: oauthtest.Bearer{Token: token}}}, nil)
	if err != nil {
		t.Fatalf("connect during the shutdown: %v", err)
	}
	defer cs.Close()
	if r, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "sync_lobby"}); err != nil || r.IsError {
		t.Fatalf("a tool call during the shutdown: %v %v", err, r)
	}
}
