// Package showonce seals a secret a page shows once (a rotated token, new
// recovery codes) for the one request after a form's redirect (POST, 303,
// GET): a reload of the page that shows it then sends no form again, which
// would make a new secret and kill the one just shown. The secret crosses
// the redirect in a short-lived cookie, never in a URL, sealed (AES-GCM)
// and bound to its person and purpose, so that a cookie copied to another
// browser or another page opens nothing. The pages set and clear the
// cookies themselves; this package only seals and opens their values.
//
// It is a leaf under oauth so that both oauth's pages and the lobby's
// (which already import oauth) use it without oauth importing the lobby.
package showonce

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"time"
)

// Sealer seals and opens cookie values with one key.
type Sealer struct{ aead cipher.AEAD }

// New makes a sealer of key (16, 24 or 32 bytes). Processes serving one
// site must share it (oauth's Server.PageKey("show_once", 32)), or a
// redirect answered by another process shows nothing. An empty key is a
// random one, good for one process only.
func New(key []byte) (*Sealer, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.New("showonce: the key must be 16, 24 or 32 bytes")
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Sealer{aead: aead}, nil
}

type envelope struct {
	V   json.RawMessage `json:"v"`
	Exp int64           `json:"exp"`
}

// Seal returns v (as JSON) sealed for bind, good for ttl, as a cookie
// value (base64url).
func (s *Sealer) Seal(v any, bind string, ttl time.Duration) (string, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	raw, err = json.Marshal(envelope{V: raw, Exp: time.Now().Add(ttl).Unix()})
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, raw, []byte(bind))), nil
}

// Open puts in v what value sealed for bind, and reports whether it could:
// a value sealed with another key or for another bind, expired, or
// tampered with opens nothing.
func (s *Sealer) Open(value, bind string, v any) bool {
	sealed, err := base64.RawURLEncoding.DecodeString(value)
	n := s.aead.NonceSize()
	if err != nil || len(sealed) < n {
		return false
	}
	raw, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(bind))
	if err != nil {
		return false
	}
	var e envelope
	if json.Unmarshal(raw, &e) != nil || time.Now().Unix() > e.Exp {
		return false
	}
	return json.Unmarshal(e.V, v) == nil
}
