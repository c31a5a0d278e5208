package redisync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/lua"
)

// Adversarial tests: each shows a documented promise broken by the current
// code. See the comment of each test for the promise, the sequence and what
// happens.

// advSilentRDB returns a go-redis client that reaches Redis through a fault
// proxy, with go-redis's usual 3s read timeout and ContextTimeoutEnabled
// left off (the user's choice, DESIGN.md: "every wait selects on ctx.Done()
// itself").
func advSilentRDB(t *testing.T, addr string) (*redis.Client, *faultproxy.Proxy) {
	p := faultproxy.New(t, addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, p
}

// TestAdvLatchWaitIgnoresContextWhileRedisSilent
//
// Promise (README "Guarantees"): "Every wait ends when its context ends,
// even while Redis does not answer". DESIGN: "every wait selects on
// ctx.Done() itself".
//
// Sequence: a latch counts 1; the network to Redis goes silent (a
// partition); CountDownLatch.Wait is called with a 200ms context.
//
// What happens: Wait reads the count with a plain GET (l.Count) that is not
// abandonable, so the call is held by go-redis's read timeout (3s here,
// plus its retries) long after the context ended.
func TestAdvLatchWaitIgnoresContextWhileRedisSilent(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, p := advSilentRDB(t, e.addr)
	c := newClient(t, rdb)
	bg := context.Background()
	l := c.CountDownLatch("adv:latch")
	ok, err := l.TrySetCount(bg, 1)
	require.NoError(t, err)
	require.True(t, ok)

	p.Blackhole(true)
	defer p.Blackhole(false)
	ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	// Held by the silent Redis, it would return after go-redis's 3s.
	if err, ok := recvWithin(lag, start, time.Second, done); ok {
		require.Error(t, err)
		t.Logf("Wait returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	} else {
		t.Errorf("CountDownLatch.Wait still blocked %v after its 200ms context ended (Redis silent)", time.Since(start).Round(time.Millisecond))
		p.Blackhole(false)
		err := advDrain(done)
		t.Logf("it returned %v after the call: %v", time.Since(start).Round(time.Millisecond), err)
	}
}

// TestAdvSemaphoreAddToHoldIgnoresContextWhileRedisSilent
//
// Promise (README "Guarantees"): "Every wait ends when its context ends,
// even while Redis does not answer". Semaphore.Acquire: "waiting until they
// are free or ctx ends (then it returns an error wrapping ctx's error)".
//
// Sequence: a hold of 1 permit; Redis goes silent; Acquire(hold's context
// with a 200ms deadline, 1) to add a permit to the hold.
//
// What happens: an Acquire through a hold sends its script under the
// hold's lock and never abandons it (semaphore.go: "under the hold's lock:
// never abandoned"), so the wait lasts go-redis's read timeout, not the
// context.
func TestAdvSemaphoreAddToHoldIgnoresContextWhileRedisSilent(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, p := advSilentRDB(t, e.addr)
	c := newClient(t, rdb)
	bg := context.Background()
	s := c.Semaphore("adv:sem")
	require.NoError(t, s.SetPermits(bg, 3))
	hctx, err := s.Acquire(bg, 1)
	require.NoError(t, err)

	p.Blackhole(true)
	defer p.Blackhole(false)
	ctx, cancel := context.WithTimeout(hctx, 200*time.Millisecond)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := s.Acquire(ctx, 1); done <- err }()
	// Held by the silent Redis, it would return after go-redis's 3s.
	if err, ok := recvWithin(lag, start, time.Second, done); ok {
		require.Error(t, err)
		t.Logf("Acquire returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	} else {
		t.Errorf("Semaphore.Acquire through a hold still blocked %v after its 200ms context ended (Redis silent)", time.Since(start).Round(time.Millisecond))
		p.Blackhole(false)
		err := advDrain(done)
		t.Logf("it returned %v after the call: %v", time.Since(start).Round(time.Millisecond), err)
	}
}

// TestAdvMutexReentryIgnoresContextWhileRedisSilent
//
// Promise (Mutex.Lock doc): "Lock acquires the lock, waiting until it is
// free or ctx ends (then it returns an error that wraps ctx's error)";
// README: every wait ends when its context ends, even while Redis does not
// answer.
//
// Sequence: hold a Mutex; Redis goes silent; a nested Lock (re-entry)
// through the hold's context with a 200ms deadline.
//
// What happens: reenter sends lock.lua with context.WithoutCancel and does
// not abandon it, so Lock blocks for go-redis's read timeout.
func TestAdvMutexReentryIgnoresContextWhileRedisSilent(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb, p := advSilentRDB(t, e.addr)
	c := newClient(t, rdb)
	bg := context.Background()
	m := c.Mutex("adv:reenter")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	p.Blackhole(true)
	defer p.Blackhole(false)
	ctx, cancel := context.WithTimeout(hctx, 200*time.Millisecond)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := m.Lock(ctx); done <- err }()
	// Held by the silent Redis, it would return after go-redis's 3s.
	if err, ok := recvWithin(lag, start, time.Second, done); ok {
		require.Error(t, err)
		t.Logf("Lock returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	} else {
		t.Errorf("re-entering Lock still blocked %v after its 200ms context ended (Redis silent)", time.Since(start).Round(time.Millisecond))
		p.Blackhole(false)
		err := advDrain(done)
		t.Logf("it returned %v after the call: %v", time.Since(start).Round(time.Millisecond), err)
	}
}

// advDrain waits (at most 15s) for the call that reports on done, so that
// no goroutine of a test outlives it.
func advDrain(done <-chan error) error {
	select {
	case err := <-done:
		return err
	case <-time.After(15 * time.Second):
		return errors.New("still blocked after 15s")
	}
}

// TestAdvRedissonChannelForHashTaggedName
//
// Promise (DESIGN.md "Keys"): the final unlock publishes "0" on Redisson's
// channel for the name, "which is redisson_lock__channel:{name}, or
// redisson_lock__channel:name when the name already contains {" — so Go
// and Java services can guard the same resource. (Redisson's
// RedissonObject.prefixName does exactly that.)
//
// Sequence: a lock with a hash-tagged name, "{orders}:42" (the usual
// Cluster naming). (1) redisync unlocks it while a Redisson peer listens on
// Redisson's channel, "redisson_lock__channel:{orders}:42". (2) A Redisson
// holder (its hash, 30s lease) unlocks as Redisson does (DEL, PUBLISH "0"
// on its channel) while a redisync Lock waits.
//
// What happens: redisync always wraps the name in braces
// ("redisson_lock__channel:{{orders}:42}"): the Redisson peer never hears
// the unlock, and the redisync waiter is not woken — it sleeps out the
// Redisson holder's whole remaining lease (here it is still waiting when
// its 2s context ends).
func TestAdvRedissonChannelForHashTaggedName(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	const name = "{orders}:42"
	const redissonChannel = "redisson_lock__channel:" + name // prefixName: the name contains "{"
	rdb := e.rdb(t)
	c := e.client(t)
	m := c.Mutex(name)

	// (1) redisync -> Redisson.
	sub := rdb.Subscribe(bg, redissonChannel)
	defer sub.Close()
	_, err := sub.Receive(bg)
	require.NoError(t, err)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))
	rctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	_, err = sub.ReceiveMessage(rctx)
	heard := err == nil

	// (2) Redisson -> redisync.
	require.NoError(t, rdb.HSet(bg, name, "8f4d0a3c-redisson:1", 1).Err())
	require.NoError(t, rdb.PExpire(bg, name, 30*time.Second).Err())
	wctx, wcancel := context.WithTimeout(bg, 2*time.Second)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		lctx, err := m.Lock(wctx)
		if err == nil {
			_ = m.Unlock(lctx)
		}
		got <- err
	}()
	eventually(t, time.Second, "the waiter to subscribe", func() bool {
		return localWaiters(c, m.channel) == 1
	})
	require.NoError(t, rdb.Del(bg, name).Err())
	require.NoError(t, rdb.Publish(bg, redissonChannel, "0").Err())
	werr := <-got

	if !heard {
		t.Errorf("redisync's unlock of %q was not published on Redisson's channel %q (it used %q)", name, redissonChannel, m.channel)
	}
	if werr != nil {
		t.Errorf("Redisson's unlock of %q on %q did not wake the redisync waiter; Lock: %v", name, redissonChannel, werr)
	}
}

