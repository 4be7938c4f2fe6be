package plugin

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestSkillFrontMatterAndURL(t *testing.T) {
	s := string(Skill("https://sync.example/"))
	front, body, ok := strings.Cut(strings.TrimPrefix(s, "---\n"), "\n---\n")
	if !ok || !strings.HasPrefix(s, "---\n") {
		t.Fatalf("no front matter:\n%.200s", s)
	}
	if !regexp.MustCompile(`(?m)^name: sync$`).MatchString(front) || !regexp.MustCompile(`(?m)^description: .*Use when .{40,}$`).MatchString(front) {
		t.Fatalf("front matter needs name and a description saying when to use it:\n%s", front)
	}
	if !strings.Contains(body, "https://sync.example/SKILL.md") || strings.Contains(s, "{{") || strings.Contains(s, "https://sync.example//") {
		t.Fatalf("the URL is not filled in once:\n%s", body)
	}
}

// The skill is loaded into a model's context whole: it stays well under
// 5,000 tokens (a word-and-punctuation count, which runs above Claude's
// tokenizer on English prose; Claude Code's own estimate is in
// TestClaudeCodeInstallsThePlugin).
func TestSkillSize(t *testing.T) {
	s := string(Skill("https://sync.example"))
	tokens := len(regexp.MustCompile(`\s?[A-Za-z]+|\s?[0-9]{1,3}|\s?[^\sA-Za-z0-9]+|\s+`).FindAllString(s, -1))
	t.Logf("SKILL.md: %d bytes, about %d tokens", len(s), tokens)
	if tokens > 3500 {
		t.Fatalf("SKILL.md is about %d tokens: keep it under 3,500", tokens)
	}
}

func TestMarketplaceNames(t *testing.T) {
	for host, want := range map[string]string{
		"sync.example.com":     "sync-sync-example-com",
		"localhost:8080":       "sync-localhost-8080",
		"Claude-Plugins.Local": "sync-claude-plugins-local",
		"[::1]:9":              "sync-1-9",
	} {
		if got := marketplaceName(host); got != want {
			t.Errorf("marketplaceName(%q) = %q, want %q", host, got, want)
		}
	}
}

// Two processes behind one URL serve the same archive (the marketplace
// pins its digest), and the archive is the plugin: manifest, the server's
// MCP endpoint, the skill.
func TestBundleIsTheSameEverywhere(t *testing.T) {
	a, err := New("https://sync.example")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New("https://sync.example/")
	if !bytes.Equal(a.archive, b.archive) || !bytes.Equal(a.marketplace, b.marketplace) {
		t.Fatal("two bundles for one URL differ")
	}
	other, _ := New("https://other.example")
	if other.archiveSum == a.archiveSum {
		t.Fatal("another URL made the same archive")
	}
	var m struct {
		Name    string
		Plugins []struct {
			Name   string
			Source struct{ Source, URL, Sha256 string }
		}
	}
	if err := json.Unmarshal(a.marketplace, &m); err != nil || len(m.Plugins) != 1 {
		t.Fatalf("marketplace %s: %v", a.marketplace, err)
	}
	sum := sha256.Sum256(a.archive)
	if p := m.Plugins[0]; p.Name != Name || p.Source.Source != "archive" || p.Source.URL != "https://sync.example"+ArchivePath || p.Source.Sha256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("plugin entry %+v", p)
	}
	zr, err := zip.NewReader(bytes.NewReader(a.archive), int64(len(a.archive)))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		body, _ := io.ReadAll(rc)
		files[f.Name] = string(body)
	}
	var servers struct {
		MCPServers map[string]struct{ Type, URL string } `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(files[".mcp.json"]), &servers); err != nil || servers.MCPServers[Name].URL != "https://sync.example/mcp" || servers.MCPServers[Name].Type != "http" {
		t.Fatalf(".mcp.json %q: %v", files[".mcp.json"], err)
	}
	if files["skills/sync/SKILL.md"] != string(Skill("https://sync.example")) || !strings.Contains(files[".claude-plugin/plugin.json"], `"name": "sync"`) {
		t.Fatalf("archive files %v", files)
	}
	if got := a.InstallCommand(); got != "claude plugin install sync --marketplace https://sync.example/claude/marketplace.json" {
		t.Fatalf("install command %q", got)
	}
	if _, err := New("not a url"); err == nil {
		t.Fatal("a public URL without a host made a bundle")
	}
}

func TestHandler(t *testing.T) {
	b, _ := New("https://sync.example")
	h := b.Handler()
	for path, kind := range map[string]string{SkillPath: "text/markdown", MarketplacePath: "application/json", ArchivePath: "application/zip"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), kind) || rec.Header().Get("ETag") == "" {
			t.Fatalf("GET %s: %d %v", path, rec.Code, rec.Header())
		}
		again := httptest.NewRequest("GET", path, nil)
		again.Header.Set("If-None-Match", rec.Header().Get("ETag"))
		rec2 := httptest.NewRecorder()
		h.ServeHTTP(rec2, again)
		if rec2.Code != http.StatusNotModified {
			t.Fatalf("revalidating %s: %d", path, rec2.Code)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/claude/other.zip", nil))
	if rec.Code != 404 {
		t.Fatalf("another path: %d", rec.Code)
	}
}
