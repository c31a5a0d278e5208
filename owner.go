package redisync

import (
	"context"

	"github.com/redisync-go/redisync/internal/holds"
)

// A context carries holds, not an owner. Each first acquisition of a lock
// gets a fresh owner (the Redis field "<client uuid>:<n>"); the hold's
// context carries that hold under a key naming the lock, so a nested Lock of
// the same lock with it re-enters, while any other lock sees no hold and
// gives the caller a fresh owner of its own.

// WithOwner returns a copy of ctx in which the holds ctx carries are not
// re-entered: a Lock with it (or with a context derived from it) takes a
// new owner and contends for the lock, even one that ctx holds. Use it
// inside a hold to wait for the lock as somebody else would, rather than
// re-entering it.
//
// Lock already gives a fresh owner to a context that carries no hold of
// the lock, so WithOwner is needed only inside a hold.
func WithOwner(ctx context.Context) context.Context { return holds.NewScope(ctx) }
