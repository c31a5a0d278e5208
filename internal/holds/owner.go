package holds

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

// scope is started by NewScope: holds taken outside it are not re-entered
// inside it.
type scope struct{ _ byte }

type scopeKey struct{}

// NewScope returns a copy of ctx that starts a new owner scope (the root
// package's WithOwner): the holds ctx carries are not re-entered with it.
func NewScope(ctx context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, new(scope))
}

// scopeOf returns the owner scope of ctx (nil outside any NewScope).
func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// Carried returns the hold of ref that ctx carries, live or ended, or nil;
// a hold taken outside ctx's WithOwner scope is not ctx's.
func Carried(ctx context.Context, ref lease.Ref) *lease.Hold {
	h, _ := ctx.Value(ref).(*lease.Hold)
	if h == nil || h.Scope != scopeOf(ctx) {
		return nil
	}
	return h
}

// Held returns the live hold of ref that ctx carries, or nil.
func Held(ctx context.Context, ref lease.Ref) *lease.Hold {
	if h := Carried(ctx, ref); h != nil && h.Live() {
		return h
	}
	return nil
}

var ownerSeq atomic.Uint64

// NewField returns a fresh owner's Redis field.
func (m *Machine) NewField() string {
	return m.id + ":" + strconv.FormatUint(ownerSeq.Add(1), 10)
}

// Entry returns the live hold of ref that a Lock with ctx re-enters, or nil
// for a first acquisition. A context that carries a hold of ref that was
// lost (or ended with its context, or by Close) is refused: acquiring again
// would silently make a new hold of what its caller believes it still has.
func Entry(ctx context.Context, ref lease.Ref) (*lease.Hold, error) {
	h := Carried(ctx, ref)
	if h == nil {
		return nil, nil
	}
	switch h.Reason() {
	case lease.NotEnded:
		return h, nil
	case lease.EndUnlocked:
		return nil, nil
	default:
		return nil, EndedError(h)
	}
}
