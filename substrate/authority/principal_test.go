package authority

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/syncsubstrate/sync/substrate/errs"
)

// A token hash comes only with its token: FromToken tells the kind by the
// prefix and carries the hash the core looks up, and refuses what is no
// sync token.
func TestFromTokenCarriesItsHash(t *testing.T) {
	for token, kind := range map[string]Kind{"room_x": KindRoom, "view_x": KindView, "as_x": KindAgent} {
		p, ok := FromToken(token)
		if !ok || p.Kind != kind || !bytes.Equal(p.TokenHash(), HashToken(token)) || p.RoomID != "" {
			t.Errorf("FromToken(%q) = %+v, %v", token, p, ok)
		}
	}
	for _, token := range []string{"", "bearer", "observer_x", "ROOM_x"} {
		if p, ok := FromToken(token); ok || p != nil {
			t.Errorf("FromToken(%q) = %+v, true", token, p)
		}
	}
	if h := ObserverPrincipal("r").TokenHash(); h != nil {
		t.Errorf("a principal made without a token has hash %x", h)
	}
	var nilP *Principal
	if nilP.TokenHash() != nil {
		t.Error("a nil principal has a token hash")
	}
}

// What a memory of token lookups keeps is who the token names, its grants
// (a copy) and its hash, marked FromMemory; nothing a surface set. A
// field added to Principal is decided here.
func TestRememberedKeepsWhatTheTokenNames(t *testing.T) {
	p, _ := FromToken("as_secret")
	p.RoomID, p.AgentID, p.Grants = "r", "a", []string{"x"}
	p.ReadsAll, p.Person, p.readsAs = true, true, "b"
	p.Ceiling = func(string) bool { return true }
	p.Words = errs.Plain
	p.Refresh = func(context.Context) (*Principal, error) { return nil, nil }
	p.heartbeatAge = 5
	r := p.Remembered()
	kept := map[string]bool{"Kind": true, "RoomID": true, "AgentID": true, "Grants": true, "tokenHash": true, "remembered": true}
	rv, pv := reflect.ValueOf(r).Elem(), reflect.ValueOf(p).Elem()
	typ := rv.Type()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if kept[name] {
			continue
		}
		if !rv.Field(i).IsZero() {
			t.Errorf("Remembered keeps Principal.%s, which the token does not name", name)
		}
		if pv.Field(i).IsZero() {
			t.Errorf("Principal.%s is new: set it above and decide whether Remembered keeps it", name)
		}
	}
	if !r.FromMemory() || p.FromMemory() {
		t.Errorf("FromMemory: remembered %v, original %v", r.FromMemory(), p.FromMemory())
	}
	if r.Kind != KindAgent || r.RoomID != "r" || r.AgentID != "a" || !slices.Equal(r.Grants, []string{"x"}) || !bytes.Equal(r.TokenHash(), p.TokenHash()) {
		t.Errorf("Remembered = %+v", r)
	}
	r.Grants[0] = "*"
	if p.Grants[0] != "x" {
		t.Error("Remembered shares its grants with the original")
	}
}

// The hashes sit in the slot of the row that must still hold them.
func TestTokenHashesBySlot(t *testing.T) {
	for token, want := range map[string]int{"room_x": 0, "view_x": 1, "as_x": 2} {
		p, _ := FromToken(token)
		room, view, agent := p.TokenHashes()
		got := [3][]byte{room, view, agent}
		for i, h := range got {
			if (i == want) != (h != nil) {
				t.Errorf("%s: slot %d holds %x", token, i, h)
			}
		}
	}
	for _, p := range []*Principal{nil, ObserverPrincipal("r"), {Kind: KindObserver, tokenHash: []byte("h")}} {
		if room, view, agent := p.TokenHashes(); room != nil || view != nil || agent != nil {
			t.Errorf("%+v has token hashes", p)
		}
	}
}

// Grants read again under the lock are capped by the principal's
// Ceiling, and the original is left as it was.
func TestWithGrantsKeepsTheCeiling(t *testing.T) {
	p := &Principal{Kind: KindAgent, RoomID: "r", AgentID: "a", Grants: []string{"x"}, Ceiling: func(g string) bool { return g != "*" }}
	fresh := []string{"*", "y"}
	q := p.WithGrants(fresh)
	if !slices.Equal(q.Grants, []string{"y"}) || q.Admin() {
		t.Errorf("capped grants = %v", q.Grants)
	}
	if !slices.Equal(fresh, []string{"*", "y"}) || !slices.Equal(p.Grants, []string{"x"}) {
		t.Errorf("WithGrants changed its inputs: %v, %v", fresh, p.Grants)
	}
	if q := (&Principal{Kind: KindAgent, AgentID: "a"}).WithGrants(fresh); !q.Admin() {
		t.Errorf("without a ceiling the grants are the agent's: %v", q.Grants)
	}
	if b := Bootstrapper("r", "a").WithGrants([]string{"*", "x"}); len(b.Grants) != 0 {
		t.Errorf("a role's bootstrap uses grants %v", b.Grants)
	}
}

// A definition reads as its scope's agent with no grants; a communal one
// keeps its registrant's feature permissions (ReadsAs) and no more.
func TestDefinitionReader(t *testing.T) {
	if p := DefinitionReader("a", "b"); p.Kind != KindAgent || p.AgentID != "a" || p.ReadsAs() != "" || len(p.Grants) != 0 || p.Admin() {
		t.Errorf("DefinitionReader(a, b) = %+v", p)
	}
	p := DefinitionReader(ScopeShared, "b")
	if p.AgentID != ScopeShared || p.ReadsAs() != "b" || p.ReadOnly() || CanRead(p, "b") {
		t.Errorf("DefinitionReader(_shared, b) = %+v", p)
	}
}
