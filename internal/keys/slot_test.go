package keys

import "testing"

// The slots Redis Cluster gives these keys (CLUSTER KEYSLOT).
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"":              0,
		"foo":           12182,
		"bar":           5061,
		"{user1000}.a":  3443,
		"{user1000}.b":  3443,
		"foo{}{bar}":    8363,
		"foo{{bar}}zap": 4015,
		"foo{bar}{zap}": 5061,
		"123456789":     12739,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
		if got := slot(key); got != Slot(key) {
			t.Errorf("slot(%q) = %d, Slot = %d", key, got, Slot(key))
		}
	}
}
