package mcp

import (
	_ "embed"
	"net/http"
	"strconv"
)

// sync's icon (assets/gen.go draws it): serverInfo names it, so hosts
// such as Claude show it next to the connector, and browsers find the
// favicon at the usual place.
var (
	//go:embed assets/icon.png
	iconPNG []byte
	//go:embed assets/favicon.ico
	faviconICO []byte
)

// Paths of the icon and the favicon, relative to the public URL.
const (
	IconPath    = "/icon.png"
	FaviconPath = "/favicon.ico"
)

// Icons serves IconPath and FaviconPath (register it for both).
func Icons() http.Handler {
	// The assets change only with a release: a day's caching.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, kind := iconPNG, "image/png"
		if r.URL.Path == FaviconPath {
			body, kind = faviconICO, "image/x-icon"
		}
		w.Header().Set("Content-Type", kind)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Cache-Control", "public, max-age=86400")
		if r.Method == http.MethodHead {
			return
		}
		_, _ = w.Write(body)
	})
}
