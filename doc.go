// Package redisync provides distributed locks and synchronizers on Redis, in
// the style of Redisson: a reentrant Mutex, a FairMutex granted in arrival
// order, an RWMutex, a Semaphore whose permits are leased, a
// CountDownLatch, a leader Election and a MultiLock (several locks taken
// as one). They work on a single node, Sentinel and Redis Cluster through
// go-redis's UniversalClient.
//
// # Holds live in the context
//
// Lock returns the hold's context, derived from the one it was given; use a
// separate variable for it, and pass it down:
//
//	m := c.Mutex("orders:42")
//	lctx, err := m.Lock(ctx)
//	if err != nil {
//		return err
//	}
//	defer m.Unlock(lctx)
//
// A nested Lock of the same lock with lctx (or a context derived from it)
// re-enters: the hold count goes up instead of deadlocking, as with
// Redisson's thread identity. Re-entry is per lock: lctx carries a hold of
// this lock only, so a Lock of any other lock with it gets a fresh owner.
// Goroutines handed lctx share this hold on purpose, and still exclude each
// other on every other lock; goroutines sharing a handle, or a context
// without a hold, exclude each other too. WithOwner, inside a hold, makes a
// caller contend for the lock instead of re-entering it.
//
// The hold's context tells the truth: while it is live, the owner holds the
// lock; once it is done, it does not. It is cancelled with cause
// ErrLeaseLost (read it with context.Cause) when the lease can no longer be
// renewed or was taken away, so work done under the lock stops when the
// lock is lost; plainly when the last hold is released; and when the
// context the lock was taken with ends (a request cancelled, a deadline):
// redisync then releases the lock in Redis and wakes a waiter, so a lock
// never outlives the context it was taken with. That context may be another
// hold's: a lock taken with lock A's hold context ends with A's hold (for
// hand-over-hand locking, take it with the outer context instead). To
// bound only the wait, use TryLockFor. Unlock works with a cancelled
// context. On error, every call that returns a hold's context (Lock,
// TryLock, TryLockFor, RLock, Acquire, Campaign...) returns a nil
// context, so a caller that drops the error holds nothing that looks like
// a hold.
//
// It tells the truth even to a process that was stopped past its lease (a
// long GC pause, SIGSTOP, a VM paused, a machine suspended) and runs again
// before any of its timers: every hold keeps a local deadline (when the
// last renewal was sent, plus the lease, less a margin), on a clock that
// counts the time the machine was suspended (the monotonic clock plus the
// wall clock's lead over it; a wall clock stepped forward tells a holder
// early, never late), and from the moment it has passed
// the hold's context, and the context of every re-entry and downgrade,
// reports the loss in Err (and context.Cause), Done (already closed) and
// Value, whether or not a timer has run yet. Contexts you derive from it
// (context.WithCancel, WithTimeout...) follow as soon as the cancellation
// reaches them: at the first look at the hold's context or when its timer
// runs, whichever comes first (after a suspend, timers are set again within
// a second of the resume); check lctx itself where it matters. Unlock then
// reports ErrLeaseLost too (see Mutex.Unlock).
//
// # Options
//
// Each constructor takes options of its own type (MutexOption,
// FairOption, RWOption, SemaphoreOption, MultiLockOption, ElectionOption),
// so an option that does not apply to a lock does not compile there:
// c.Mutex("x", WithPermits(3)) is a compile error. An option that applies
// to several locks is an option of each: WithLease and WithRenewedLease
// are LockOptions (every lock), WithFencing a FencingOption (all but the
// Semaphore), WithWaiterTimeout a WaiterOption (FairMutex, RWMutex),
// WithPermits a SemaphoreOption. Bad values (a lease that is not
// positive) are still refused at run time, with ErrInvalid from every
// method of the handle.
//
// # Leases and the watchdog
//
// Every hold has a lease in Redis, so a holder that crashes frees its locks
// within one lease. A Client's watchdog renews the leases of all its holds in
// pipelined batches (default lease 30s, renewed every 10s). If a renewal
// cannot reach Redis, the holder is told before the lease can have run out in
// Redis, counted from when the last successful renewal was sent; the lease is
// kept by Redis's clock, never by a client's. WithRenewedLease gives a lock
// a lease of its own, renewed by the same watchdog every third of it (one
// Client can keep 2s leases for some locks and 30s ones for others);
// WithLease gives a fixed lease that the watchdog does not renew.
//
// # Waiting
//
// A waiter subscribes to the lock's channel through its Client's shared
// subscription (one connection; on a Cluster in sharded mode, one per
// master, each channel on the master that owns its slot) and is woken by
// the unlock message; every wait is also bounded
// by the holder's remaining lease, so a lost message costs a delay, never a
// hang. Waits end when their context ends, returning an error that wraps
// the context's error and names the lock, even while Redis does not answer,
// and leave nothing behind in Redis. TryLockFor (TryRLockFor,
// TryAcquireFor) bounds the wait alone and returns ErrNotAcquired after it.
//
// Under contention, a Mutex's last Unlock hands the lock straight to a
// goroutine of the same Client that waits for it, mostly in memory (no
// round trip, the same Redis owner field) and with no unlock message: the
// lock is never free in between, and to other clients it is held by the
// same owner throughout (cohort handoff; see Mutex.Unlock). Waiters in
// other clients still get their turn: once one of them listens, a Client
// hands the lock over at most 16 times in a row (or for 5ms), then frees
// it for them and holds its own waiters back for a millisecond.
//
// # Keys
//
// A lock's name is its Redis key: keep lock names apart from your data (a
// prefix such as "lock:" will do). Locks that need more than one key keep
// the others in the name's Redis Cluster slot, named
// "{tag}:<purpose>:<name>", where tag is the name's hash tag, or the whole
// name when it has none; two different names never share a key.
//
// # Fencing tokens
//
// A holder stopped past its lease (a GC pause, SIGSTOP) resumes believing
// it holds the lock, and code already past its last check writes anyway:
// only the protected resource can refuse that write. WithFencing gives
// every first acquisition of a Mutex, FairMutex or RWMutex write lock a
// token strictly greater than every token given before for the name (and
// a MultiLock one per name, from the same counters), read without a round
// trip with Token; on every access a decision depends on, reads
// included, the resource refuses a token lower than the highest it has
// seen and records the token (fencing the writes alone loses updates:
// see WithFencing and ExampleWithFencing). The
// counter, "{tag}:fence:<name>", never expires and is never reset by an
// unlock; and as a token is never lower than the Redis server's clock in
// microseconds, tokens keep increasing even when Redis loses the counter
// with its data, as long as the server's clock has not gone back (see
// WithFencing for exactly what is promised).
//
// # Leader election
//
// An Election elects one leader among the candidates of any number of
// processes. Campaign waits until the caller leads and returns the
// leadership's context, a hold's context with a hold's promise: live
// exactly while it leads, cancelled before anyone else can lead; its Term
// is a fencing token greater than every earlier leader's. Resign, or the
// end of the campaign's context, hands the leadership on at once; a
// crashed leader is replaced within its lease. TryCampaignFor bounds
// only the wait, as TryLockFor does. Leader reads who leads in
// one round trip, and Observe reports every change, by pub/sub, in order
// of terms (see ExampleElection).
//
// # Several locks as one
//
// A MultiLock takes several Mutexes, all or none, as one hold (see
// ExampleMultiLock). Each name stays an ordinary Mutex (Redisson's RLock),
// so a Mutex of any of them excludes it. Names of one Cluster slot are
// taken by one script; across slots, in one global order, and what an
// attempt took is given back before it waits, so MultiLocks over
// overlapping names never deadlock.
//
// # Observing
//
// WithLogger has a Client log, as warnings, what goes wrong in the
// background (renewals that fail, leases lost, subscription connections
// lost); WithObserver reports acquisitions with their wait, failed ones
// with their wait and error, releases with their hold time, lost leases,
// watchdog rounds, subscription connections lost and restored and the
// pub/sub mode detected, for metrics and traces: the functions about a
// hold or a wait get the caller's context. The modules extra/redisyncotel
// and extra/redisyncprom plug it into OpenTelemetry and Prometheus.
// Client.ID is the UUID at the start of every Redis owner field of the
// client, and Holders (on Mutex, FairMutex, RWMutex and Semaphore) lists
// who holds a lock, as Redis has it: each hold's Client ID, count and
// lease left.
//
// # Compatibility with Redisson
//
// A Mutex is stored as Redisson's RLock is: a hash at the lock's name whose
// field "<client uuid>:<n>" counts the holds, with a PEXPIRE lease, and the
// final unlock publishes "0" on "redisson_lock__channel:{name}" (on
// "redisson_lock__channel:name" when the name contains "{", as Redisson
// does). Go services and Java services using Redisson can guard the same
// resource on every topology: on a Redis 7 Cluster both use sharded pub/sub
// (SPUBLISH, SSUBSCRIBE) by default, and WithPubSub matches a Redisson
// client configured otherwise (see PubSubMode). Both detect the mode once,
// when a client starts, but not alike: redisync asks every master, Redisson
// only the first node it connects to. In a Cluster whose nodes run
// different Redis versions (a rolling upgrade to 7) they can choose
// differently; choose the mode on both sides then (see the README, "Redis
// Cluster and Redisson").
//
// # FIPS 140-only mode
//
// redisync runs under GODEBUG=fips140=only, where Go refuses SHA-1: the
// SHA-1 digests that EVALSHA names scripts by are then never computed in the
// process but learned from Redis (SCRIPT LOAD) when first needed, and the
// scripts are sent whole (EVAL) until then. Elsewhere nothing changes. The
// embedded Redis of the command's demo (miniredis) cannot run in that mode.
//
// # What a lock cannot promise
//
// Redis replicates asynchronously. If the primary fails after granting a lock
// and before a replica received it, the promoted replica does not know the
// lock, and a second owner can take it while the first still works. The first
// holder is told (its renewals fail, its context is cancelled with
// ErrLeaseLost before its lease would have run out), but it may be told late
// for work already under way. Where that matters, make the protected resource
// check a fencing token, or use WithReplicaAck: an acquisition then counts
// only once k replicas acknowledged it (WAIT), and is undone with
// ErrNotReplicated otherwise; WAIT is not consensus, so a failover to a
// replica that did not acknowledge can still lose the lock (see
// WithReplicaAck for what it does and does not guarantee).
//
// Redis can also lose all its data (a restart without persistence): every
// lock is free at once, its holders are told at their next renewal, and an
// Unlock before that reports ErrLeaseLost. Fencing tokens keep increasing
// across such a loss (see WithFencing); a Semaphore's total is lost
// unless its handles state it (WithPermits), and a CountDownLatch's count
// is lost, which releases its waiters (see CountDownLatch). The README's
// "When Redis loses its data" puts it all in one table.
//
// # Reading the code
//
// The code is in layers; each calls only the layers below it, and a lower
// one calls back up only through a function it was handed. The layers
// below the root package are packages of their own under internal/, so
// the compiler keeps this map true (none of them imports the root):
//
//	primitives  reentrant.go (Mutex), fair.go, rwlock.go, semaphore.go
//	            (and semaphore_permits.go), latch.go, election.go,
//	            multilock.go (and multilock_state.go): what each promises,
//	            one file each; holders.go lists who holds them
//	options     client.go (the Client, New, Close), fencing.go,
//	            replica_ack.go, observe.go (events and logging), errors.go,
//	            pubsubmode.go (the PubSubMode option): what the
//	            primitives and the layers below them consult
//	holds       package internal/holds: the Machine, a Client's hold
//	            machinery; which hold a context carries, and a first
//	            acquisition across the attempts of a wait and its grant
//	            (acquire.go), re-entry (reenter.go), release,
//	            every way of giving back what a call took and the one
//	            rule that orders them (undo.go), waiting between
//	            attempts (wait.go); handed the layers below and the
//	            observer's callbacks (holds.Config)
//	errors      package internal/errs: the sentinel errors every layer
//	            returns, exported by errors.go
//	cohort      package internal/cohort: the local waiters a Mutex can
//	            be handed to, the pick of one, the runs of hand-overs and
//	            the yields that bound them; handed the closed error
//	lease       package internal/lease: a hold, its contexts, its local
//	            deadline on a clock that counts a suspend, its end; the
//	            Keeper (the table of live holds, the renewal loop, the
//	            ForceUnlock epochs); handed the transport and what to do
//	            when a hold ends (lease.Config)
//	notifier    package internal/notify: the pub/sub mode and its
//	            detection (mode.go), the one subscription, its
//	            connections and routes, wake-ups and the waiters on each
//	            channel; handed the client, the mode's resolution and the
//	            cohort's hold-back rule (notify.Config)
//	transport   package internal/transport: every script the Client
//	            sends, calls in and replies out (transport_glue.go names
//	            them here); a call alone on the full-duplex path, batches
//	            and WAIT in pipelines per node; NOSCRIPT, MOVED, ASK and
//	            TRYAGAIN handled there
//	scripts     lua/*.lua, embedded by package lua; internal/keys names
//	            the keys and channels
//
// holds imports cohort, lease, notify, transport and errs; cohort imports
// lease and transport, lease imports transport, transport imports lua,
// notify imports none of them (only go-redis and errs); nothing imports
// upward.
package redisync