// TestAdvRWMutexTakesNameHeldByMutex
//
// Promise (README): "Bad input (... someone else's key under the name) is
// an error wrapping ErrInvalid or naming the key that holds another type;
// nothing is overwritten." And mutual exclusion: a name is one resource.
//
// Sequence: a Mutex holds "adv:shared" (a hash: owner field -> count). An
// RWMutex of the same name — a programming slip, or two services that
// disagree about the primitive — calls TryLock.
//
// What happens: rw_lock.lua sees no "mode" field, takes the Mutex's hash as
// a free RW lock and writes "mode"/"w:<owner>" into it: both hold the
// resource at once. The Mutex's Unlock then deletes the whole hash, taking
// the RWMutex's write hold with it.
func TestAdvRWMutexTakesNameHeldByMutex(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		rdb := e.rdb(t)
		const name = "adv:shared"
		m := e.client(t).Mutex(name)
		mctx, err := m.Lock(bg)
		require.NoError(t, err)
		before, err := rdb.HGetAll(bg, name).Result()
		require.NoError(t, err)

		rw := e.client(t).RWMutex(name)
		wctx, err := rw.TryLock(bg)
		after, _ := rdb.HGetAll(bg, name).Result()
		if err == nil {
			t.Errorf("RWMutex.TryLock took %q while a Mutex holds it: both hold it (hash before %v, after %v)", name, before, after)
			require.NoError(t, m.Unlock(mctx))
			n, _ := rdb.Exists(bg, name).Result()
			t.Logf("after the Mutex's Unlock the key exists: %d; the RW hold's context is live: %v", n, wctx.Err() == nil)
			_ = rw.Unlock(wctx)
			return
		}
		require.Equal(t, before, after, "nothing is overwritten")
		require.NoError(t, m.Unlock(mctx))
	})
}

