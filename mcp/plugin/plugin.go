// Package plugin is sync for Claude Code: the skill that teaches a model
// how rooms are meant to be used (SKILL.md, served at SkillPath and as the
// help key "skill"), and a plugin marketplace of one plugin, this server's
// MCP endpoint with the skill, which Claude Code installs with one command
// (Bundle.InstallCommand).
//
// Everything is generated from the server's public URL, so one binary
// serves the right plugin wherever it is deployed, and every process
// behind one URL serves the same bytes.
package plugin

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Paths, relative to the public URL.
const (
	SkillPath       = "/SKILL.md"
	MarketplacePath = "/claude/marketplace.json"
	ArchivePath     = "/claude/sync-plugin.zip"
)

// Name is the plugin's name, and its MCP server's: Claude Code lists the
// server as plugin:sync:sync and its tools as mcp__plugin_sync_sync__*.
const Name = "sync"

//go:embed SKILL.md
var skillText string

// urlMark is where SKILL.md names the server's URL. A plain mark, not a
// template: the skill is markdown full of braces.
const urlMark = "{{.URL}}"

// Skill is SKILL.md with the server's public URL filled in.
func Skill(publicURL string) []byte {
	return []byte(strings.ReplaceAll(skillText, urlMark, strings.TrimSuffix(publicURL, "/")))
}

// Bundle is what a server serves for Claude Code, built once at start.
type Bundle struct {
	public      string
	name        string
	skill       []byte
	archive     []byte
	archiveSum  string
	marketplace []byte
	handler     http.Handler
}

// New builds the bundle for a server reached at publicURL.
func New(publicURL string) (*Bundle, error) {
	public := strings.TrimSuffix(publicURL, "/")
	u, err := url.Parse(public)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("plugin: public URL %q has no host", publicURL)
	}
	b := &Bundle{public: public, name: marketplaceName(u.Host), skill: Skill(public)}
	if b.archive, err = b.zip(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b.archive)
	b.archiveSum = hex.EncodeToString(sum[:])
	// No version anywhere: Claude Code then takes the archive's digest as
	// the plugin's version, so a changed skill or URL is an update and an
	// unchanged one is not, whatever the binary's version says.
	b.marketplace, err = json.MarshalIndent(map[string]any{
		"name":     b.name,
		"owner":    map[string]any{"name": "sync at " + u.Host, "url": public + "/"},
		"metadata": map[string]any{"description": "sync at " + u.Host + ": its MCP server and the skill for working in its rooms"},
		"plugins": []any{map[string]any{
			"name":        Name,
			"description": description(u.Host),
			"homepage":    public + "/",
			"source":      map[string]any{"source": "archive", "url": public + ArchivePath, "sha256": b.archiveSum},
		}},
	}, "", "  ")
	return b, err
}

// marketplaceName names the marketplace after the host, so that one
// person's two servers (work, home) are two marketplaces, and so that it
// never begins with a word Claude Code reserves for its own.
func marketplaceName(host string) string {
	var b strings.Builder
	b.WriteString("sync")
	dash := true
	for _, r := range strings.ToLower(host) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

func description(host string) string {
	return "sync rooms at " + host + ": coordinate with agents and people through shared state, actions, views, waits and the loom"
}

// Marketplace is the name Claude Code knows the marketplace by.
func (b *Bundle) Marketplace() string { return b.name }

// InstallCommand is the command that adds this server to Claude Code.
func (b *Bundle) InstallCommand() string {
	return "claude plugin install " + Name + " --marketplace " + b.public + MarketplacePath
}

// zip is the plugin: its manifest, the MCP server and the skill. Entries
// are stored, not deflated (a compressor's output may change with the Go
// release, and processes built by two releases behind one URL would then
// serve two digests), and carry a fixed time, so that every process and
// every start makes the same bytes (the marketplace pins their digest).
// The three files are a few kilobytes.
func (b *Bundle) zip() ([]byte, error) {
	manifest, err := json.MarshalIndent(map[string]any{
		"name": Name, "displayName": "sync", "description": description(hostOf(b.public)),
		"homepage": b.public + "/", "author": map[string]any{"name": "sync", "url": b.public + "/"},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	servers, err := json.MarshalIndent(map[string]any{
		"mcpServers": map[string]any{Name: map[string]any{"type": "http", "url": b.public + "/mcp"}},
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	w := zip.NewWriter(&out)
	for _, f := range []struct {
		name string
		body []byte
	}{
		{".claude-plugin/plugin.json", manifest},
		{".mcp.json", servers},
		{"skills/sync/SKILL.md", b.skill},
	} {
		fw, err := w.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Store, Modified: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return nil, err
		}
		if _, err := fw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func hostOf(public string) string {
	u, _ := url.Parse(public)
	return u.Host
}

// Handler serves SkillPath, MarketplacePath and ArchivePath (register it
// for each, GET). Clients revalidate (no-cache) against the content's
// digest, so a redeployed skill is seen at once and an unchanged one
// costs a 304.
func (b *Bundle) Handler() http.Handler {
	if b.handler == nil {
		b.handler = b.files()
	}
	return b.handler
}

func (b *Bundle) files() http.Handler {
	type file struct {
		body []byte
		kind string
		etag string
	}
	etag := func(body []byte) string {
		sum := sha256.Sum256(body)
		return `"` + hex.EncodeToString(sum[:16]) + `"`
	}
	files := map[string]file{
		SkillPath:       {b.skill, "text/markdown; charset=utf-8", etag(b.skill)},
		MarketplacePath: {b.marketplace, "application/json", etag(b.marketplace)},
		ArchivePath:     {b.archive, "application/zip", `"` + b.archiveSum[:32] + `"`},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", f.kind)
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", f.etag)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}
