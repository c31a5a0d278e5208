package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/lua"
)

func TestMutexLockUnlockLeavesNothing(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c := e.client(t)
		m := c.Mutex("orders:42")
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		locked, err := m.IsLocked(ctx)
		require.NoError(t, err)
		assert.True(t, locked)
		ttl, err := m.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, 25*time.Second)
		assert.LessOrEqual(t, ttl, DefaultWatchdogTimeout)

		require.NoError(t, m.Unlock(ctx))
		assert.ErrorIs(t, context.Cause(ctx), context.Canceled, "the hold's context ends with the hold")
		assert.Empty(t, e.keys(t))
		ttl, err = m.TTL(context.Background())
		require.NoError(t, err)
		assert.Zero(t, ttl)
	})
}

func TestMutexReentersThroughContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		m := e.client(t).Mutex("nested")
		type key struct{}
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		inner := context.WithValue(ctx, key{}, "kept")
		got, err := m.Lock(inner)
		require.NoError(t, err)
		assert.Equal(t, inner, got, "a re-entry returns the context it was given")
		n, err := m.HoldCount(ctx)
		require.NoError(t, err)
		assert.Equal(t, 2, n)

		require.NoError(t, m.Unlock(got))
		assert.NoError(t, ctx.Err(), "one hold remains")
		n, _ = m.HoldCount(ctx)
		assert.Equal(t, 1, n)
		locked, _ := m.IsLocked(ctx)
		assert.True(t, locked)

		require.NoError(t, m.Unlock(ctx))
		assert.Error(t, ctx.Err())
		assert.ErrorIs(t, m.Unlock(ctx), ErrNotHeld)
		assert.Empty(t, e.keys(t))
	})
}

func TestMutexSharedHandleExcludesGoroutines(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		m := e.client(t).Mutex("shared")
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			_, err := m.TryLock(context.Background())
			errc <- err
		}()
		assert.ErrorIs(t, <-errc, ErrNotAcquired)

		// A new owner inside the hold does not re-enter either.
		_, err = m.TryLock(WithOwner(ctx))
		assert.ErrorIs(t, err, ErrNotAcquired)
		require.NoError(t, m.Unlock(ctx))
	})
}

func TestMutexForeignUnlockRefused(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		m := e.client(t).Mutex("mine")
		other := e.client(t).Mutex("mine")
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		before, _ := e.rdb(t).HGetAll(context.Background(), "mine").Result()

		assert.ErrorIs(t, m.Unlock(context.Background()), ErrNotHeld, "no owner in the context")
		assert.ErrorIs(t, m.Unlock(WithOwner(context.Background())), ErrNotHeld, "another owner, same client")
		assert.ErrorIs(t, other.Unlock(ctx), ErrNotHeld, "same owner value, another client")

		after, _ := e.rdb(t).HGetAll(context.Background(), "mine").Result()
		assert.Equal(t, before, after)
		assert.NoError(t, ctx.Err())
		require.NoError(t, m.Unlock(ctx))
	})
}

func TestMutexWaitEndsWithContextAndLeavesNothing(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c := e.client(t)
		holder, err := e.client(t).Mutex("busy").Lock(context.Background())
		require.NoError(t, err)
		m := c.Mutex("busy")

		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		got, err := m.Lock(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, got, "on error Lock returns a nil context")
		assert.Less(t, time.Since(start), 2*time.Second)

		cctx, ccancel := context.WithCancel(context.Background())
		go func() { time.Sleep(50 * time.Millisecond); ccancel() }()
		_, err = m.Lock(cctx)
		assert.ErrorIs(t, err, context.Canceled)

		_, err = m.Lock(cctx) // already ended: no attempt at all
		assert.ErrorIs(t, err, context.Canceled)

		assert.Equal(t, []string{"busy"}, e.keys(t))
		if e.real() {
			chans, err := e.rdb(t).PubSubChannels(context.Background(), "*").Result()
			require.NoError(t, err)
			assert.Empty(t, chans, "the waiters unsubscribed")
		}
		assert.Empty(t, c.ps.Channels())
		_ = holder
	})
}