// TestAdvNameEqualToCompanionKeyBreaksSemaphore
//
// Promise (DESIGN.md "Keys", README "Keys"): "two different names never
// share a key". Semaphores: at most N permits are held at once.
//
// Sequence: Semaphore "adv:s" with 2 permits. A Mutex whose name is
// "{adv:s}:sem-holders:adv:s" (any string is a valid name) is locked; A
// acquires 1 permit (the script counts the Mutex's field as a holder, so
// only 1 of 2 is free); the Mutex is unlocked; B acquires 2 permits.
//
// What happens: the Mutex's key IS the semaphore's holders hash. Its
// Unlock deletes that hash, A's permit with it, so B is granted 2 permits
// while A, whose context is still live, holds 1: 3 permits of 2 held.
func TestAdvNameEqualToCompanionKeyBreaksSemaphore(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		const sname = "adv:s"
		other := keys.Companion(sname, "sem-holders")
		ca, cb, cm := e.client(t), e.client(t), e.client(t)
		require.NoError(t, ca.Semaphore(sname).SetPermits(bg, 2))

		m := cm.Mutex(other)
		mctx, err := m.Lock(bg)
		// Fixed: such a name is refused (it is a companion key's form).
		require.ErrorIs(t, err, ErrInvalid)
		for _, tok := range []string{"sem-holders", "sem-expiry", "rw-readers", "rw-writers", "rw-waiting", "rw-admitted", "fair-queue", "fair-timeouts"} {
			_, err := cm.Mutex(keys.Companion(sname, tok)).TryLock(bg)
			require.ErrorIs(t, err, ErrInvalid, tok)
		}
		actx, err := ca.Semaphore(sname).TryAcquire(bg, 1)
		require.NoError(t, err)
		if err := m.Unlock(mctx); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unlock through a refused name: %v", err)
		}

		bctx, err := cb.Semaphore(sname).TryAcquire(bg, 2)
		if err == nil {
			t.Errorf("3 permits of 2 held: A holds 1 (context live: %v) and B was granted 2, after a Mutex named %q was unlocked",
				actx.Err() == nil, other)
			_ = cb.Semaphore(sname).Release(bctx, 2)
		}
		_ = ca.Semaphore(sname).Release(actx, 1)
	})
}

