package mcp_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/syncsubstrate/sync/oauth/oauthtest"
	"github.com/syncsubstrate/sync/store/pgtest"
)

// publicProxy is a TLS reverse proxy in front of srv that keeps the public
// Host, as Caddy does by default and nginx does with `proxy_set_header Host
// $host`. The public name is example.com (the name httptest's certificate
// carries); the returned transport resolves it to the proxy and trusts its
// certificate, as a client on the internet would reach the real host.
func publicProxy(t *testing.T, srv *server) http.RoundTripper {
	t.Helper()
	backend, _ := url.Parse(srv.base)
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(backend)
		pr.Out.Host = pr.In.Host
		pr.SetXForwarded()
	}, FlushInterval: -1}
	proxy := httptest.NewTLSServer(rp)
	t.Cleanup(proxy.Close)
	tr := proxy.Client().Transport.(*http.Transport).Clone()
	addr := proxy.Listener.Addr().String()
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: tr.TLSClientConfig.RootCAs, ServerName: "example.com"}
	return tr
}

// syncd on its default loopback listener behind a Host-preserving TLS proxy
// under a public name: the whole OAuth flow, then tools. go-sdk's localhost
// protection used to answer every authenticated call 403 "invalid Host
// header", after the user had already consented.
func TestBehindHostPreservingTLSProxy(t *testing.T) {
	const public = "https://example.com"
	srv := startServerOpts(t, pgtest.New(t), serverOpts{publicURL: public})
	tr := publicProxy(t, srv)
	alice := oauthtest.SignUpVia(t, public, "alice", "", tr)

	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "Behind proxy", RedirectURIs: []string{"http://localhost:1/callback"}, TokenEndpointAuthMethod: "none",
			GrantTypes: []string{"authorization_code", "refresh_token"}, ResponseTypes: []string{"code"}}},
		RedirectURL:              "http://localhost:1/callback",
		AuthorizationCodeFetcher: consent(alice, nil),
		Client:                   &http.Client{Transport: tr},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "proxy-test", Version: "1"}, nil).Connect(ctx,
		&sdk.StreamableClientTransport{Endpoint: public + "/mcp", OAuthHandler: h, HTTPClient: &http.Client{Transport: tr}}, nil)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer cs.Close()
	mustTool(t, cs, "sync_create_room", map[string]any{"room": "porch"})
	mustTool(t, cs, "sync_embody", map[string]any{"room": "porch"})
	mustTool(t, cs, "sync_invoke_action", map[string]any{"action": "_send_message", "params": map[string]any{"body": "through the proxy"}})
	if got := mustTool(t, cs, "sync_read_context", nil); get(got, "messages", "count") != float64(1) {
		t.Fatalf("context through the proxy: %v", got["messages"])
	}
}

// DNS rebinding: a page under a hostile name that resolves to this server
// sends that name as Host. Only the public URL's host and loopback names
// are answered.
func TestAttackDNSRebindingHostRefused(t *testing.T) {
	srv := startServerOpts(t, pgtest.New(t), serverOpts{publicURL: "https://example.com"})
	for host, want := range map[string]int{
		"evil.example":     403,
		"example.com.evil": 403,
		"127.0.0.1.nip.io": 403,
		"example.com":      401, // reaches the bearer check
		"EXAMPLE.COM:443":  401,
		"localhost:8080":   401,
		"127.0.0.1":        401,
		"[::1]:9":          401,
	} {
		req, _ := http.NewRequest("POST", srv.base+"/mcp", nil)
		req.Host = host
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, res.StatusCode, want)
		}
	}
}