func TestMutexBadInput(t *testing.T) {
	_, err := New(nil)
	assert.ErrorIs(t, err, ErrInvalid)
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		rdb := e.rdb(t)
		for _, d := range []time.Duration{0, -time.Second} {
			_, err := New(rdb, WithWatchdogTimeout(d))
			assert.ErrorIs(t, err, ErrInvalid)
		}
		c := e.client(t)
		ctx := context.Background()
		for _, m := range []*Mutex{c.Mutex(""), c.Mutex("x", WithLease(0)), c.Mutex("x", WithLease(-time.Second)), c.Mutex("x", nil), (*Client)(nil).Mutex("x")} {
			_, err := m.Lock(ctx)
			assert.ErrorIs(t, err, ErrInvalid)
			_, err = m.TryLock(ctx)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.ErrorIs(t, m.Unlock(ctx), ErrInvalid)
			_, err = m.IsLocked(ctx)
			assert.ErrorIs(t, err, ErrInvalid)
			_, err = m.ForceUnlock(ctx)
			assert.ErrorIs(t, err, ErrInvalid)
		}
		assert.Empty(t, e.keys(t))

		// Someone else's data under the lock's name is reported, never overwritten.
		require.NoError(t, rdb.Set(ctx, "taken", "precious", 0).Err())
		m := c.Mutex("taken")
		_, err := m.Lock(ctx)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		_, err = m.TryLock(ctx)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		_, err = m.ForceUnlock(ctx)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		_, err = m.IsLocked(ctx)
		assert.Contains(t, err.Error(), "WRONGTYPE")
		assert.Error(t, m.Unlock(WithOwner(ctx)))
		v, err := rdb.Get(ctx, "taken").Result()
		require.NoError(t, err)
		assert.Equal(t, "precious", v)
	})
}

// Failure mode 1: SETNX then EXPIRE is not atomic. redisync takes the lock and
// sets its lease in one script, so a lock is never visible without a lease,
// and a holder that dies right after acquiring leaves a lock that expires.
func TestFailureModeAcquireIsAtomicWithLease(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var cmds []string
		rdb := e.rdb(t)
		late := hookLater(rdb)
		c := newClient(t, rdb, WithWatchdogTimeout(time.Second))
		_, err := c.Mutex("warm-up").Lock(context.Background()) // connects, loads the script
		require.NoError(t, err)
		late.add(cmdRecorder{&cmds})
		_, err = c.Mutex("atomic").Lock(recording(context.Background()))
		require.NoError(t, err)
		require.Len(t, cmds, 1, "one command takes the lock and sets its lease: %v", cmds)
		pttl, err := e.rdb(t).PTTL(context.Background(), "atomic").Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, time.Duration(0))
	})
}

// Failure mode 2: deleting a lock you no longer own.
func TestFailureModeExpiredHolderCannotUnlockNextHolder(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		a := e.client(t).Mutex("expiring", WithLease(100*time.Millisecond))
		b := e.client(t).Mutex("expiring")
		actx, err := a.Lock(context.Background())
		require.NoError(t, err)
		if e.mr != nil {
			e.mr.FastForward(150 * time.Millisecond)
		}
		bctx, err := b.Lock(context.Background())
		require.NoError(t, err)
		// On simulated time a's own deadline has not passed: its last
		// Unlock, written once, finds its field gone and tells it lost
		// all the same.
		err = a.Unlock(actx)
		assert.ErrorIs(t, err, ErrNotHeld)
		assert.ErrorIs(t, err, ErrLeaseLost)
		locked, err := b.IsLocked(bctx)
		require.NoError(t, err)
		assert.True(t, locked, "the old holder's unlock must not free the new holder's lock")
		n, _ := b.HoldCount(bctx)
		assert.Equal(t, 1, n)
		require.NoError(t, b.Unlock(bctx))
	})
}