// TestAdvDowngradeLostReplyLeavesReadHold
//
// Promise (README "Guarantees"): "Every wait ends when its context ends
// ... and leaves nothing behind"; DESIGN: "A wait that ends because its
// context ended returns the context's error and leaves nothing behind in
// Redis".
//
// Sequence: hold an RWMutex's write lock; downgrade with RLock through the
// write hold's context, with a 300ms deadline; the replies of rw_rlock.lua
// are lost (a network blip; the script ran: the read hold r:<owner> is in
// Redis). RLock retries every 200ms, until its context ends: RLock returns
// the context's error. Then the write lock is released.
//
// What happens: a downgrade's attempts are never swept (rwlock.go: "A
// downgrade's field is its write hold's: never swept"), so the read hold
// the lost attempt took stays in Redis, owned by nobody: after the write
// Unlock the lock is still read-locked, and writers are shut out until the
// orphan's lease (30s) runs out.
func TestAdvDowngradeLostReplyLeavesReadHold(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	rw := c.RWMutex("adv:down")
	wctx, err := rw.Lock(bg)
	require.NoError(t, err)
	// Load rw_rlock.lua so the lost reply is that of the script itself.
	require.NoError(t, lua.RWRLock.Load(bg, rdb).Err())

	lose := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.RWRLock.Script), Action: faultproxy.LoseReply()})
	rctx, cancel := context.WithTimeout(wctx, 300*time.Millisecond)
	defer cancel()
	_, err = rw.RLock(rctx)
	lose.Remove()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("RLock: %v (%d replies lost)", err, lose.Fired())
	require.NoError(t, rw.Unlock(wctx))

	time.Sleep(300 * time.Millisecond) // room for any background clean-up
	other := e.client(t).RWMutex("adv:down")
	octx, err := other.TryLock(bg)
	if err != nil {
		hv, _ := e.rdb(t).HGetAll(bg, "adv:down").Result()
		pttl, _ := e.rdb(t).PTTL(bg, "adv:down").Result()
		t.Errorf("after a downgrade RLock ended with its context and the write Unlock, the lock is still held: %v; hash %v, lease %v", err, hv, pttl)
		return
	}
	require.NoError(t, other.Unlock(octx))
}

