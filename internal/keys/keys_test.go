package keys

import "testing"

// slot mirrors Redis Cluster's key hashing (CRC16 of the hash tag or key).
func slot(key string) int {
	if HasTag(key) {
		i := indexByte(key, '{')
		j := indexByte(key[i+1:], '}')
		key = key[i+1 : i+1+j]
	}
	return int(crc16(key) % 16384)
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return -1
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestTaggedSameSlot(t *testing.T) {
	for _, name := range []string{"orders:42", "a{b}c", "{user1}:lock", "x{", "}{z}", "plain", "{", "a{{b}c"} {
		if !Taggable(name) {
			t.Errorf("Taggable(%q) = false", name)
		}
		k := Tagged(name, "queue")
		if slot(k) != slot(name) {
			t.Errorf("Tagged(%q) = %q: slot %d, want %d", name, k, slot(k), slot(name))
		}
	}
}

func TestUntaggable(t *testing.T) {
	for _, name := range []string{"x{}y", "a}b", "}"} {
		if Taggable(name) {
			t.Errorf("Taggable(%q) = true", name)
		}
	}
}

func TestCRC16MatchesRedis(t *testing.T) {
	// Known value from the Redis Cluster specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16 = %#x", got)
	}
}