// Failure mode 4: work that outlives the lease. The watchdog keeps the lease;
// when it cannot, the holder is told before anyone else can hold the lock.
func TestFailureModeLongWorkKeptByWatchdog(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		// A lease of 900ms, renewed every 300ms: a renewal starved for a
		// whole lease by a busy machine (seen at 300ms under -race with two
		// busy loops beside the suite) is a lapse, not what this checks.
		const lease = 900 * time.Millisecond
		m := e.client(t, WithWatchdogTimeout(lease)).Mutex("long")
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		deadline := time.Now().Add(4 * lease)
		for time.Now().Before(deadline) {
			if e.mr != nil {
				e.mr.FastForward(50 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond)
			ttl, err := m.TTL(context.Background())
			require.NoError(t, err)
			require.Greater(t, ttl, time.Duration(0), "lease kept alive")
		}
		require.NoError(t, ctx.Err())
		require.NoError(t, m.Unlock(ctx))
	})
}

// Failure mode 4, continued: a partition (a connection that silently drops
// traffic) stops renewals; the holder hears before the lease ends in Redis,
// even though each renewal hangs for go-redis's read timeout.
func TestFailureModePartitionedHolderToldBeforeExpiry(t *testing.T) {
	e := realEnv(t)
	const lease = 900 * time.Millisecond
	proxy := newProxy(t, e.addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 3 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	m := newClient(t, rdb, WithWatchdogTimeout(lease)).Mutex("partitioned")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	proxy.Blackhole(true)

	direct := e.rdb(t)
	select {
	case <-ctx.Done():
	case <-time.After(3 * lease):
		t.Fatal("holder not told within three leases")
	}
	pttl, err := direct.PTTL(context.Background(), "partitioned").Result()
	require.NoError(t, err)
	assert.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
	assert.Greater(t, pttl, time.Duration(0), "told while the lease still stood in Redis")
	t.Logf("holder told with %v of its lease left in Redis", pttl)

	other := e.client(t).Mutex("partitioned")
	octx, err := other.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, other.Unlock(octx))
	healProxy(proxy) // so that Close does not wait for a renewal's read timeout
}

// Failure mode 5: client clocks do not matter. Leases live in Redis: moving
// Redis's clock (miniredis FastForward) expires the lock although no client
// clock moved, and the holder learns it at its next renewal.
func TestFailureModeLeaseLivesInRedisClock(t *testing.T) {
	e := miniEnv(t)
	const lease = 600 * time.Millisecond
	a := e.client(t, WithWatchdogTimeout(lease)).Mutex("clock")
	b := e.client(t, WithWatchdogTimeout(lease)).Mutex("clock")
	actx, err := a.Lock(context.Background())
	require.NoError(t, err)
	_, err = b.TryLock(context.Background())
	require.ErrorIs(t, err, ErrNotAcquired)

	e.mr.FastForward(lease + time.Millisecond) // Redis's time only
	bctx, err := b.TryLock(context.Background())
	require.NoError(t, err, "expired by Redis's clock, whatever the clients' clocks say")
	select {
	case <-actx.Done():
		assert.ErrorIs(t, context.Cause(actx), ErrLeaseLost)
	case <-time.After(2 * lease):
		t.Fatal("old holder not told")
	}
	require.NoError(t, b.Unlock(bctx))
}

