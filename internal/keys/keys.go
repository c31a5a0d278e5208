// Package keys names the Redis keys a lock uses besides its own, so that all
// of them land in the lock's Redis Cluster slot and one script can touch them.
package keys

import "strings"

// Tagged returns a key for name's companion suffix that hashes to the same
// Cluster slot as name itself. A name with a hash tag ("{...}") keeps it as
// its prefix; any other name becomes the tag.
func Tagged(name, suffix string) string {
	if HasTag(name) {
		return name + ":" + suffix
	}
	return "{" + name + "}:" + suffix
}

// Taggable reports whether Tagged can keep name's slot: every name can but one
// that contains "}" without forming a hash tag (such as "a{}b"), since a tag
// cannot contain "}". Locks that need companion keys refuse such names.
func Taggable(name string) bool {
	return HasTag(name) || !strings.Contains(name, "}")
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
