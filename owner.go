package redisync

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
)

// owner is who holds a lock: the Go analogue of Redisson's thread. It travels
// in a context.Context so nested calls re-enter instead of deadlocking.
type owner struct {
	id string // process-unique; the Redis field is "<client uuid>:<id>"

	// mu serialises this owner's lock-changing scripts, so the hold counts
	// the scripts set stay in step with the counts kept in the process even
	// when goroutines share an owner on purpose (WithOwner).
	mu sync.Mutex
}

type ownerKey struct{}

var ownerSeq atomic.Uint64

func newOwner() *owner {
	return &owner{id: strconv.FormatUint(ownerSeq.Add(1), 10)}
}

// WithOwner returns a copy of ctx that carries a new owner. Locks taken with
// it, or with a context derived from it, belong to that owner: pass it to
// helper goroutines that should share a hold on purpose.
//
// Lock gives a context without an owner a fresh one, so WithOwner is needed
// only to share one owner or to start a new one inside a hold.
func WithOwner(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownerKey{}, newOwner())
}

// ownerOf returns ctx's owner, or nil.
func ownerOf(ctx context.Context) *owner {
	o, _ := ctx.Value(ownerKey{}).(*owner)
	return o
}

// ensureOwner returns ctx and its owner, giving ctx a fresh owner if it has none.
func ensureOwner(ctx context.Context) (context.Context, *owner) {
	if o := ownerOf(ctx); o != nil {
		return ctx, o
	}
	o := newOwner()
	return context.WithValue(ctx, ownerKey{}, o), o
}
