package redisync

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/redisync-go/redisync/internal/lease"
)

// A context carries holds, not an owner. Each first acquisition of a lock
// gets a fresh owner (the Redis field "<client uuid>:<n>"); the hold's
// context carries that hold under a key naming the lock, so a nested Lock of
// the same lock with it re-enters, while any other lock sees no hold and
// gives the caller a fresh owner of its own.

// scope is started by WithOwner: holds taken outside it are not re-entered
// inside it.
type scope struct{ _ byte }

type scopeKey struct{}

// WithOwner returns a copy of ctx in which the holds ctx carries are not
// re-entered: a Lock with it (or with a context derived from it) takes a
// new owner and contends for the lock, even one that ctx holds. Use it
// inside a hold to wait for the lock as somebody else would, rather than
// re-entering it.
//
// Lock already gives a fresh owner to a context that carries no hold of
// the lock, so WithOwner is needed only inside a hold.
func WithOwner(ctx context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, new(scope))
}

func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// carried returns the hold of ref that ctx carries, live or ended, or nil;
// a hold taken outside ctx's WithOwner scope is not ctx's.
func carried(ctx context.Context, ref lease.Ref) *lease.Hold {
	h, _ := ctx.Value(ref).(*lease.Hold)
	if h == nil || h.Scope != scopeOf(ctx) {
		return nil
	}
	return h
}

// held returns the live hold of ref that ctx carries, or nil.
func held(ctx context.Context, ref lease.Ref) *lease.Hold {
	if h := carried(ctx, ref); h != nil && h.Live() {
		return h
	}
	return nil
}

var ownerSeq atomic.Uint64

// newField returns a fresh owner's Redis field.
func (c *Client) newField() string {
	return c.id + ":" + strconv.FormatUint(ownerSeq.Add(1), 10)
}
