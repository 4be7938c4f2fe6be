package tokenmemory

import (
	"testing"
	"time"
)

// A value is answered until it expires or is forgotten, per room and hash.
func TestMemory(t *testing.T) {
	var m Memory[string]
	h := make([]byte, 32)
	other := make([]byte, 32)
	other[0] = 1
	now := time.Now()
	m.Put("r", h, "v", now.Add(time.Hour))
	if v, ok := m.Get("r", h, now); !ok || v != "v" {
		t.Fatalf("Get = %q, %v", v, ok)
	}
	if _, ok := m.Get("s", h, now); ok {
		t.Error("another room's lookup answered")
	}
	if _, ok := m.Get("r", other, now); ok {
		t.Error("another token's lookup answered")
	}
	if _, ok := m.Get("r", h, now.Add(time.Hour)); ok {
		t.Error("answered at its expiry")
	}
	if _, ok := m.Get("r", h, now); ok {
		t.Error("an expired value is still remembered")
	}
	m.Put("r", h, "v", now.Add(-time.Second))
	if _, ok := m.Get("r", h, now.Add(-time.Minute)); ok {
		t.Error("a value put already expired was remembered")
	}
	m.Put("r", h, "v", now.Add(time.Hour))
	m.Forget("r", []byte("short"))
	m.Forget("r", h)
	if _, ok := m.Get("r", h, now); ok {
		t.Error("a forgotten value answered")
	}
}
