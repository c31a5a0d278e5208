// Package redisync provides distributed locks and synchronizers on Redis, in
// the style of Redisson: a reentrant Mutex, a FairMutex granted in arrival
// order, an RWMutex, a Semaphore whose permits are leased, a
// CountDownLatch, a leader Election and a MultiLock (several locks taken as
// one). They work on a single node, Sentinel and Redis Cluster through
// go-redis, and the Mutex shares Redisson's RLock format, so Go and Java
// services can guard the same resource.
//
// # The shape of use
//
// One Client per process, made from a go-redis client, serves every lock:
// its watchdog renews the leases of all holds in batches, and one shared
// subscription wakes the waiters. A lock is a cheap handle; Lock returns
// the hold's context:
//
//	c, err := redisync.New(rdb) // a *redis.Client or *redis.ClusterClient
//	...
//	m := c.Mutex("lock:orders:42")
//	lctx, err := m.Lock(ctx) // waits until acquired or ctx ends
//	if err != nil {
//		return err
//	}
//	defer func() { err = errors.Join(err, m.Unlock(lctx)) }()
//	return ship(lctx) // lctx ends, cause ErrLeaseLost, if the lock is lost
//
// Unlock's error answers "was the lock mine until now?": an error wrapping
// ErrLeaseLost says the hold was lost before it, and what was written under
// it may have raced another holder.
//
// Do is the same in one call: it runs a function under the lock with the
// hold's context and returns its error joined with Unlock's, which wraps
// ErrLeaseLost when the lock was lost before the function's end:
//
//	err := m.Do(ctx, func(lctx context.Context) error { return work(lctx) })
//
// # Ownership lives in the context
//
// A nested Lock of the same lock with lctx (or a context derived from it)
// re-enters; any other context gets a fresh owner, so goroutines sharing a
// handle exclude each other, and WithOwner makes a new owner explicitly.
// The hold's context tells the truth: while it is live the owner holds the
// lock; it is cancelled with cause ErrLeaseLost (read it with
// context.Cause) before the lease can have run out in Redis, even in a
// process stopped past its lease, and plainly at the last Unlock. A hold
// ends with the context it was taken with, and redisync then releases it:
// give Lock the context the hold should live as long as, and bound only the
// wait with TryLockFor. A process stopped past both its lease and that
// context's end is told the end that came first in time, whichever timer
// runs first on resuming: ErrLeaseLost unless that context's deadline came
// before the lease's (a cancellation counts from when the process sees
// it). Every wait ends when its context ends and leaves
// nothing behind; on error, every call that returns a hold's context
// returns a nil one.
//
// # The primitives
//
// Each constructor takes options of its own type (MutexOption,
// FairOption, RWOption, SemaphoreOption, MultiLockOption, ElectionOption),
// so an option that does not apply does not compile. WithLease,
// WithRenewedLease and the Client's WithWatchdogTimeout set leases;
// WithFencing gives each new holder a token greater than every earlier one
// (Token reads it), for the protected resource to refuse a stale holder
// (it checks and records the token on every access a decision depends on,
// reads included: see ExampleWithFencing);
// WithReplicaAck makes an acquisition count only once replicas have it.
// An Election's Campaign returns a context live exactly while leading, and
// its Term is a fencing token. Holders says who holds a lock, and
// WithLogger and WithObserver report what happens, for logs, metrics and
// traces (the modules extra/redisyncotel and extra/redisyncprom).
//
// # What a lock cannot promise
//
// Redis replicates asynchronously: a failover can lose a lock, and Redis
// can lose its data. Holders are then told (ErrLeaseLost) at their next
// renewal, maybe late for work under way; where two holders must never
// act at once, the resource has to check fencing tokens. A failover can
// also lose the last releases; the releasing Client sends them again
// (owner-checked) once it sees another primary, so the locks come back in
// well under a second rather than at their leases' end.
//
// # More
//
// The README (https://github.com/redisync-go/redisync) compares redisync
// with redsync, redislock, rueidislock, etcd and Redisson and says which
// primitive fits which need; docs/ in the repository holds ownership,
// guarantees, fencing, Redis Cluster and Redisson interop, the tests,
// performance and migration guides; ARCHITECTURE.md maps the code. Every
// primitive has a runnable example.
package redisync
