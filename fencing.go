package redisync

import (
	"context"
	"fmt"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
)

// WithFencing gives every first acquisition of the lock (not a re-entry) a
// fencing token: a number strictly greater than every token given before
// for the lock's name, read with Token without a round trip. Pass it to
// the resource the lock protects with every access a decision depends on,
// the reads of a read-modify-write as well as its writes, and have the
// resource refuse a token lower than the highest it has seen and record
// the token: a holder that was stopped past its lease (a GC pause,
// SIGSTOP, a VM migration) and goes on, from code already past its last
// check, is then refused once a later holder has been there. Fencing the
// writes alone loses updates: a holder whose hold ended between its read
// and its write writes before its successor's first write and is
// accepted, and the successor, which read the same value, overwrites it;
// with the read fenced too, the successor's read records its token first,
// and the stale write is refused (ExampleWithFencing).
//
// Tokens are exact in Go (int64). In a Lua script of your own (a
// Redis-side guard) a token is a Lua number, a double: exact up to 2^53
// (about 9e15; tokens are about 1.7e15), but tostring and concatenation
// print 14 significant digits only (1.7643000001235e+15). Compare tokens
// as numbers (tonumber(ARGV[1]) < tonumber(seen)), and store or print the
// argument as it came, or string.format('%d', t), never tostring(t).
//
// The counter is a key of the lock's Cluster slot,
// "{tag}:fence:<name>" (tag is the name's hash tag, or the name), kept
// without expiry: Unlock, ForceUnlock and an expired lease never reset it.
// The acquire script moves it on and returns the token, so it costs no
// extra round trip; a lock without WithFencing never touches it.
//
// A token is one more than the last one, and never lower than the Redis
// server's clock in microseconds (TIME, read by the script), so tokens are
// large numbers (about 1.7e15 in 2024), and they keep increasing across a
// loss of the counter: when Redis restarts without its data, fails over to
// a replica that did not have the counter yet, or the key is deleted, the
// next token is the server's clock, above every token given before as
// long as that clock reads later than the clock of the server that gave
// them, when it gave them. In the normal case tokens are strictly
// increasing whatever the clocks do. Not promised: across a loss of the
// counter, a server whose clock is behind (a promoted replica whose clock
// lags the old primary's by more than the time since the last token, a
// clock stepped back) may give a token that was given before, or a lower
// one; and tokens given faster than one per microsecond run ahead of the
// clock by that excess, which a loss within that lead could repeat.
//
// It applies to Mutex, FairMutex, the write holds of RWMutex (its read
// holds get no token) and MultiLock, whose first acquisition gives each
// name a token from that name's counter, the one a fenced Mutex of the
// name uses (see MultiLock.Token); it is a FencingOption, which a
// Semaphore does not take (it does not compile). A lock whose name cannot
// have companion keys (a "}" outside a hash tag) refuses it, with
// ErrInvalid from every method of the handle. A hold keeps the fencing it
// was taken with: a re-entry through a handle that differs is refused
// (ErrInvalid). Tokens order the fenced holders of redisync only: a holder
// without WithFencing, or a Redisson client on the same Mutex, takes the
// lock without a token, so every writer of a fenced resource must hold the
// lock with WithFencing.
func WithFencing() FencingOption {
	return fencingOpt(func(lc *lockConfig) error {
		lc.fence = true
		return nil
	})
}

// fenceKey is the key of the fencing counter of the lock name.
func fenceKey(name string) string { return keys.Companion(name, "fence") }

// fencingSetup refuses WithFencing on a name without companion keys;
// err is lockSetup's.
func fencingSetup(name string, lc lockConfig, err error) error {
	if err == nil && lc.fence && !keys.Taggable(name) {
		return fmt.Errorf("%w: WithFencing: lock name %q has a \"}\" outside a hash tag, so it cannot have a fencing counter", ErrInvalid, name)
	}
	return err
}

// tokenOf returns the token of the hold of ref that ctx carries (see
// Mutex.Token).
func tokenOf(ctx context.Context, ref lease.Ref) (int64, bool) {
	if ctx == nil {
		return 0, false
	}
	h := holds.Carried(ctx, ref)
	if h == nil || h.Token == 0 {
		return 0, false
	}
	return h.Token, true
}

// Token returns the fencing token of the hold ctx carries (see
// WithFencing), without a round trip: ok is false when ctx carries no
// hold of this lock taken with WithFencing (outside a WithOwner scope of
// ctx's). Re-entries share their hold's token.
//
// The token stays ctx's after the hold ends (Unlock, a lost lease): it is
// the hold's for good, and a resource that checks tokens refuses it once a
// later holder has written, which is the point. Whether the hold is still
// live is ctx.Err()'s to say, not Token's. Tokens are at least the Redis
// server's clock in microseconds (see WithFencing). Pass the token with
// every access a decision depends on, reads included, and have the
// resource check and record it (see WithFencing: fencing only the writes
// of a read-modify-write loses updates); in a Lua script it is a double,
// to be compared as a number (see WithFencing).
func (m *Mutex) Token(ctx context.Context) (int64, bool) {
	if m == nil {
		return 0, false
	}
	return tokenOf(ctx, m.spec.Ref)
}

// Token returns the fencing token of the hold ctx carries, as
// Mutex.Token does.
func (f *FairMutex) Token(ctx context.Context) (int64, bool) {
	if f == nil {
		return 0, false
	}
	return tokenOf(ctx, f.spec.Ref)
}

// Token returns the fencing token of the write hold ctx carries, as
// Mutex.Token does. Read holds have no token: for a context that carries
// only a read hold, ok is false. A downgrade's read context also carries
// the write hold it was taken through, and reports that hold's token.
func (r *RWMutex) Token(ctx context.Context) (int64, bool) {
	if r == nil {
		return 0, false
	}
	return tokenOf(ctx, r.wspec.Ref)
}

// Token returns the fencing token of name in the hold ctx carries (see
// WithFencing), without a round trip: ok is false when ctx carries no hold
// of this MultiLock taken with WithFencing, or name is not one of its
// names. Each name's token comes from the counter of a fenced Mutex of
// that name ("{tag}:fence:<name>"), by the same rule, so a resource
// guarded per name refuses a stale holder whether it held the name
// through a Mutex or a MultiLock: pass each name's token with every access
// (reads included, see WithFencing) to what that name guards. Re-entries share their hold's tokens; they stay ctx's
// after the hold ends, as Mutex.Token's do.
func (m *MultiLock) Token(ctx context.Context, name string) (int64, bool) {
	if m == nil || ctx == nil {
		return 0, false
	}
	h := holds.Carried(ctx, m.spec.Ref)
	if h == nil {
		return 0, false
	}
	t, ok := h.Tokens[name]
	return t, ok && t != 0
}
