package oauth

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ory/fosite"
)

// Client ID Metadata Documents: a client whose client_id is an https URL
// publishes its metadata there (how Claude prefers to identify itself).
// Documents are fetched with an SSRF guard (public addresses only, checked
// at connect time so DNS cannot rebind to a private one), a size and time
// limit, and cached in smcp_oauth_clients for their max-age.

const (
	cimdMaxBytes = 32 << 10
	cimdTimeout  = 5 * time.Second
	cimdMinTTL   = 5 * time.Minute
	cimdMaxTTL   = 24 * time.Hour
	// cimdRetry is how long the last good document serves after a failed
	// fetch before the next attempt.
	cimdRetry = 5 * time.Minute
	// cimdMaxStale is how long after its last successful fetch the last
	// good document may stand in for failing fetches: long enough for a
	// host's outage, short enough that a document its publisher changed
	// (a redirect URI removed) cannot be kept alive by keeping syncd from
	// fetching it.
	cimdMaxStale = 7 * 24 * time.Hour
)

// goneError is the document's host saying it has no document there (404,
// 410): its publisher withdrew the client, so no stored copy stands in.
type goneError struct{ status int }

func (e *goneError) Error() string {
	return fmt.Sprintf("client metadata document answered %d", e.status)
}

// builtinFS holds last-known-good copies of Claude's published client
// metadata documents (README, "Deploying behind a proxy", item 4). A server
// that cannot reach claude.ai, with nothing stored, signs Claude in from
// them instead of failing closed: Claude has no fallback of its own.
//
//go:embed assets/cimd/*.json
var builtinFS embed.FS

// loadBuiltinDocuments reads and checks the built-in copies, keyed by
// their exact client id: each must pass what a fetched document passes,
// served at its own client_id over https.
func loadBuiltinDocuments(fsys fs.FS) (map[string]*registration, error) {
	names, err := fs.Glob(fsys, "assets/cimd/*.json")
	if err != nil {
		return nil, err
	}
	docs := map[string]*registration{}
	for _, name := range names {
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		var head struct {
			ClientID string `json:"client_id"`
		}
		_ = json.Unmarshal(body, &head) // parseDocument says what is wrong
		if err := checkDocumentURL(head.ClientID, false); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		reg, err := parseDocument(head.ClientID, body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if docs[head.ClientID] != nil {
			return nil, fmt.Errorf("%s: a second document for %s", name, head.ClientID)
		}
		docs[head.ClientID] = reg
	}
	return docs, nil
}

func isCIMD(id string) bool {
	return strings.HasPrefix(id, "https://") || strings.HasPrefix(id, "http://")
}

// cimdFetcher fetches metadata documents, directly or through the
// operator's outbound proxy.
type cimdFetcher struct {
	client       *http.Client // direct: the address check runs at connect time
	allowPrivate bool
	proxy        *url.URL
	roots        *x509.CertPool
}

// docError is a fault of the document's content: the client's publisher
// can fix it, and saying what it is reveals nothing about the network.
type docError struct{ msg string }

func (e *docError) Error() string { return e.msg }

// errNotFetched is all a caller learns of a failed fetch: the details
// (resolved addresses, TLS and proxy errors) go to the log only.
const errNotFetched = "the client metadata document could not be fetched"

// nonPublic are ranges that are not the public internet beyond what net.IP
// reports: shared address space (carrier-grade NAT), IETF protocol
// assignments, benchmarking, and inside IPv6's global unicast block the
// IETF protocol assignments (Teredo, which embeds an IPv4 address,
// among them), documentation and 6to4.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("2001::/23"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("2002::/16"), netip.MustParsePrefix("3fff::/20"),
}

// globalV6 is the only IPv6 block allocated for global unicast. Go calls
// every other non-special address "global unicast" too, among them the
// IPv4-compatible ::a.b.c.d and SIIT ::ffff:0:a.b.c.d forms, NAT64's
// 64:ff9b::/96 and the discard prefix 100::/64, which reach IPv4 or
// nowhere.
var globalV6 = netip.MustParsePrefix("2000::/3")

