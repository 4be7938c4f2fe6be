// Package delta is what changed in a room, as the rules say it: the
// record a mutation leaves of the entries it changed (its _audit entry's
// delta, seed 000 §7.7), and what a reader who read the room up to a seq
// has not seen of it since (a wait's wake-up, a context read with since).
// The core reads the room and the audit log and hands this package its
// snapshot (Room) and plain data; nothing here reads a row.
package delta

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/syncsubstrate/sync/substrate/defs"
)

// ValueCap is the most a record (the core's Delta) stores of one value
// (its before or its after, and an action's result), as JSON. A larger
// value is recorded as {"_truncated": true, "bytes": n, "sha256":
// "<hex>"}: its size and the SHA-256 of its canonical JSON (object keys
// sorted), enough to tell whether two recorded values are the same.
const ValueCap = 16 << 10

// Redacted is what a record keeps of a value that is operational memory
// (what: "loom memory"): that it changed and its size, never what it
// holds.
func Redacted(v json.RawMessage, what string) json.RawMessage {
	if len(v) == 0 {
		return v
	}
	out, _ := json.Marshal(map[string]any{"_private": what, "bytes": len(v)})
	return out
}

// Capped is v, or its truncation marker when v is over ValueCap.
func Capped(v json.RawMessage) json.RawMessage {
	if len(v) <= ValueCap {
		return v
	}
	canon := v
	var x any
	if defs.DecodeNumber(v, &x) == nil {
		if b, err := json.Marshal(x); err == nil {
			canon = b
		}
	}
	sum := sha256.Sum256(canon)
	out, _ := json.Marshal(map[string]any{"_truncated": true, "bytes": len(canon), "sha256": hex.EncodeToString(sum[:])})
	return out
}

// CappedAny is an action's result as the audit stores it.
func CappedAny(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return Capped(raw)
}