// TestAdvTooLateGrantGiveBackFreesNextHold
//
// Promise (README): "while [the hold's context] is live the owner holds the
// lock"; mutual exclusion; "the holder is told before anyone else can
// hold".
//
// Sequence (WithLease(1s), so no renewal hides anything): Lock's first
// attempt takes the lock but its reply comes back 1s later, after the
// local deadline (0.9s): grant gives it back (drop.lua under the same
// owner field) via cleanup, which waits at most 1s for it; the give-back
// is slow to reach Redis (1.4s). Lock tries again at once — with the SAME
// field — and takes the lock (the first lease ran out). Then the slow
// give-back arrives.
//
// What happens: drop.lua deletes the new hold (same field): the lock is
// free in Redis while the hold's context is live and its local deadline is
// still ~0.5s away; another client takes it: two holders.
func TestAdvTooLateGrantGiveBackFreesNextHold(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.Lock.Load(bg, rdb).Err())
	require.NoError(t, lua.Drop.Load(bg, rdb).Err())
	const name = "adv:late"
	m := c.Mutex(name, WithLease(time.Second))

	slowLock := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1, Action: faultproxy.DelayReply(time.Second)})
	slowDrop := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.Drop.Script), Times: 1, Action: faultproxy.DelayBefore(1400 * time.Millisecond)})

	start := time.Now()
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	t.Logf("Lock returned after %v", time.Since(start).Round(time.Millisecond))
	require.Equal(t, 1, slowLock.Fired(), "the grant's reply delayed")
	require.Equal(t, 1, slowDrop.Fired(), "the too-late grant was given back")

	b := e.client(t).Mutex(name, WithLease(time.Second))
	var bctx context.Context
	took := false
	deadline := time.Now().Add(800 * time.Millisecond)
	for hctx.Err() == nil && time.Now().Before(deadline) {
		if bctx, err = b.TryLock(bg); err == nil {
			took = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if took {
		if hctx.Err() == nil {
			t.Errorf("another client took %q %v after the call while the first hold's context is still live: two holders",
				name, time.Since(start).Round(time.Millisecond))
		} else {
			t.Logf("B took it after A was told (%v)", context.Cause(hctx))
		}
		_ = b.Unlock(bctx)
	}
	_ = m.Unlock(hctx)
}

// TestAdvNoPanicOnOddInput
//
// Promise (DESIGN.md): "Bad input gets a clear error, never a panic or a
// silent no-op"; the brief's "clear errors, never a panic".
//
// Sequence: call the API with a nil context, on zero-value handles, and on
// a nil *Client.
//
// What happens: each of these panics (nil pointer dereference) instead of
// returning an error wrapping ErrInvalid.
func TestAdvNoPanicOnOddInput(t *testing.T) {
	e := miniEnv(t)
	c := e.client(t)
	bg := context.Background()
	var nilCtx context.Context
	cases := []struct {
		name string
		f    func() error
	}{
		{"Mutex.Lock(nil ctx)", func() error { _, err := c.Mutex("adv:x").Lock(nilCtx); return err }},
		{"Mutex.Unlock(nil ctx)", func() error { return c.Mutex("adv:x").Unlock(nilCtx) }},
		{"Semaphore.Acquire(nil ctx)", func() error { _, err := c.Semaphore("adv:s").Acquire(nilCtx, 1); return err }},
		{"CountDownLatch.Wait(nil ctx)", func() error { return c.CountDownLatch("adv:l").Wait(nilCtx) }},
		{"new(Mutex).Lock", func() error { _, err := new(Mutex).Lock(bg); return err }},
		{"new(RWMutex).RLock", func() error { _, err := new(RWMutex).RLock(bg); return err }},
		{"new(Semaphore).Acquire", func() error { _, err := new(Semaphore).Acquire(bg, 1); return err }},
		{"new(CountDownLatch).Wait", func() error { return new(CountDownLatch).Wait(bg) }},
		{"new(Client).Mutex(x).Lock", func() error { _, err := new(Client).Mutex("adv:x").Lock(bg); return err }},
		{"(*Client)(nil).Close", func() error { return (*Client)(nil).Close() }},
	}
	for _, tc := range cases {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s panicked: %v", tc.name, r)
				}
			}()
			err := tc.f()
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want an error wrapping ErrInvalid", tc.name, err)
			}
		}()
	}
	// A zero Client's methods that return no error do not panic either
	// (PubSub did, once the mode moved to internal/notify).
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("a zero Client's PubSub or ID panicked: %v", r)
			}
		}()
		assert.Equal(t, PubSubAuto, new(Client).PubSub())
		assert.Empty(t, new(Client).ID())
	}()
	_ = fmt.Sprint
}