// Failure mode 6: a failover. The lock is replicated asynchronously; once the
// replica has it, a promoted replica keeps excluding others, and the holder,
// cut off from the dead primary, is told its lease is lost.
func TestFailureModeFailoverToReplica(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := redistestReplica(t, e)
	const lease = 600 * time.Millisecond
	primaryRDB := redis.NewClient(&redis.Options{Addr: e.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { primaryRDB.Close() })
	m := newClient(t, primaryRDB, WithWatchdogTimeout(lease)).Mutex("failover")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	rr := replica.Client(t)
	eventually(t, 2*time.Second, "the lock replicated", func() bool {
		n, _ := rr.Exists(context.Background(), "failover").Result()
		return n == 1
	})
	e.srv.Kill()
	require.NoError(t, rr.ReplicaOf(context.Background(), "NO", "ONE").Err())

	_, err = newClient(t, rr).Mutex("failover").TryLock(context.Background())
	assert.ErrorIs(t, err, ErrNotAcquired, "the promoted replica still holds the lock")
	select {
	case <-ctx.Done():
		assert.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
	case <-time.After(3 * lease):
		t.Fatal("holder cut off from the primary was not told")
	}
}

func TestMutexKeyDeletedBehindHoldersBack(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		m := e.client(t, WithWatchdogTimeout(300*time.Millisecond)).Mutex("deleted")
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		lag := watchLag(t)
		deleted := time.Now()
		require.NoError(t, e.rdb(t).Del(context.Background(), "deleted").Err())
		// Renewed every 100ms, the hold finds the key gone at the next
		// renewal; a busy machine delays that by what it delays goroutines.
		if _, ok := recvWithin(lag, deleted, time.Second, ctx.Done()); !ok {
			t.Fatalf("holder not told its lock was deleted (the machine's worst delay meanwhile: %v)", lag.Worst())
		}
		assert.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
		assert.ErrorIs(t, m.Unlock(ctx), ErrNotHeld)
	})
}

func TestMutexFixedLease(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const d = time.Second
		m := e.client(t).Mutex("fixed", WithLease(d))
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		ttl, _ := m.TTL(ctx)
		assert.LessOrEqual(t, ttl, d)
		if e.real() {
			// The holder is told before Redis frees it: a rival that
			// takes the lock finds the holder's context already ended.
			// (miniredis expires keys only on its own clock.)
			rival := e.client(t).Mutex("fixed")
			held := rivalTakes(t, ctx, 5*time.Second, func(wctx context.Context) (func() error, error) {
				octx, err := rival.Lock(wctx)
				return func() error { return rival.Unlock(octx) }, err
			})
			assert.Error(t, held(), "told before Redis frees it")
		}
		<-ctx.Done()
		assert.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
		if e.real() {
			// Once told, the hold is given back rather than left to expire.
			eventually(t, time.Second, "release", func() bool {
				ok, _ := m.IsLocked(context.Background())
				return !ok
			})
		}
	})
}

func TestMutexUnlockWithCancelledContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		m := e.client(t).Mutex("cancelled")
		parent, cancel := context.WithCancel(context.Background())
		ctx, err := m.Lock(parent)
		require.NoError(t, err)
		cancel()
		require.Error(t, ctx.Err())
		require.NoError(t, m.Unlock(ctx))
		// the hold ended with its context: redisync's release, started then,
		// frees the lock (Unlock answers at once, without waiting for it)
		eventually(t, 2*time.Second, "the lock freed", func() bool { return len(e.keys(t)) == 0 })
	})
}

// A retried unlock (go-redis resends a command after a network error) must
// not leave two holds of a reentrant lock.
func TestUnlockScriptIsIdempotent(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		c := e.client(t)
		m := c.Mutex("retried")
		ctx, err := m.Lock(context.Background())
		require.NoError(t, err)
		_, err = m.Lock(ctx)
		require.NoError(t, err)
		field := holds.Held(ctx, m.spec.Ref).Field
		rdb := e.rdb(t)
		for i := 0; i < 2; i++ { // the same command, delivered twice
			n, err := lua.Unlock.Run(context.Background(), rdb, []string{"retried"}, field, 2, 30000, "publish", "0", "ch").Int64()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)
		}
		v, err := rdb.HGet(context.Background(), "retried", field).Int()
		require.NoError(t, err)
		assert.Equal(t, 1, v, "one hold left, not zero")
		for i := 0; i < 2; i++ { // the same acquire, delivered twice
			n, err := lua.Lock.Run(context.Background(), rdb, []string{"retried"}, 30000, field, 1).Int64()
			require.NoError(t, err)
			assert.Equal(t, int64(2), n, "the count")
		}
	})
}

