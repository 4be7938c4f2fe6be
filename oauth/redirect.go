package oauth

import (
	"net"
	"net/url"
	"strings"
)

// Redirect-URI policy: Claude's callbacks, loopback redirects on any port
// (RFC 8252 §7.3: native clients pick a free port each time), and the
// operator's allow-list. Everything else is refused at registration and at
// authorize.

func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// redirectAllowed applies the policy to one URI.
func redirectAllowed(raw string, allow []string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Fragment != "" || u.User != nil || u.Host == "" {
		return false
	}
	switch {
	case u.Scheme == "http" && isLoopbackHost(u.Hostname()):
		return true
	case u.Scheme == "https" && (u.Host == "claude.ai" || u.Host == "claude.com") && u.Path == "/api/mcp/auth_callback":
		return true
	}
	for _, a := range allow {
		if raw == a || (strings.HasSuffix(a, "*") && strings.HasPrefix(raw, strings.TrimSuffix(a, "*"))) {
			return u.Scheme == "https" || isLoopbackHost(u.Hostname())
		}
	}
	return false
}

// loopbackMatches reports whether requested equals a registered loopback
// URI up to the port.
func loopbackMatches(registered []string, requested string) bool {
	ru, err := url.Parse(requested)
	if err != nil || ru.Scheme != "http" || !isLoopbackHost(ru.Hostname()) {
		return false
	}
	for _, r := range registered {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "http" || !isLoopbackHost(u.Hostname()) {
			continue
		}
		if u.Hostname() == ru.Hostname() && u.Path == ru.Path && u.RawQuery == ru.RawQuery {
			return true
		}
	}
	return false
}
