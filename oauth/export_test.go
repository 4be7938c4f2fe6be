package oauth

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
)

// ForgetClients empties the in-memory client cache, so a test sees what
// the next process (or the next minute) would: the database's copy.
func (s *Server) ForgetClients() {
	s.store.clients.mu.Lock()
	s.store.clients.m = nil
	s.store.clients.mu.Unlock()
}

// SendMetadataFetchesTo makes every client metadata document fetch
// connect to addr, whatever the document's host (a test cannot be
// claude.ai), with tlsConf for its TLS; the address check is bypassed
// with it, so only tests can do this.
func (s *Server) SendMetadataFetchesTo(addr string, tlsConf *tls.Config) {
	tr := s.store.cimd.client.Transport.(*http.Transport)
	tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	tr.TLSClientConfig = tlsConf
	tr.CloseIdleConnections()
}