// Redisson compatibility: a Redisson holder (its hash written as Redisson's
// script does) keeps redisync out, and its unlock message wakes redisync.
func TestMutexRedissonWireFormat(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		ctx := context.Background()
		rdb := e.rdb(t)
		const javaField = "6f0e6b1c-0d7e-4c0e-9a0b-1b2c3d4e5f60:57"
		require.NoError(t, rdb.HIncrBy(ctx, "shared-resource", javaField, 1).Err())
		require.NoError(t, rdb.PExpire(ctx, "shared-resource", 30*time.Second).Err())

		c := e.client(t)
		m := c.Mutex("shared-resource")
		_, err := m.TryLock(ctx)
		require.ErrorIs(t, err, ErrNotAcquired)
		done := make(chan context.Context, 1)
		go func() {
			hctx, err := m.Lock(ctx)
			assert.NoError(t, err)
			done <- hctx
		}()
		time.Sleep(100 * time.Millisecond)
		// Redisson's unlock: delete at zero and publish 0 on its channel.
		require.NoError(t, rdb.Del(ctx, "shared-resource").Err())
		require.NoError(t, rdb.Publish(ctx, "redisson_lock__channel:{shared-resource}", "0").Err())
		var hctx context.Context
		select {
		case hctx = <-done:
		case <-time.After(2 * time.Second):
			t.Fatal("Redisson's unlock message did not wake the waiter")
		}
		// redisync's hold looks like Redisson's to Redisson.
		h, err := rdb.HGetAll(ctx, "shared-resource").Result()
		require.NoError(t, err)
		require.Len(t, h, 1)
		for f, v := range h {
			parts := strings.Split(f, ":")
			require.Len(t, parts, 2)
			assert.Equal(t, c.id, parts[0])
			assert.Equal(t, "1", v)
		}
		pttl, _ := rdb.PTTL(ctx, "shared-resource").Result()
		assert.Greater(t, pttl, 25*time.Second)

		sub := rdb.Subscribe(ctx, "redisson_lock__channel:{shared-resource}")
		defer sub.Close()
		_, err = sub.Receive(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(hctx))
		msg, err := sub.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, "0", msg.Payload)
	})
}

func TestCloseEndsWaitsReleasesHoldsAndStopsGoroutines(t *testing.T) {
	forEachEnvSerial(t, func(t *testing.T, e *testEnv) {
		base := redisyncGoroutines()
		c := e.client(t)
		bc := e.client(t)
		held, err := c.Mutex("held").Lock(context.Background())
		require.NoError(t, err)
		blocker, err := bc.Mutex("blocked").Lock(context.Background())
		require.NoError(t, err)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Mutex("blocked").Lock(context.Background())
			errc <- err
		}()
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, c.Close())
		select {
		case err := <-errc:
			assert.ErrorIs(t, err, ErrClosed)
		case <-time.After(2 * time.Second):
			t.Fatal("wait not ended by Close")
		}
		assert.ErrorIs(t, context.Cause(held), ErrClosed)
		assert.ErrorIs(t, context.Cause(held), ErrLeaseLost)
		assert.Equal(t, []string{"blocked"}, e.keys(t), "the closed client's hold was released")
		assert.ErrorIs(t, c.Close(), ErrClosed)
		_, err = c.Mutex("x").Lock(context.Background())
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, c.Mutex("held").Unlock(held), ErrClosed)
		require.NoError(t, bc.Close())
		assert.ErrorIs(t, context.Cause(blocker), ErrClosed)
		assert.Empty(t, e.keys(t))
		eventually(t, time.Second, "goroutines to stop", func() bool { return redisyncGoroutines() <= base })
	})
}

