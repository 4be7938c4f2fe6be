package authority

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// Token prefixes tell a credential's kind at a glance (seed 001 §Identity).
const (
	RoomTokenPrefix  = "room_"
	ViewTokenPrefix  = "view_"
	AgentTokenPrefix = "as_"
)

// NewToken returns a fresh bearer token with prefix and 256 random bits, and
// the hash under which it is stored. A fast hash is right here: the token is
// random, so there is nothing to brute-force that a slow hash would protect.
func NewToken(prefix string) (token string, hash []byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("substrate: crypto/rand failed: " + err.Error())
	}
	token = prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return token, HashToken(token)
}

// HashToken is the hash a token is stored and looked up under.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewID returns a short random identifier for rooms and agents created
// without one.
func NewID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("substrate: crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// TokenKind is the kind of credential a token's prefix tells; ok is false
// for a string that is no sync token.
func TokenKind(token string) (Kind, bool) {
	switch {
	case strings.HasPrefix(token, RoomTokenPrefix):
		return KindRoom, true
	case strings.HasPrefix(token, ViewTokenPrefix):
		return KindView, true
	case strings.HasPrefix(token, AgentTokenPrefix):
		return KindAgent, true
	}
	return "", false
}
