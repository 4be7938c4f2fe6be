package web

import (
	"bytes"
	"compress/gzip"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// staticAssets serves the page's scripts and stylesheets gzipped to a
// browser that accepts it (a third of their size on the first load), and
// everything else under /web/ as files. Compressing these is safe from
// BREACH-style attacks: they are the same bytes for everyone and reflect
// nothing of the request. The pages themselves (which show tokens and
// echo ?eval=) are not compressed here.
func staticAssets(static fs.FS) http.Handler {
	files := http.FileServerFS(static)
	zipped := map[string][]byte{}
	_ = fs.WalkDir(static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (!strings.HasSuffix(name, ".js") && !strings.HasSuffix(name, ".css")) {
			return nil
		}
		raw, err := fs.ReadFile(static, name)
		if err != nil {
			return nil
		}
		var b bytes.Buffer
		z, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = z.Write(raw)
		if z.Close() == nil {
			zipped[name] = b.Bytes()
		}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		z, ok := zipped[name]
		if !ok {
			files.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			files.ServeHTTP(w, r)
			return
		}
		h.Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
		h.Set("Content-Encoding", "gzip")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(z))
	})
}

// acceptsGzip reads an Accept-Encoding header: gzip listed, not with q=0.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}