// An uncontended Lock+Unlock costs two round trips.
func TestMutexUncontendedRoundTrips(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		var cmds []string
		rdb := e.rdb(t)
		late := hookLater(rdb)
		c := newClient(t, rdb)
		m := c.Mutex("rtt")
		ctx, err := m.Lock(context.Background()) // loads the scripts
		require.NoError(t, err)
		require.NoError(t, m.Unlock(ctx))
		late.add(cmdRecorder{&cmds})
		for i := 0; i < 10; i++ {
			ctx, err := m.Lock(recording(context.Background()))
			require.NoError(t, err)
			require.NoError(t, m.Unlock(ctx))
		}
		assert.Len(t, cmds, 20, "%v", cmds)
		for _, c := range cmds {
			assert.Equal(t, "evalsha", c)
		}
	})
}

// One unlock message wakes one local waiter, not all of them. The
// waiters' tries are counted, so the count before the unlock must be
// settled: the first waiter tries, subscribes, and tries again once Redis
// confirmed the subscription (an unlock could have come in between); the
// others, started once it waits on a confirmed channel, queue behind it
// without trying (see Mutex.lock). Started all at once, those that came
// before the confirmation tried again when it came, which on a busy
// machine was after the count was taken (10 tries instead of 1).
func TestMutexUnlockWakesOneLocalWaiter(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		holder := e.client(t).Mutex("herd")
		hctx, err := holder.Lock(context.Background())
		require.NoError(t, err)

		var tries atomic.Int64
		rdb := e.rdb(t)
		gate(rdb, countHook{n: &tries})
		c := newClient(t, rdb)
		const waiters = 10
		const channel = "redisson_lock__channel:{herd}"
		var acquired atomic.Int32
		release := make(chan struct{})
		var wg sync.WaitGroup
		wait := func() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := c.Mutex("herd")
				ctx, err := m.Lock(context.Background())
				if !assert.NoError(t, err) {
					return
				}
				acquired.Add(1)
				<-release
				assert.NoError(t, m.Unlock(ctx))
			}()
		}
		wait()
		eventually(t, 5*time.Second, "the first waiter waiting on a confirmed channel, after its try and its retry", func() bool {
			ch, ok := c.ps.Channel(channel)
			return ok && ch.Ready && ch.Subscribed && ch.Waiters == 1 && tries.Load() == 2
		})
		for i := 1; i < waiters; i++ {
			wait()
		}
		eventually(t, 5*time.Second, "all waiters waiting", func() bool { return localWaiters(c, channel) == waiters })
		before := tries.Load()
		assert.Equal(t, int64(2), before, "the waiters that found others queued waited without trying")
		lag := watchLag(t)
		require.NoError(t, holder.Unlock(hctx))
		eventually(t, 5*time.Second, "one waiter to acquire", func() bool { return acquired.Load() == 1 })
		// Long enough for the tries of other waiters woken by the same
		// message to be counted, on a busy machine too.
		time.Sleep(50*time.Millisecond + lag.Slack())
		assert.Equal(t, int64(1), tries.Load()-before, "only the woken waiter tried again")
		close(release)
		wg.Wait()
		assert.Equal(t, int32(waiters), acquired.Load())
	})
}

func TestMutexRedisRestart(t *testing.T) {
	e := realEnv(t)
	rdb := e.rdb(t)
	c := newClient(t, rdb, WithWatchdogTimeout(600*time.Millisecond))
	m := c.Mutex("restart")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	e.srv.Restart(t) // no persistence: the lock and the script cache are gone
	select {
	case <-ctx.Done():
		assert.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
	case <-time.After(3 * time.Second):
		t.Fatal("holder not told its lock vanished with the restart")
	}
	var nctx context.Context
	eventually(t, 3*time.Second, "locking after the restart", func() bool {
		nctx, err = m.Lock(context.Background())
		return err == nil
	})
	require.NoError(t, m.Unlock(nctx))
}