// TestAdvForceUnlockRacingGrantInProcess
//
// Promise (Mutex.ForceUnlock doc, README "Guarantees"): "Holders lose their
// lease: their contexts are cancelled with ErrLeaseLost, in this process
// before the lock is freed"; "while [the hold's context] is live the owner
// holds the lock".
//
// Sequence: in one process, A's Lock has taken the lock in Redis (lock.lua
// ran) but its reply is still on the way (300ms); ForceUnlock, through the
// same Client, frees the lock (it reports it was held); then A's reply
// arrives.
//
// What happens: ForceUnlock ends only the holds already in the watchdog's
// table (endAll), then deletes the key; A's grant comes after and
// registers a live hold of a lock that Redis no longer has. A's Lock
// returns a live context, another client takes the lock, and A is told
// only at its next renewal (10s later with the default lease).
func TestAdvForceUnlockRacingGrantInProcess(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.Lock.Load(bg, rdb).Err())
	const name = "adv:force"
	admin := e.rdb(t)
	slow := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1, Action: faultproxy.DelayReply(300 * time.Millisecond)})

	type res struct {
		hctx context.Context
		err  error
	}
	got := make(chan res, 1)
	go func() { hctx, err := c.Mutex(name).Lock(bg); got <- res{hctx, err} }()
	eventually(t, time.Second, "A's lock.lua to have run", func() bool {
		n, err := admin.Exists(bg, name).Result()
		return err == nil && n == 1
	})
	require.Equal(t, 1, slow.Fired(), "A's reply delayed")
	freed, err := c.Mutex(name).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, freed, "ForceUnlock found the lock held")
	a := <-got
	if a.err != nil {
		t.Logf("A's Lock failed: %v (fine)", a.err)
		return
	}
	b := e.client(t).Mutex(name)
	bctx, err := b.TryLock(bg)
	if err == nil {
		if a.hctx.Err() == nil {
			t.Errorf("after an in-process ForceUnlock, A's hold context is live and another client holds %q too", name)
		}
		_ = b.Unlock(bctx)
	} else if a.hctx.Err() == nil {
		t.Logf("B: %v", err)
	}
	_ = c.Mutex(name).Unlock(a.hctx)
}

// TestAdvDowngradeOutlivesItsContext
//
// Promise (README "Ownership"): "A hold is bound to the context given to
// its first Lock, whatever that context is"; "a lock never outlives the
// context it was taken with"; a re-entry's context "ends with the hold,
// and with the context it was given".
//
// Sequence: hold the write lock (long-lived context); take the read lock
// through the write hold's context with a 200ms deadline (a downgrade, e.g.
// a bounded sub-task); wait 400ms.
//
// What happens: the downgrade's hold is derived from
// context.WithoutCancel of the context given to RLock and bound only to the
// write hold's parent, so the context RLock returned is still live, and
// the read hold still in Redis, long after the context it was taken with
// ended.
func TestAdvDowngradeOutlivesItsContext(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		rw := e.client(t).RWMutex("adv:down2")
		wctx, err := rw.Lock(bg)
		require.NoError(t, err)
		sub, cancel := context.WithTimeout(wctx, 200*time.Millisecond)
		defer cancel()
		rctx, err := rw.RLock(sub)
		require.NoError(t, err)
		time.Sleep(400 * time.Millisecond)
		require.Error(t, sub.Err(), "the context given to RLock has ended")
		n, _ := rw.RHoldCount(rctx)
		if rctx.Err() == nil {
			t.Errorf("the downgrade's read hold context is live (Redis read holds: %d) 200ms after the context it was taken with ended", n)
		}
		_ = rw.RUnlock(rctx)
		require.NoError(t, rw.Unlock(wctx))
	})
}

