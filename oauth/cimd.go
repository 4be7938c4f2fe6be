package oauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
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
)

func isCIMD(id string) bool {
	return strings.HasPrefix(id, "https://") || strings.HasPrefix(id, "http://")
}

// cimdFetcher fetches metadata documents.
type cimdFetcher struct {
	client       *http.Client
	allowPrivate bool
}

func newCIMDFetcher(allowPrivate bool, roots *x509.CertPool) *cimdFetcher {
	dialer := &net.Dialer{Timeout: cimdTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip := net.ParseIP(host)
		if ip == nil {
			return fmt.Errorf("refusing to fetch client metadata from %s", address)
		}
		if !allowPrivate && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
			ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast()) {
			return fmt.Errorf("refusing to fetch client metadata from non-public address %s", ip)
		}
		return nil
	}}
	tr := &http.Transport{DialContext: dialer.DialContext, TLSHandshakeTimeout: cimdTimeout, ResponseHeaderTimeout: cimdTimeout,
		MaxIdleConns: 4, Proxy: nil}
	if roots != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	}
	return &cimdFetcher{allowPrivate: allowPrivate, client: &http.Client{Transport: tr, Timeout: cimdTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("client metadata documents must not redirect")
		}}}
}

func (f *cimdFetcher) fetch(ctx context.Context, id string) (*registration, time.Duration, error) {
	u, err := url.Parse(id)
	if err != nil || u.Host == "" || u.Fragment != "" || u.User != nil || (u.Scheme != "https" && !(f.allowPrivate && u.Scheme == "http")) {
		return nil, 0, fmt.Errorf("client_id %q is not an https URL", id)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	req.Header.Set("Accept", "application/json")
	res, err := f.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("fetching client metadata: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("client metadata document answered %d", res.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, cimdMaxBytes+1))
	if err != nil {
		return nil, 0, err
	}
	if len(body) > cimdMaxBytes {
		return nil, 0, fmt.Errorf("client metadata document is over %d bytes", cimdMaxBytes)
	}
	var doc struct {
		ClientID string `json:"client_id"`
		registration
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, 0, fmt.Errorf("client metadata document is not JSON: %w", err)
	}
	if doc.ClientID != id {
		return nil, 0, fmt.Errorf("client metadata document names client_id %q, not its own URL", doc.ClientID)
	}
	if doc.ClientName == "" || len(doc.RedirectURIs) == 0 {
		return nil, 0, errors.New("client metadata document needs client_name and redirect_uris")
	}
	return &doc.registration, maxAge(res.Header.Get("Cache-Control")), nil
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
// its cached copy is fresh, else fetched anew.
func (s *storage) cimdClient(ctx context.Context, id string) (*Client, error) {
	c, err := s.getClient(ctx, id)
	if err == nil {
		var fresh bool
		_ = s.q(ctx).QueryRow(ctx, `SELECT (metadata->>'cimd_expires')::timestamptz > now() FROM smcp_oauth_clients WHERE id = $1`, id).Scan(&fresh)
		if fresh {
			return c, nil
		}
	} else if !errors.Is(err, fosite.ErrNotFound) {
		return nil, err
	}
	reg, ttl, err := s.cimd.fetch(ctx, id)
	if err != nil {
		return nil, fosite.ErrInvalidClient.WithHint(err.Error())
	}
	for _, u := range reg.RedirectURIs {
		if !redirectAllowed(u, s.allow) {
			return nil, fosite.ErrInvalidClient.WithHint(fmt.Sprintf("the client metadata document lists redirect URI %q, which this server does not allow", u))
		}
	}
	if reg.TokenEndpointAuthMethod != "" && reg.TokenEndpointAuthMethod != "none" {
		return nil, fosite.ErrInvalidClient.WithHint("metadata-document clients are public: token_endpoint_auth_method must be none")
	}
	meta, _ := json.Marshal(map[string]any{"cimd_expires": time.Now().Add(ttl), "document": reg})
	_, err = s.q(ctx).Exec(ctx, `INSERT INTO smcp_oauth_clients (id, name, redirect_uris, auth_method, metadata) VALUES ($1, $2, $3, 'none', $4)
		ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, redirect_uris = EXCLUDED.redirect_uris, metadata = EXCLUDED.metadata`,
		id, reg.ClientName, reg.RedirectURIs, meta)
	if err != nil {
		return nil, err
	}
	return &Client{ID: id, Name: reg.ClientName, RedirectURIs: reg.RedirectURIs, AuthMethod: "none"}, nil
}