func TestWatchdogRenewsInBatches(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		const locks = 100
		const lease = 1500 * time.Millisecond
		var cmds, pipes atomic.Int64
		rdb := e.rdb(t)
		late := hookLater(rdb)
		c := newClient(t, rdb, WithWatchdogTimeout(lease))
		ctxs := make([]context.Context, locks)
		for i := range ctxs {
			var err error
			ctxs[i], err = c.Mutex(fmt.Sprintf("batch:%d", i)).Lock(context.Background())
			require.NoError(t, err)
		}
		late.add(countHook{n: &cmds, pipes: &pipes})
		time.Sleep(lease + lease/10)
		for _, ctx := range ctxs {
			require.NoError(t, context.Cause(ctx), "every lease kept")
		}
		assert.GreaterOrEqual(t, cmds.Load(), int64(2*locks), "every lock renewed at every tick")
		assert.GreaterOrEqual(t, pipes.Load(), int64(2))
		assert.LessOrEqual(t, pipes.Load(), int64(6), "one pipeline per tick, not one per lock")
	})
}

func TestMutexOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	c1 := newClient(t, cl.Client(t))
	c2 := newClient(t, cl.Client(t))
	var counter int
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := c1
			if i%2 == 1 {
				c = c2
			}
			for r := 0; r < 10; r++ {
				for _, name := range []string{"cl:a", "cl:b", "cl:c"} { // different slots
					m := c.Mutex(name)
					ctx, err := m.Lock(context.Background())
					if !assert.NoError(t, err) {
						return
					}
					if name == "cl:a" {
						counter++
					}
					assert.NoError(t, m.Unlock(ctx))
				}
			}
		}(i)
	}
	wg.Wait()
	assert.Equal(t, 80, counter)
}

// cmdRecorder records the name of every command sent for a call whose
// context is recording's (a pipeline counts each): the Client's background
// work (the healer's INFO after a release, a renewal) is not the call's.
type cmdRecorder struct{ names *[]string }

// recordedKey marks the contexts whose commands a cmdRecorder records.
type recordedKey struct{}

// recording returns ctx marked for cmdRecorder.
func recording(ctx context.Context) context.Context {
	return context.WithValue(ctx, recordedKey{}, true)
}

var cmdRecorderMu sync.Mutex

func (r cmdRecorder) record(ctx context.Context, cmd redis.Cmder) {
	if ctx.Value(recordedKey{}) == nil {
		return
	}
	cmdRecorderMu.Lock()
	*r.names = append(*r.names, cmd.Name())
	cmdRecorderMu.Unlock()
}

func (cmdRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r cmdRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(ctx, cmd)
		return next(ctx, cmd)
	}
}
func (r cmdRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(ctx, cmd)
		}
		return next(ctx, cmds)
	}
}