// TestAdvClusterShardedUnlockMessages
//
// Promise (DESIGN.md "Keys"): "On Redis Cluster with Redis 7+, Redisson
// (default AUTO mode) publishes with SPUBLISH and listens with SSUBSCRIBE;
// redisync does the same there, detected the same way ... So Go and Java
// services can guard the same resource on every topology." And "Pub/sub on
// Cluster is sharded ... an unlock is delivered by the shard that owns the
// lock's slot".
//
// Sequence: a three-node Redis 7 Cluster. (1) A redisync Unlock while a
// Redisson peer listens with SSUBSCRIBE on the lock's channel. (2) A
// Redisson holder unlocks as Redisson does there (DEL, SPUBLISH "0") while
// a redisync Lock waits.
//
// What happens: redisync only ever uses PUBLISH/SUBSCRIBE (no SSUBSCRIBE or
// SPUBLISH anywhere in the code): the Redisson listener hears nothing, and
// the redisync waiter is not woken — it sleeps out the holder's lease
// (still waiting when its 2s context ends).
func TestAdvClusterShardedUnlockMessages(t *testing.T) {
	cl := sharedCluster(t)
	bg := context.Background()
	cc := cl.Client(t)
	c := newClient(t, cc)
	const name = "adv:clu"
	channel := "redisson_lock__channel:{" + name + "}"
	m := c.Mutex(name)

	// (1) redisync -> Redisson (SSUBSCRIBE).
	sub := cc.SSubscribe(bg, channel)
	defer sub.Close()
	_, err := sub.Receive(bg)
	require.NoError(t, err)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))
	rctx, cancel := context.WithTimeout(bg, 500*time.Millisecond)
	defer cancel()
	_, err = sub.ReceiveMessage(rctx)
	heard := err == nil

	// (2) Redisson (SPUBLISH) -> redisync.
	require.NoError(t, cc.HSet(bg, name, "8f4d0a3c-redisson:1", 1).Err())
	require.NoError(t, cc.PExpire(bg, name, 30*time.Second).Err())
	wctx, wcancel := context.WithTimeout(bg, 2*time.Second)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		lctx, err := m.Lock(wctx)
		if err == nil {
			_ = m.Unlock(lctx)
		}
		got <- err
	}()
	eventually(t, time.Second, "the waiter to subscribe", func() bool { return localWaiters(c, m.channel) == 1 })
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, cc.Del(bg, name).Err())
	require.NoError(t, cc.SPublish(bg, channel, "0").Err())
	werr := <-got

	if !heard {
		t.Errorf("redisync's unlock was not delivered to an SSUBSCRIBE listener of %q on a Redis 7 Cluster", channel)
	}
	if werr != nil {
		t.Errorf("an SPUBLISHed unlock on %q did not wake the redisync waiter; Lock: %v", channel, werr)
	}
}

// TestAdvHugeLeaseOverflows
//
// Promise (DESIGN.md): "Bad input gets a clear error, never a panic or a
// silent no-op: ... a lease or watchdog timeout that is not positive";
// WithLease: "every hold of the lock [gets] a fixed lease of d that the
// watchdog does not renew".
//
// Sequence: the common "forever" idiom, time.Duration(math.MaxInt64), as
// WithWatchdogTimeout and as WithLease.
//
// What happens: both pass the "not positive" and MinLease checks, then
// wholeMs rounds them up past MaxInt64 into a negative duration.
// WithWatchdogTimeout: New succeeds with a negative lease; Lock of a free
// lock never succeeds (every grant is "too late", retried until ctx ends)
// and the watchdog's timer is reset to 0 in a loop. WithLease: the negative
// lease fails "lc.lease > 0", so the handle silently uses the watchdog's
// renewed 30s lease instead of a fixed one.
func TestAdvHugeLeaseOverflows(t *testing.T) {
	e := realEnv(t)
	forever := time.Duration(math.MaxInt64)

	c, err := New(e.rdb(t), WithWatchdogTimeout(forever))
	if err == nil {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hctx, err := c.Mutex("adv:forever").Lock(ctx)
		if err != nil {
			t.Errorf("New accepted WithWatchdogTimeout(MaxInt64) (lease %v), then Lock of a free lock failed: %v", c.lease, err)
		} else {
			_ = c.Mutex("adv:forever").Unlock(hctx)
		}
	}

	m := e.client(t).Mutex("adv:forever2", WithLease(forever))
	if m.err == nil && (m.spec.Renewed || m.spec.Lease != forever.Truncate(time.Millisecond)) {
		t.Errorf("WithLease(MaxInt64) silently became a %s", holds.LeaseText(m.spec.Lease, m.spec.Renewed))
	}
	// Fixed: both are refused (above MaxLease).
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, m.err, ErrInvalid)
}
