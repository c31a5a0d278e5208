// Package redisync provides distributed locks and synchronizers on Redis, in
// the style of Redisson: a reentrant Mutex, a FairMutex granted in arrival
// order, an RWMutex, a Semaphore whose permits are leased, and a
// CountDownLatch. They work on a single node, Sentinel and Redis Cluster
// through go-redis's UniversalClient.
//
// # Owners live in the context
//
// Who holds a lock is carried in a context.Context, the Go analogue of
// Redisson's thread identity. Lock returns a context that carries the owner;
// pass it down and a nested Lock of the same name re-enters (the hold count
// goes up) instead of deadlocking. A context without an owner gets a fresh
// one, so goroutines that share a handle still exclude each other; WithOwner
// starts a new owner explicitly.
//
//	m := c.Mutex("orders:42")
//	ctx, err := m.Lock(ctx)
//	if err != nil {
//		return err
//	}
//	defer m.Unlock(ctx)
//
// The returned context is the hold's lifetime: it is cancelled with cause
// ErrLeaseLost (read it with context.Cause) when the lease can no longer be
// renewed or was taken away, so work done under the lock stops when the lock
// is lost; and it is cancelled plainly when the owner's last hold is released.
//
// # Leases and the watchdog
//
// Every hold has a lease in Redis, so a holder that crashes frees its locks
// within one lease. A Client's watchdog renews the leases of all its holds in
// pipelined batches (default lease 30s, renewed every 10s). If a renewal
// cannot reach Redis, the holder is told before the lease can have run out in
// Redis, counted from when the last successful renewal was sent; the lease is
// kept by Redis's clock, never by a client's. WithLease gives a fixed lease
// that the watchdog does not renew.
//
// # Waiting
//
// A waiter subscribes to the lock's channel through its Client's one shared
// subscription and is woken by the unlock message; every wait is also bounded
// by the holder's remaining lease, so a lost message costs a delay, never a
// hang. Waits end when their context ends, returning its error, and leave
// nothing behind in Redis.
//
// # Compatibility with Redisson
//
// A Mutex is stored as Redisson's RLock is: a hash at the lock's name whose
// field "<client uuid>:<n>" counts the holds, with a PEXPIRE lease, and the
// final unlock publishes "0" on "redisson_lock__channel:{name}". Go services
// and Java services using Redisson can guard the same resource.
//
// # What a lock cannot promise
//
// Redis replicates asynchronously. If the primary fails after granting a lock
// and before a replica received it, the promoted replica does not know the
// lock, and a second owner can take it while the first still works. The first
// holder is told (its renewals fail, its context is cancelled with
// ErrLeaseLost before its lease would have run out), but it may be told late
// for work already under way. Where that matters, make the protected resource
// check a fencing token, or run Redis with replica acknowledgement
// (min-replicas-to-write) so a write the replicas did not see is refused.
package redisync
