package showonce_test

import (
	"testing"
	"time"

	"github.com/syncsubstrate/sync/oauth/showonce"
)

// A sealed value opens only for its bind, with its key, before its expiry,
// untampered.
func TestSealOpensOnlyForItsBindKeyAndTime(t *testing.T) {
	key := make([]byte, 32)
	s, err := showonce.New(key)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.Seal([]string{"secret"}, "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if !s.Open(sealed, "alice", &got) || len(got) != 1 || got[0] != "secret" {
		t.Fatalf("its own bind: %v", got)
	}
	if s.Open(sealed, "bob", &got) {
		t.Fatal("opened for another bind")
	}
	other, _ := showonce.New(nil)
	if other.Open(sealed, "alice", &got) {
		t.Fatal("opened with another key")
	}
	flipped := []byte(sealed)
	flipped[len(flipped)/2] ^= 1
	if s.Open(string(flipped), "alice", &got) {
		t.Fatal("opened tampered")
	}
	old, _ := s.Seal([]string{"secret"}, "alice", -2*time.Second)
	if s.Open(old, "alice", &got) {
		t.Fatal("opened expired")
	}
	if _, err := showonce.New([]byte("short")); err == nil {
		t.Fatal("a 5-byte key accepted")
	}
}
