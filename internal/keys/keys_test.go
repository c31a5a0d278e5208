package keys

import (
	"strings"
	"testing"
)

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

var taggable = []string{"orders:42", "a{b}c", "{user1}:lock", "x{", "}{z}", "plain", "{", "a{{b}c", "x", "{x}", "{x}:", "{a{b}:c", "a:b", "a", "queue:a"}

func TestCompanionSameSlot(t *testing.T) {
	for _, name := range taggable {
		if !Taggable(name) {
			t.Errorf("Taggable(%q) = false", name)
			continue
		}
		k := Companion(name, "queue")
		if slot(k) != slot(name) {
			t.Errorf("Companion(%q) = %q: slot %d, want %d", name, k, slot(k), slot(name))
		}
	}
}

// Two different names, or two different tokens, never give the same key:
// "x" and "{x}" in particular (review scenario S1).
func TestCompanionsNeverCollide(t *testing.T) {
	tokens := []string{"rw-readers", "rw-writers", "fair-queue", "fair", "sem-holders", "fence", "queue", "q"}
	seen := map[string][2]string{}
	for _, name := range taggable {
		if !Taggable(name) {
			continue
		}
		for _, tok := range tokens {
			k := Companion(name, tok)
			if prev, ok := seen[k]; ok {
				t.Errorf("Companion(%q, %q) = Companion(%q, %q) = %q", name, tok, prev[0], prev[1], k)
			}
			seen[k] = [2]string{name, tok}
			if k == name {
				t.Errorf("Companion(%q, %q) is the name itself", name, tok)
			}
		}
	}
	if Companion("x", "rw-readers") == Companion("{x}", "rw-readers") {
		t.Fatal("x and {x} share a companion key")
	}
}

func FuzzCompanionInjective(f *testing.F) {
	f.Add("x", "{x}", "a", "a")
	f.Add("a:b", "a", "q", "b:q")
	f.Fuzz(func(t *testing.T, n1, n2, t1, t2 string) {
		if !Taggable(n1) || !Taggable(n2) || strings.Contains(t1, ":") || strings.Contains(t2, ":") {
			return
		}
		if (n1 != n2 || t1 != t2) && Companion(n1, t1) == Companion(n2, t2) {
			t.Fatalf("Companion(%q,%q) == Companion(%q,%q)", n1, t1, n2, t2)
		}
		if slot(Companion(n1, t1)) != slot(n1) {
			t.Fatalf("Companion(%q) leaves the slot", n1)
		}
	})
}

func TestUntaggable(t *testing.T) {
	for _, name := range []string{"x{}y", "a}b", "}", ""} {
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

func TestIsCompanion(t *testing.T) {
	for _, name := range taggable {
		for _, tok := range tokens {
			if c := Companion(name, tok); !IsCompanion(c) {
				t.Errorf("IsCompanion(%q) = false", c)
			}
		}
		if IsCompanion(name) {
			t.Errorf("IsCompanion(%q) = true", name)
		}
	}
	for _, name := range []string{"{x}:rw-readers", "{x}:rw-readers:y", "{x}:nope:x", "x:rw-readers:x"} {
		if IsCompanion(name) {
			t.Errorf("IsCompanion(%q) = true", name)
		}
	}
}