func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsUnspecified() || a.IsMulticast() || a.IsInterfaceLocalMulticast() || !a.IsGlobalUnicast() {
		return false
	}
	if a.Is6() && !globalV6.Contains(a) {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

func newCIMDFetcher(allowPrivate bool, roots *x509.CertPool, proxy *url.URL) *cimdFetcher {
	f := &cimdFetcher{allowPrivate: allowPrivate, roots: roots, proxy: proxy}
	dialer := &net.Dialer{Timeout: cimdTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("refusing to fetch client metadata from %s", address)
		}
		if !allowPrivate && !publicAddr(ap.Addr()) {
			return fmt.Errorf("refusing to fetch client metadata from non-public address %s", ap.Addr())
		}
		return nil
	}}
	tr := &http.Transport{DialContext: dialer.DialContext, TLSHandshakeTimeout: cimdTimeout, ResponseHeaderTimeout: cimdTimeout,
		MaxIdleConns: 4, Proxy: nil}
	if proxy != nil {
		tr.DialContext = f.dialViaProxy
	}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	f.client = &http.Client{Transport: tr, Timeout: cimdTimeout, CheckRedirect: noRedirects}
	return f
}

func noRedirects(*http.Request, []*http.Request) error {
	return errors.New("client metadata documents must not redirect")
}

