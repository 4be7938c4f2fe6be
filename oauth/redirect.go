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
		if raw == a || allowPrefix(a, u) {
			return u.Scheme == "https" || isLoopbackHost(u.Hostname())
		}
	}
	return false
}

// allowPrefix matches an allow-list entry ending in "*" on origin and
// path: the scheme and host (with port) must be the entry's exactly, and
// the path must start with the entry's path. A plain string prefix would
// let "https://app.example.com*" allow https://app.example.com.evil.net/.
func allowPrefix(pattern string, u *url.URL) bool {
	if !strings.HasSuffix(pattern, "*") {
		return false
	}
	p, err := url.Parse(strings.TrimSuffix(pattern, "*"))
	if err != nil || p.Host == "" || p.RawQuery != "" || p.Fragment != "" {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." { // would resolve outside the prefix
			return false
		}
	}
	return strings.EqualFold(p.Scheme, u.Scheme) && strings.EqualFold(p.Host, u.Host) && strings.HasPrefix(u.EscapedPath(), p.EscapedPath())
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
