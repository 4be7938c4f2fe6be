package oauth_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The authorization server keeps handlers apart from persistence: SQL
// lives in accounts.go (people's accounts), storage.go and cimd.go (the
// OAuth tables), and nowhere else in the package.
func TestSQLOnlyInPersistenceFiles(t *testing.T) {
	allowed := map[string]bool{"accounts.go": true, "storage.go": true, "cimd.go": true}
	sql := regexp.MustCompile("`\\s*(SELECT|INSERT INTO|UPDATE \\w+ SET|DELETE FROM|WITH \\w+ AS)\\b")
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || allowed[f] {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if loc := sql.FindIndex(raw); loc != nil {
			line := 1 + strings.Count(string(raw[:loc[0]]), "\n")
			t.Errorf("%s:%d has SQL; move it to accounts.go or storage.go", f, line)
		}
	}
}