// dialViaProxy opens a tunnel to addr through the operator's proxy (HTTP
// CONNECT). The proxy would resolve a host name itself, where no check of
// ours can see, so the name is resolved here, every address must be
// public, and the proxy is asked for the checked address: DNS cannot
// rebind between check and use. TLS to the document's host then runs over
// the tunnel, verified against the host name as usual.
func (f *cimdFetcher) dialViaProxy(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("resolving %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s has no address", host)
	}
	for _, a := range addrs {
		if !f.allowPrivate && !publicAddr(a) {
			return nil, fmt.Errorf("refusing to fetch client metadata from %s: it resolves to non-public address %s", host, a)
		}
	}
	target := net.JoinHostPort(addrs[0].Unmap().String(), port)
	proxyAddr := f.proxy.Host
	if f.proxy.Port() == "" {
		defPort := "80"
		if f.proxy.Scheme == "https" {
			defPort = "443"
		}
		proxyAddr = net.JoinHostPort(f.proxy.Hostname(), defPort)
	}
	conn, err := (&net.Dialer{Timeout: cimdTimeout}).DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("connecting to the outbound proxy: %w", err)
	}
	deadline := time.Now().Add(cimdTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if f.proxy.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: f.proxy.Hostname()})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS to the outbound proxy: %w", err)
		}
		conn = tc
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if u := f.proxy.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("asking the outbound proxy: %w", err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("reading the outbound proxy's answer: %w", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || br.Buffered() > 0 {
		conn.Close()
		return nil, fmt.Errorf("the outbound proxy answered %s to CONNECT %s", res.Status, target)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

func (f *cimdFetcher) fetch(ctx context.Context, id string) (*registration, time.Duration, error) {
	if err := checkDocumentURL(id, f.allowPrivate); err != nil {
		return nil, 0, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	req.Header.Set("Accept", "application/json")
	res, err := f.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetching client metadata: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound || res.StatusCode == http.StatusGone {
		return nil, 0, &goneError{res.StatusCode}
	}
	if res.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("client metadata document answered %d", res.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, cimdMaxBytes+1))
	if err != nil {
		return nil, 0, err
	}
	reg, err := parseDocument(id, body)
	if err != nil {
		return nil, 0, err
	}
	return reg, maxAge(res.Header.Get("Cache-Control")), nil
}

func checkDocumentURL(id string, allowHTTP bool) error {
	u, err := url.Parse(id)
	if err != nil || u.Host == "" || u.Fragment != "" || u.User != nil || (u.Scheme != "https" && !(allowHTTP && u.Scheme == "http")) {
		return &docError{fmt.Sprintf("client_id %q is not an https URL", id)}
	}
	return nil
}

// parseDocument checks a client metadata document served at id: what a
// fetched one must pass, and the built-in copies too, at start-up.
func parseDocument(id string, body []byte) (*registration, error) {
	if len(body) > cimdMaxBytes {
		return nil, &docError{fmt.Sprintf("the client metadata document is over %d bytes", cimdMaxBytes)}
	}
	var doc struct {
		ClientID string `json:"client_id"`
		registration
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, &docError{"the client metadata document is not a JSON object: " + err.Error()}
	}
	if doc.ClientID != id {
		return nil, &docError{fmt.Sprintf("the client metadata document names client_id %q, not its own URL", doc.ClientID)}
	}
	if doc.ClientName == "" || len(doc.RedirectURIs) == 0 {
		return nil, &docError{"the client metadata document needs client_name and redirect_uris"}
	}
	if doc.TokenEndpointAuthMethod != "" && doc.TokenEndpointAuthMethod != "none" {
		return nil, &docError{"metadata-document clients are public: token_endpoint_auth_method must be none"}
	}
	return &doc.registration, nil
}

func maxAge(cc string) time.Duration {
	ttl := time.Hour
	for _, part := range strings.Split(cc, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "max-age="); ok {
			if n, err := strconv.Atoi(v); err == nil {
				ttl = time.Duration(n) * time.Second
			}
		}
	}
	return min(max(ttl, cimdMinTTL), cimdMaxTTL)
}

// cimdClient returns a metadata-document client, from the database while
// its cached copy is fresh, else fetched anew. When a fetch fails, the
// last good document keeps serving (stale-if-error) for up to
// cimdMaxStale after it was last fetched: the client's host being down
// must not sign its users out at their next refresh. Failing that, a
// client with a built-in copy (Claude's) is served from it, limited to
// the redirect URIs the last fetched copy listed if there is one: a
// fetched document always wins, and the built-in copy never widens it. A
// host answering 404 or 410 withdrew the document, and no copy serves;
// nor does the built-in one when the host served a document that is not
// valid (the host answered; its answer is not overridden). Either way the
// next attempt waits cimdRetry. With documents turned off, stored ones are
// used as they are and no new one is fetched.
func (s *storage) cimdClient(ctx context.Context, id string) (*Client, error) {
	c, err := s.getClient(ctx, id)
	var fetched time.Time
	// fromBuiltin: the stored row is served from the built-in copy (its
	// redirect URIs are those it may serve at most) until a fetch
	// succeeds; it never passes for a fetched copy.
	var fromBuiltin bool
	if err == nil {
		if served, done, err := s.storedCIMD(ctx, id, c, &fetched, &fromBuiltin); done {
			return served, err
		}
	} else if !errors.Is(err, fosite.ErrNotFound) {
		return nil, err
	} else {
		c = nil
	}
	if s.noCIMD {
		return nil, fosite.ErrInvalidClient.WithHint(errCIMDOff)
	}
	reg, ttl, err := s.cimd.fetch(ctx, id)
	if err != nil {
		return s.fetchFailed(ctx, id, c, fetched, fromBuiltin, err)
	}
	return s.storeFetched(ctx, id, reg, ttl)
}

// storedCIMD serves the stored copy c of a metadata document while it is
// fresh (or documents are off), and refuses one a failed fetch marked
// refused; done false: fetch anew. It reads when the copy was fetched
// and whether it came from the built-in copy.
func (s *storage) storedCIMD(ctx context.Context, id string, c *Client, fetched *time.Time, fromBuiltin *bool) (served *Client, done bool, err error) {
	var fresh, refused bool
	// Rows stored before fetch times were kept: the copy was fetched at
	// most cimdMaxTTL before it expired.
	// A failed read must not pass for "stale": it would refuse a client
	// whose stored copy is good and log the wrong reason.
	if err := s.q(ctx).QueryRow(ctx, `SELECT coalesce((metadata->>'cimd_expires')::timestamptz > now(), false), coalesce((metadata->>'cimd_refused')::boolean, false),
		coalesce((metadata->>'cimd_fetched')::timestamptz, (metadata->>'cimd_expires')::timestamptz - make_interval(secs => $2), created_at),
		coalesce((metadata->>'cimd_builtin')::boolean, false)
		FROM smcp_oauth_clients WHERE id = $1`, id, cimdMaxTTL.Seconds()).Scan(&fresh, &refused, fetched, fromBuiltin); err != nil {
		return nil, true, err
	}
	if refused && (fresh || s.noCIMD) {
		return nil, true, fosite.ErrInvalidClient.WithHint(errNotFetched + "; retry later")
	}
	if fresh || s.noCIMD {
		if *fromBuiltin {
			if b := s.builtinClient(id, c.RedirectURIs); b != nil {
				return b, true, nil
			}
			// Marked so by a release that had a built-in copy this one
			// lacks: only a fetch may serve it now.
			return nil, true, fosite.ErrInvalidClient.WithHint(errNotFetched + "; retry later")
		}
		return s.allowedOnly(c), true, nil
	}
	return nil, false, nil
}

// fetchFailed answers a failed fetch (err): from the last good copy c
// while it is recent, else from the built-in copy if there is one and the
// host did not answer, else a refusal.
func (s *storage) fetchFailed(ctx context.Context, id string, c *Client, fetched time.Time, fromBuiltin bool, err error) (*Client, error) {
	var de *docError
	isDoc := errors.As(err, &de)
	var ge *goneError
	gone := errors.As(err, &ge)
	builtin := s.builtin[id] != nil && !isDoc && !gone
	if c != nil {
		return s.refreshFailed(ctx, id, c, fetched, fromBuiltin, gone, builtin, err)
	}
	if builtin {
		return s.firstFromBuiltin(ctx, id, err)
	}
	s.log.Warn("client metadata document refused", "client_id", id, "err", err)
	if isDoc {
		return nil, fosite.ErrInvalidClient.WithHint(de.msg)
	}
	return nil, fosite.ErrInvalidClient.WithHint(errNotFetched + "; retry later")
}

// refreshFailed answers a failed refresh of the stored copy c and
// postpones the next attempt by cimdRetry.
func (s *storage) refreshFailed(ctx context.Context, id string, c *Client, fetched time.Time, fromBuiltin, gone, builtin bool, err error) (*Client, error) {
	stale := !gone && !fromBuiltin && time.Since(fetched) < cimdMaxStale
	switch {
	case stale:
		s.log.Warn("client metadata document could not be refreshed; using the last good one", "client_id", id, "err", err, "retry_in", cimdRetry)
	case builtin:
		s.log.Warn("client metadata document could not be refreshed; using the built-in copy, within what the last fetched one allowed", "client_id", id,
			"err", err, "last_fetched", fetched, "retry_in", cimdRetry)
	default:
		s.log.Warn("client metadata document could not be refreshed and the last good one is withdrawn or too old; refusing the client", "client_id", id,
			"err", err, "last_fetched", fetched, "retry_in", cimdRetry)
	}
	// Not again at every request (each could wait out the 5 s
	// timeout): every process retries after cimdRetry.
	if _, err := s.q(ctx).Exec(ctx, `UPDATE smcp_oauth_clients SET metadata = coalesce(metadata, '{}') || jsonb_build_object('cimd_expires', now() + make_interval(secs => $2),
			'cimd_refused', $3::boolean, 'cimd_builtin', $4::boolean OR coalesce((metadata->>'cimd_builtin')::boolean, false))
			WHERE id = $1`, id, cimdRetry.Seconds(), !stale && !builtin, !stale && builtin); err != nil {
		s.log.Warn("could not postpone the client metadata document's next fetch", "client_id", id, "err", err)
	}
	switch {
	case stale:
		return s.allowedOnly(c), nil
	case builtin:
		return s.builtinClient(id, c.RedirectURIs), nil
	}
	return nil, fosite.ErrInvalidClient.WithHint(errNotFetched + "; retry later")
}

// firstFromBuiltin serves a client never fetched from its built-in copy,
// stored so that grants can refer to it.
func (s *storage) firstFromBuiltin(ctx context.Context, id string, err error) (*Client, error) {
	b := s.builtin[id]
	s.log.Warn("client metadata document could not be fetched; using the built-in copy (give syncd outbound HTTPS to the document's host, or SYNC_OUTBOUND_PROXY, to use the published one)",
		"client_id", id, "err", err, "retry_in", cimdRetry)
	// Stored like a fetched copy, so grants can refer to the client
	// and the next fetch waits cimdRetry; a fetch that succeeds
	// replaces it.
	meta, _ := json.Marshal(map[string]any{"cimd_expires": time.Now().Add(cimdRetry), "cimd_builtin": true})
	if _, err := s.q(ctx).Exec(ctx, `INSERT INTO smcp_oauth_clients (id, name, redirect_uris, auth_method, metadata) VALUES ($1, $2, $3, 'none', $4)
		ON CONFLICT (id) DO NOTHING`, id, b.ClientName, b.RedirectURIs, meta); err != nil {
		return nil, err
	}
	return s.builtinClient(id, b.RedirectURIs), nil
}

// storeFetched stores a freshly fetched document and serves it.
func (s *storage) storeFetched(ctx context.Context, id string, reg *registration, ttl time.Duration) (*Client, error) {
	// Info, not debug: this line is how an operator sees that the server
	// reaches the client's host (README, deployment checklist).
	s.log.Info("client metadata document fetched", "client_id", id, "client_name", reg.ClientName, "valid_for", ttl)
	now := time.Now()
	meta, _ := json.Marshal(map[string]any{"cimd_expires": now.Add(ttl), "cimd_fetched": now, "document": reg})
	_, err := s.q(ctx).Exec(ctx, `INSERT INTO smcp_oauth_clients (id, name, redirect_uris, auth_method, metadata) VALUES ($1, $2, $3, 'none', $4)
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, redirect_uris = EXCLUDED.redirect_uris, metadata = EXCLUDED.metadata`,
		id, reg.ClientName, reg.RedirectURIs, meta)
	if err != nil {
		return nil, err
	}
	return s.allowedOnly(&Client{ID: id, Name: reg.ClientName, RedirectURIs: reg.RedirectURIs, AuthMethod: "none"}), nil
}

// errCIMDOff is the hint for a metadata-document client id while
// documents are off.
const errCIMDOff = "This server does not accept client metadata documents: register at the registration endpoint."

// builtinClient is the client of id's built-in copy, with only those of
// its redirect URIs that within also lists (the last fetched copy's, or
// the built-in copy's own) and this server's policy allows; nil if id has
// no built-in copy.
func (s *storage) builtinClient(id string, within []string) *Client {
	b := s.builtin[id]
	if b == nil {
		return nil
	}
	c := &Client{ID: id, Name: b.ClientName, AuthMethod: "none"}
	for _, u := range b.RedirectURIs {
		if slices.Contains(within, u) {
			c.RedirectURIs = append(c.RedirectURIs, u)
		}
	}
	return s.allowedOnly(c)
}

// allowedOnly keeps the redirect URIs of a document that this server's
// policy allows: a document listing one it does not allow still works
// with the others, and a request for that one is refused on its own.
func (s *storage) allowedOnly(c *Client) *Client {
	out := *c
	out.RedirectURIs = nil
	for _, u := range c.RedirectURIs {
		if redirectAllowed(u, s.allow) {
			out.RedirectURIs = append(out.RedirectURIs, u)
		}
	}
	return &out
}
