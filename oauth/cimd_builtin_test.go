package oauth

import (
	"strings"
	"testing"
	"testing/fstest"
)

// The built-in copies pass the checks a fetched document must pass, and a
// copy that would not is refused at start-up rather than served.
func TestBuiltinDocumentsChecked(t *testing.T) {
	docs, err := loadBuiltinDocuments(builtinFS)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"https://claude.ai/oauth/claude-code-client-metadata", "https://claude.ai/oauth/mcp-oauth-client-metadata"} {
		if docs[id] == nil || docs[id].ClientName == "" || len(docs[id].RedirectURIs) == 0 {
			t.Fatalf("no usable built-in copy for %s: %+v", id, docs[id])
		}
	}
	for name, body := range map[string]string{
		"http id":      `{"client_id":"http://claude.ai/x","client_name":"C","redirect_uris":["http://localhost/callback"]}`,
		"no redirects": `{"client_id":"https://claude.ai/x","client_name":"C","redirect_uris":[]}`,
		"secret":       `{"client_id":"https://claude.ai/x","client_name":"C","redirect_uris":["http://localhost/callback"],"token_endpoint_auth_method":"client_secret_post"}`,
		"not json":     `{"client_id":"https://claude.ai/x",`,
		"too big":      `{"client_id":"https://claude.ai/x","client_name":"` + strings.Repeat("C", cimdMaxBytes) + `","redirect_uris":["http://localhost/callback"]}`,
	} {
		if _, err := loadBuiltinDocuments(fstest.MapFS{"assets/cimd/x.json": {Data: []byte(body)}}); err == nil {
			t.Errorf("%s: a built-in copy that a fetch would refuse was accepted", name)
		}
	}
}
