package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// A Cluster slot being resharded (MIGRATING on its master, IMPORTING on
// another, its keys moved one by one with MIGRATE) is a normal state, not
// an error: the source answers ASK for the keys it no longer has, and
// TRYAGAIN for a script on several keys some of which it lacks (issue 24).
// The subtests share one cluster, each on a slot of its own.
func TestReshardInProgress(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	cc := rc.Client(t)
	bg := context.Background()

	// migrating starts moving the slot of name (served by Masters[0]) to
	// Masters[1], and finishes the move when the subtest ends.
	migrating := func(t *testing.T, name string) *redistest.Migration {
		mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], name), rc.Masters[1])
		t.Cleanup(func() { mig.Finish(t) })
		return mig
	}

	// keysOn counts the keys of mig's slot on s.
	keysOn := func(t *testing.T, s *redistest.Server, mig *redistest.Migration) int {
		n, err := s.Client(t).ClusterCountKeysInSlot(bg, mig.Slot).Result()
		require.NoError(t, err)
		return int(n)
	}

	// #2: with WithReplicaAck the scripts that take something go on the
	// master's own connection; the source's ASK is followed there (ASKING,
	// the script and WAIT on the target's connection), not taken for a
	// MOVED whose slot map never comes.
	t.Run("replica ack follows ASK", func(t *testing.T) {
		c := newClient(t, rc.Client(t), WithReplicaAck(1, time.Second))
		name := nameOn(t, cc, rc.Masters[0], "ask")
		mig := migrating(t, name)
		m := c.Mutex(name)
		ctx, cancel := context.WithTimeout(bg, 10*time.Second)
		defer cancel()
		lctx, err := m.Lock(ctx)
		require.NoError(t, err, "a free lock of a migrating slot: the source answers ASK")
		assert.Equal(t, 1, keysOn(t, mig.To, mig), "taken on the target")
		assert.Zero(t, keysOn(t, mig.From, mig))
		_, err = m.Lock(lctx)
		require.NoError(t, err, "a re-entry: ASK again")
		n, err := m.HoldCount(lctx)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		require.NoError(t, m.Unlock(lctx))
		require.NoError(t, m.Unlock(lctx))
		assert.Zero(t, keysOn(t, mig.To, mig), "released")
	})

	// #3: a hold whose key was MIGRATEd while its slot still migrates is
	// renewed on the target (its renewals meet ASK), with and without
	// WithReplicaAck.
	t.Run("moved hold renews", func(t *testing.T) {
		const lease = 1500 * time.Millisecond
		clients := map[string]*Client{
			"replica ack": newClient(t, rc.Client(t), WithReplicaAck(1, 200*time.Millisecond), WithWatchdogTimeout(lease)),
			"plain":       newClient(t, rc.Client(t), WithWatchdogTimeout(lease)),
		}
		tag := nameOn(t, cc, rc.Masters[0], "renew")
		holds := map[string]context.Context{}
		for what, c := range clients {
			var err error
			holds[what], err = c.Mutex("{" + tag + "}" + what).Lock(bg)
			require.NoError(t, err, what)
		}
		mig := migrating(t, tag)
		mig.Move(t, mig.Keys(t, 10)...)
		require.Equal(t, len(clients), keysOn(t, mig.To, mig), "both locks moved")
		time.Sleep(2 * lease)
		for what, c := range clients {
			require.NoError(t, context.Cause(holds[what]), "%s: the hold of a moved key lives on", what)
			require.NoError(t, c.Mutex("{"+tag+"}"+what).Unlock(holds[what]), what)
		}
		assert.Zero(t, keysOn(t, mig.To, mig), "released")
	})

	// #4: an Unlock while the slot is MIGRATING, the lock's key still on
	// the source, releases at once, and wakes a waiter of another Client,
	// long before the 30 s lease. (unlock.lua named the channel, a key
	// that never exists, as a KEY: the source refused the script with
	// TRYAGAIN, and the lock stayed.)
	t.Run("unlock while migrating", func(t *testing.T) {
		holder, waiter := newClient(t, rc.Client(t)), newClient(t, rc.Client(t))
		name := nameOn(t, cc, rc.Masters[0], "unlock")
		hctx, err := holder.Mutex(name).Lock(bg)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 20*time.Second)
			defer cancel()
			wctx, err := waiter.Mutex(name).Lock(ctx)
			if err == nil {
				err = waiter.Mutex(name).Unlock(wctx)
			}
			got <- err
		}()
		eventually(t, 5*time.Second, "the waiter subscribed", func() bool {
			return localWaiters(waiter, waiter.Mutex(name).channel) == 1
		})
		migrating(t, name)
		require.NoError(t, holder.Mutex(name).Unlock(hctx))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the unlock did not wake the waiter")
		}
	})

	// #4, the same cause: every release whose script named a channel as a
	// KEY was refused with TRYAGAIN while the slot was MIGRATING, the
	// keys it changes all still on the source.
	t.Run("releases while migrating", func(t *testing.T) {
		c := newClient(t, rc.Client(t))
		tag := "{" + nameOn(t, cc, rc.Masters[0], "rel") + "}"
		m, forced := c.Mutex(tag+"m"), c.Mutex(tag+"forced")
		mctx, err := m.Lock(bg)
		require.NoError(t, err)
		_, err = forced.Lock(bg)
		require.NoError(t, err)
		l := c.CountDownLatch(tag + "latch")
		_, err = l.TrySetCount(bg, 1)
		require.NoError(t, err)
		e := c.Election(tag + "elect")
		ectx, err := e.Campaign(bg, "me")
		require.NoError(t, err)
		s := c.Semaphore(tag + "sem")
		require.NoError(t, s.SetPermits(bg, 2))
		sctx, err := s.Acquire(bg, 1)
		require.NoError(t, err)
		ml := c.MultiLock([]string{tag + "a", tag + "b"})
		mlctx, err := ml.Lock(bg)
		require.NoError(t, err)

		mig := migrating(t, tag)
		assert.NoError(t, m.Unlock(mctx), "Mutex.Unlock")
		ok, err := forced.ForceUnlock(bg)
		assert.NoError(t, err, "Mutex.ForceUnlock")
		assert.True(t, ok, "Mutex.ForceUnlock")
		assert.NoError(t, l.CountDown(bg), "CountDownLatch.CountDown")
		assert.NoError(t, e.Resign(ectx), "Election.Resign")
		assert.NoError(t, s.Release(sctx, 1), "Semaphore.Release")
		assert.NoError(t, ml.Unlock(mlctx), "MultiLock.Unlock")

		if t.Failed() {
			return
		}
		// What is left is read once the slot has moved: a read of keys
		// some of which are gone (an Election's hash, its term counter
		// kept) is refused with TRYAGAIN until then.
		mig.Finish(t)
		for _, name := range []string{"m", "forced", "a", "b"} {
			locked, err := c.Mutex(tag + name).IsLocked(bg)
			require.NoError(t, err)
			require.False(t, locked, name)
		}
		n, err := l.Count(bg)
		require.NoError(t, err)
		require.Zero(t, n, "counted down")
		leader, err := e.Leader(bg)
		require.NoError(t, err)
		require.Zero(t, leader.Term, "nobody leads")
		free, err := s.Available(bg)
		require.NoError(t, err)
		require.Equal(t, 2, free, "the permit is back")
	})

	// #4: a script on several keys, some of which are missing on the
	// source (an RWMutex's writer holds only its hash; a fencing counter
	// lives on while its lock is free), is refused with TRYAGAIN until the
	// migration ends: the transport sends it again, within the call's
	// bound, releases included.
	t.Run("TRYAGAIN ridden out", func(t *testing.T) {
		c := newClient(t, rc.Client(t))
		tag := nameOn(t, cc, rc.Masters[0], "again")
		rw, fenced := c.RWMutex("{"+tag+"}rw"), c.Mutex("{"+tag+"}fenced", WithFencing())
		wctx, err := rw.Lock(bg)
		require.NoError(t, err)
		fctx, err := fenced.Lock(bg)
		require.NoError(t, err)
		token, _ := fenced.Token(fctx)
		require.NoError(t, fenced.Unlock(fctx)) // its counter stays
		mig := migrating(t, tag)

		unlocked := make(chan error, 1)
		go func() { unlocked <- rw.Unlock(wctx) }()
		type result struct {
			ctx context.Context
			err error
		}
		tried := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			defer cancel()
			fctx, err := fenced.TryLock(ctx)
			tried <- result{fctx, err}
		}()
		time.Sleep(300 * time.Millisecond)
		mig.Finish(t)
		r := <-tried
		require.NoError(t, r.err, "a fenced TryLock of a free lock whose counter is on the source")
		next, _ := fenced.Token(r.ctx)
		assert.Greater(t, next, token)
		require.NoError(t, <-unlocked, "the RWMutex's Unlock")
		locked, err := rw.IsLocked(bg)
		require.NoError(t, err)
		assert.False(t, locked, "released")
		require.NoError(t, fenced.Unlock(r.ctx))
	})

	// A waiter is woken by an unlock that runs on the target (the lock's
	// key was MIGRATEd, the slot still migrates): at once in classic mode,
	// where PUBLISH reaches every node. In sharded mode the waiter is
	// subscribed on the source, which serves the channel until the
	// migration ends, and the target's SPUBLISH reaches nobody there: the
	// waiter looks again when the end of the migration moves its channel
	// (its wait is bounded by then), not after the holder's 30 s lease.
	t.Run("wake-up after the key moved", func(t *testing.T) {
		for _, mode := range []PubSubMode{PubSubClassic, PubSubSharded} {
			holder := newClient(t, rc.Client(t), WithPubSub(mode))
			waiter := newClient(t, rc.Client(t), WithPubSub(mode))
			name := nameOn(t, cc, rc.Masters[0], "wake")
			hctx, err := holder.Mutex(name).Lock(bg)
			require.NoError(t, err)
			got := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(bg, 20*time.Second)
				defer cancel()
				wctx, err := waiter.Mutex(name).Lock(ctx)
				if err == nil {
					err = waiter.Mutex(name).Unlock(wctx)
				}
				got <- err
			}()
			channel := waiter.Mutex(name).channel
			eventually(t, 5*time.Second, "the waiter subscribed", func() bool {
				ch, ok := waiter.ps.Channel(channel)
				return ok && ch.Waiters == 1 && ch.Subscribed
			})
			mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], name), rc.Masters[1])
			mig.Move(t, name)
			start := time.Now()
			require.NoError(t, holder.Mutex(name).Unlock(hctx), mode)
			if mode == PubSubSharded {
				time.Sleep(300 * time.Millisecond)
				mig.Finish(t)
			}
			select {
			case err := <-got:
				require.NoError(t, err)
				t.Logf("%v: the waiter acquired %v after the unlock", mode, time.Since(start))
			case <-time.After(5 * time.Second):
				t.Errorf("%v: the waiter was not woken", mode)
			}
			if mode == PubSubClassic {
				mig.Finish(t)
			}
		}
	})
}
