// Package keys names the Redis keys and channels a lock uses besides its own
// key, so that all of them land in the lock's Redis Cluster slot, one script
// can touch them together, and two different names never share one.
package keys

import "strings"

// Companion returns the key (or channel) that the lock name uses for one
// purpose, token: "{" + Tag(name) + "}:" + token + ":" + name.
//
// It hashes to name's Cluster slot: its hash tag is name's own tag, or the
// whole name for a name without one. Different names never share a
// companion: the tag ends at the first "}", and the full name follows the
// token, so (name, token) can be read back from the key. token must not
// contain ":" (so that no token is a prefix of another one's "token:").
// Only names for which Taggable is true have companions.
func Companion(name, token string) string {
	return "{" + Tag(name) + "}:" + token + ":" + name
}

// The purposes of the companion keys redisync writes.
var tokens = []string{
	"fair-queue", "fair-timeouts",
	"rw-readers", "rw-writers", "rw-waiting", "rw-admitted",
	"sem-holders", "sem-expiry",
	"fence",
	"elect-term",
	"latch-round",
}

// IsCompanion reports whether name is the companion key of some lock name
// (Companion(n, t) for one of redisync's purposes t): such a name must not
// be a lock's own key, or two locks would share a key.
func IsCompanion(name string) bool {
	j := strings.IndexByte(name, '}')
	if !strings.HasPrefix(name, "{") || j < 0 {
		return false
	}
	rest := name[j+1:] // a tag ends at its first "}"
	for _, t := range tokens {
		if n, ok := strings.CutPrefix(rest, ":"+t+":"); ok && Taggable(n) && Companion(n, t) == name {
			return true
		}
	}
	return false
}

// Tag returns what Redis Cluster hashes for name: the content of its hash
// tag when it has one, the whole name otherwise.
func Tag(name string) string {
	i := strings.IndexByte(name, '{')
	if i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			return name[i+1 : i+1+j]
		}
	}
	return name
}

// Taggable reports whether Companion can keep name's slot: every non-empty
// name can but one that contains "}" without forming a hash tag (such as
// "a{}b"), since a tag cannot contain "}". Locks that need companion keys
// refuse such names.
func Taggable(name string) bool {
	return name != "" && (HasTag(name) || !strings.Contains(name, "}"))
}

// HasTag reports whether Redis Cluster hashes name by a hash tag: a "{"
// followed, later, by a "}" with at least one byte between them.
func HasTag(name string) bool {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(name[i+1:], '}')
	return j > 0
}