// countHook counts script commands (n), alone or pipelined, and pipelines.
type countHook struct{ n, pipes *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.pipes != nil {
			h.pipes.Add(1)
		}
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

var _ = errors.Is

// Dropped connections cost a renewal, not the lock: the watchdog retries
// until the lease would have run out and never gives up after one error.
//
// Not parallel: its renewals must answer within go-redis's 150ms read
// timeout (short, so that the partition below is over quickly); beside
// the parallel tests on a busy machine they did not (the lease lost after
// the first cuts), so it runs in the serial stage, alone in the process.
func TestMutexSurvivesDroppedConnections(t *testing.T) {
	e := realEnv(t)
	const lease = 1500 * time.Millisecond
	proxy := newProxy(t, e.addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ReadTimeout: 150 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	var pipes atomic.Int64
	gate(rdb, countHook{n: new(atomic.Int64), pipes: &pipes})
	m := newClient(t, rdb, WithWatchdogTimeout(lease)).Mutex("dropped")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	direct := e.rdb(t)
	for i := 0; i < 3; i++ {
		time.Sleep(lease / 2)
		proxy.CutAll()
		pttl, err := direct.PTTL(context.Background(), "dropped").Result()
		require.NoError(t, err)
		require.Greater(t, pttl, time.Duration(0))
	}
	require.NoError(t, context.Cause(ctx), "the hold outlived three dropped connections")

	// A short partition: renewals time out, and are retried until one passes.
	before := pipes.Load()
	proxy.Blackhole(true)
	time.Sleep(lease / 4)
	proxy.Blackhole(false)
	proxy.CutAll() // the timed-out connections' streams are out of step
	time.Sleep(lease / 2)
	require.NoError(t, context.Cause(ctx), "the hold outlived a partition shorter than its lease")
	assert.GreaterOrEqual(t, pipes.Load()-before, int64(3), "renewals went on after the failures")
	require.NoError(t, m.Unlock(ctx))
}

// Sentinel: through a failover client, a replicated lock survives the
// failover with its holder, keeps others out, and unlocks on the new master.
func TestMutexSentinelFailover(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := redistestReplica(t, e)
	s := redistestSentinel(t, e, 1)
	newFailover := func() *redis.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Addr()},
			MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	const lease = 6 * time.Second
	m := newClient(t, newFailover(), WithWatchdogTimeout(lease)).Mutex("sentinel")
	other := newClient(t, newFailover(), WithWatchdogTimeout(lease)).Mutex("sentinel")
	ctx, err := m.Lock(context.Background())
	require.NoError(t, err)
	rr := replica.Client(t)
	eventually(t, 2*time.Second, "the lock replicated", func() bool {
		n, _ := rr.Exists(context.Background(), "sentinel").Result()
		return n == 1
	})
	e.srv.Kill()
	eventually(t, 15*time.Second, "the replica promoted", func() bool {
		info, _ := rr.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "role:master")
	})
	eventually(t, 5*time.Second, "the failover clients to follow the new master", func() bool {
		_, err = other.TryLock(context.Background())
		return !strings.Contains(fmt.Sprint(err), "connection refused")
	})
	assert.ErrorIs(t, err, ErrNotAcquired, "the promoted replica keeps the lock")
	require.NoError(t, context.Cause(ctx), "the holder kept its hold through the failover")

	got := make(chan error, 1)
	go func() {
		octx, err := other.Lock(context.Background())
		if err == nil {
			err = other.Unlock(octx)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, m.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not granted on the new master")
	}
}

// Clients take turns under contention: Redis tells the clients of an unlock
// in the order they subscribed, and a client that just won moves to the back.
func TestMutexClientsTakeTurns(t *testing.T) {
	e := realEnv(t) // miniredis delivers in no fixed order
	const clients, perClient, total = 4, 8, 2000
	var next atomic.Int64
	var got [clients * perClient]int
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		m := e.client(t).Mutex("turns")
		for g := 0; g < perClient; g++ {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				for next.Add(1) <= total {
					ctx, err := m.Lock(context.Background())
					if !assert.NoError(t, err) {
						return
					}
					got[id]++ // under the lock
					assert.NoError(t, m.Unlock(ctx))
				}
			}(i*perClient + g)
		}
	}
	wg.Wait()
	perClientShare := make([]int, clients)
	for id, n := range got {
		perClientShare[id/perClient] += n
	}
	t.Logf("acquisitions per client %v; Jain's index over goroutines %.3f", perClientShare, jainIndex(got[:]))
	assert.Greater(t, jainIndex(got[:]), 0.9)
	assert.Empty(t, e.keys(t))
}

// jainIndex is Jain's fairness index: 1 when all are equal, 1/n when one
// has everything.
func jainIndex(xs []int) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}
