package redisync

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
)

// multiNames are the names of the MultiLock of the API tests for name: name
// itself (which the rival, a Mutex, takes) between two others.
func multiNames(name string) []string { return []string{name + ":z", name, name + ":a"} }

// multiHoldName is HoldEvent.Name of multiOps's MultiLock.
func multiHoldName(name string) string { return multiRef([]string{name, name + ":a", name + ":z"}) }

// multiOps holds a MultiLock whose names include name (see apiKinds: its
// rival is a Mutex of name).
func multiOps(t *testing.T, c *Client, name string) apiOps {
	m := c.MultiLock(multiNames(name))
	require.NoError(t, m.err)
	return apiOps{
		lock: m.Lock, try: m.TryLock, tryFor: m.TryLockFor, unlock: m.Unlock, do: m.Do, doFor: m.DoFor,
		count: func(ctx context.Context) int {
			h := holds.Held(ctx, m.spec.Ref)
			if h == nil {
				return 0
			}
			// The hold's count is the least of its names' (a name freed
			// by a ForceUnlock elsewhere has none): every name that has
			// the field has the same count.
			n, held := -1, -1
			for _, key := range m.names {
				v, err := c.rdb.HGet(context.Background(), key, h.Field).Int()
				if isNil(err) {
					v, err = 0, nil
				}
				assert.NoError(t, err)
				if v > 0 && held >= 0 {
					assert.Equal(t, held, v, "the count of %q", key)
				}
				if v > 0 {
					held = v
				}
				if n < 0 || v < n {
					n = v
				}
			}
			return n
		},
		busy: func() bool {
			for _, key := range m.names {
				n, err := c.rdb.Exists(context.Background(), key).Result()
				assert.NoError(t, err)
				if n > 0 {
					return true
				}
			}
			return false
		},
	}
}

// The MultiLock's own rules, on miniredis and a real server.
func TestMultiLockBasics(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c1, c2 := e.client(t), e.client(t)
		rdb := e.rdb(t)
		names := []string{"ml:c", "ml:a", "ml:b"}
		m1 := c1.MultiLock(names)
		assert.Equal(t, []string{"ml:a", "ml:b", "ml:c"}, m1.Names())

		lctx, err := m1.Lock(bg)
		require.NoError(t, err)
		h := holds.Held(lctx, m1.spec.Ref)
		require.NotNil(t, h)
		for _, n := range names {
			// Redisson's RLock format: field <uuid>:<n> -> count, a lease.
			v, err := rdb.HGetAll(bg, n).Result()
			require.NoError(t, err)
			assert.Equal(t, map[string]string{h.Field: "1"}, v, n)
			ttl, err := rdb.PTTL(bg, n).Result()
			require.NoError(t, err)
			assert.Greater(t, ttl, 20*time.Second)
		}

		// Excludes Mutexes of its names, and itself from other owners
		// (another Client, or the same one without the hold).
		for _, n := range names {
			_, err := c2.Mutex(n).TryLock(bg)
			assert.ErrorIs(t, err, ErrNotAcquired, n)
		}
		_, err = c2.MultiLock([]string{"ml:b", "ml:x"}).TryLock(bg)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Equal(t, int64(0), rdb.Exists(bg, "ml:x").Val(), "a refused MultiLock takes none of its names")
		_, err = m1.TryLock(bg)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.Contains(t, err.Error(), `multilock "ml:a", "ml:b", "ml:c": not acquired`)

		// Re-entry through its context, in any order of the names;
		// every name counts it.
		rctx, err := c1.MultiLock([]string{"ml:b", "ml:c", "ml:a"}).Lock(lctx)
		require.NoError(t, err)
		for _, n := range names {
			assert.Equal(t, "2", rdb.HGet(bg, n, h.Field).Val(), n)
		}
		// A Mutex of one of its names is another lock: not re-entered.
		_, err = c1.Mutex("ml:a").TryLock(lctx)
		assert.ErrorIs(t, err, ErrNotAcquired)

		require.NoError(t, m1.Unlock(rctx))
		for _, n := range names {
			assert.Equal(t, "1", rdb.HGet(bg, n, h.Field).Val(), n)
		}
		assert.NoError(t, lctx.Err())

		// A waiter on another Client is woken by the last Unlock.
		got := make(chan error, 1)
		go func() {
			wctx, err := c2.MultiLock([]string{"ml:a", "ml:y"}).Lock(bg)
			if err == nil {
				err = c2.MultiLock([]string{"ml:y", "ml:a"}).Unlock(wctx)
			}
			got <- err
		}()
		eventually(t, 2*time.Second, "the waiter to wait", func() bool { return localWaiters(c2, multiChannel("ml:a")) == 1 })
		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, m1.Unlock(lctx))
		assert.Error(t, lctx.Err())
		select {
		case err := <-got:
			require.NoError(t, err)
			assert.Less(t, time.Since(start), time.Second+lag.Slack(),
				"woken by the unlock message, not the 30s lease (the machine's worst delay meanwhile: %v)", lag.Worst())
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter was not woken")
		}
		assert.Empty(t, e.keys(t), "nothing left in Redis")
		assert.ErrorIs(t, m1.Unlock(lctx), ErrNotHeld)
		assert.ErrorIs(t, m1.Unlock(bg), ErrNotHeld)
	})
}

// Bad input is refused with ErrInvalid, by every method, never a panic.
func TestMultiLockInvalid(t *testing.T) {
	e := miniEnv(t)
	c := e.client(t)
	bg := context.Background()
	for name, m := range map[string]*MultiLock{
		"nil names":                             c.MultiLock(nil),
		"no names":                              c.MultiLock([]string{}),
		"an empty name":                         c.MultiLock([]string{"a", ""}),
		"a name twice":                          c.MultiLock([]string{"a", "b", "a"}),
		"WithFencing, a name without a counter": c.MultiLock([]string{"a", "b}c"}, WithFencing()),
		"a bad lease":                           c.MultiLock([]string{"a"}, WithLease(-1)),
		"a nil option":                          c.MultiLock([]string{"a"}, nil),
		"a companion key":                       c.MultiLock([]string{"a", fenceKey("b")}),
		"a nil Client":                          (*Client)(nil).MultiLock([]string{"a"}),
	} {
		_, err := m.Lock(bg)
		assert.ErrorIs(t, err, ErrInvalid, name)
		_, err = m.TryLock(bg)
		assert.ErrorIs(t, err, ErrInvalid, name)
		_, err = m.TryLockFor(bg, time.Second)
		assert.ErrorIs(t, err, ErrInvalid, name)
		assert.ErrorIs(t, m.Unlock(bg), ErrInvalid, name)
	}
	m := c.MultiLock([]string{"a"})
	_, err := m.TryLockFor(bg, 0)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = m.Lock(nil) //nolint:staticcheck // a nil context is refused
	assert.ErrorIs(t, err, ErrInvalid)
	var zero *MultiLock
	_, err = zero.Lock(bg)
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = (&MultiLock{}).Lock(bg)
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Empty(t, e.keys(t))
}

// A partial acquisition is given back before waiting: while a MultiLock
// waits for its last name, the names before it are free (a Mutex of them
// can be taken), and Lock takes everything once the last is freed.
func TestMultiLockWaitsHoldingNothing(t *testing.T) {
	srv := realEnv(t)
	bg := context.Background()
	c1, c2 := srv.client(t), srv.client(t)
	held, err := c2.Mutex("wait:z").Lock(bg)
	require.NoError(t, err)
	got := make(chan error, 1)
	var mctx context.Context
	go func() {
		var err error
		mctx, err = c1.MultiLock([]string{"wait:a", "wait:b", "wait:z"}).Lock(bg)
		got <- err
	}()
	eventually(t, 2*time.Second, "the MultiLock to wait on wait:z", func() bool {
		return localWaiters(c1, multiChannel("wait:z")) == 1
	})
	for _, n := range []string{"wait:a", "wait:b"} {
		hctx, err := c2.Mutex(n).TryLock(bg)
		require.NoError(t, err, "%s is free while the MultiLock waits", n)
		require.NoError(t, c2.Mutex(n).Unlock(hctx))
	}
	lag := watchLag(t)
	start := time.Now()
	require.NoError(t, c2.Mutex("wait:z").Unlock(held))
	select {
	case err := <-got:
		require.NoError(t, err)
		// Not woken, it would wait for its lease-bound re-check.
		assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}
	require.NoError(t, c1.MultiLock([]string{"wait:a", "wait:b", "wait:z"}).Unlock(mctx))

	// TryLockFor: bounded, and nothing left behind.
	held, err = c2.Mutex("wait:b").Lock(bg)
	require.NoError(t, err)
	start = time.Now()
	_, err = c1.MultiLock([]string{"wait:a", "wait:b"}).TryLockFor(bg, 200*time.Millisecond)
	assert.ErrorIs(t, err, ErrNotAcquired)
	assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	assert.Equal(t, []string{"wait:b"}, srv.keys(t))
	require.NoError(t, c2.Mutex("wait:b").Unlock(held))
}

// Losing any name ends the hold, with ErrLeaseLost, and gives back the
// others; a hold whose context ends is released whole.
func TestMultiLockLoss(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t, WithWatchdogTimeout(300*time.Millisecond))
		rdb := e.rdb(t)
		names := []string{"loss:a", "loss:b", "loss:c"}
		m := c.MultiLock(names)
		lctx, err := m.Lock(bg)
		require.NoError(t, err)
		require.NoError(t, rdb.Del(bg, "loss:b").Err()) // lost in Redis
		select {
		case <-lctx.Done():
		case <-time.After(2 * time.Second):
			t.Fatal("the hold outlived the loss of one of its names")
		}
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost)
		eventually(t, 2*time.Second, "the other names to be given back", func() bool {
			return len(e.keys(t)) == 0
		})
		err = m.Unlock(lctx)
		assert.ErrorIs(t, err, ErrNotHeld)
		assert.ErrorIs(t, err, ErrLeaseLost)

		// Re-entry finds it lost too.
		lctx, err = m.Lock(bg)
		require.NoError(t, err)
		require.NoError(t, rdb.Del(bg, "loss:c").Err())
		_, err = m.Lock(lctx)
		assert.ErrorIs(t, err, ErrLeaseLost)
		assert.Error(t, lctx.Err())
		eventually(t, 2*time.Second, "the other names to be given back", func() bool {
			return len(e.keys(t)) == 0
		})

		// A last Unlock that finds one name gone (deleted behind the
		// holder's back, before its deadline) frees the others, and tells
		// the loss, as a Mutex's does.
		c3 := e.client(t)
		lctx, err = c3.MultiLock(names).Lock(bg)
		require.NoError(t, err)
		require.NoError(t, rdb.Del(bg, "loss:a").Err())
		assert.ErrorIs(t, c3.MultiLock(names).Unlock(lctx), ErrLeaseLost)
		assert.Empty(t, e.keys(t))

		// The context it was taken with ends: released at once.
		ctx, cancel := context.WithCancel(bg)
		lctx, err = m.Lock(ctx)
		require.NoError(t, err)
		cancel()
		<-lctx.Done()
		eventually(t, time.Second, "the names to be released", func() bool { return len(e.keys(t)) == 0 })
		assert.NoError(t, m.Unlock(lctx))

		// Close releases it.
		c2 := e.client(t)
		lctx, err = c2.MultiLock(names).Lock(bg)
		require.NoError(t, err)
		require.NoError(t, c2.Close())
		assert.ErrorIs(t, context.Cause(lctx), ErrClosed)
		assert.Empty(t, e.keys(t))
	})
}

// A ForceUnlock of one of its names, in its own process, ends a
// MultiLock's hold before the name is free, and gives back the others.
func TestMultiLockForceUnlockOfAName(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		lctx, err := c.MultiLock([]string{"force:a", "force:b"}).Lock(bg)
		require.NoError(t, err)
		ok, err := c.Mutex("force:b").ForceUnlock(bg)
		require.NoError(t, err)
		assert.True(t, ok)
		assert.ErrorIs(t, context.Cause(lctx), ErrLeaseLost, "told before ForceUnlock returned")
		eventually(t, time.Second, "force:a to be given back", func() bool { return len(e.keys(t)) == 0 })
	})
}

// namesBySlot returns n names, each in a slot of its own, spread over the
// masters of cc, and prefix-tagged names that share one slot.
func clusterMultiNames(t *testing.T, cc *redis.ClusterClient, n int) []string {
	t.Helper()
	names := namesOnEveryShard(t, cc, (n+2)/3)[:n]
	return append(names, "{ml}:x", "{ml}:y")
}

// On a Cluster the names are grouped by slot, one script per slot, in the
// order of their slots, and a Mutex of any name excludes the MultiLock.
func TestMultiLockCluster(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistestCluster(t)
	cc := cl.Client(t)
	bg := context.Background()
	c1, c2 := newClient(t, cc), newClient(t, cl.Client(t))
	names := clusterMultiNames(t, cc, 6)
	m := c1.MultiLock(names)
	require.NoError(t, m.err)
	require.Len(t, m.groups, 7, "six slots of their own, and {ml}'s")
	for i, g := range m.groups {
		for _, k := range g.keys {
			require.Equal(t, g.slot, keys.Slot(k))
			slot, err := cc.ClusterKeySlot(bg, k).Result()
			require.NoError(t, err)
			require.Equal(t, int64(g.slot), slot, k)
		}
		if i > 0 {
			require.Less(t, m.groups[i-1].slot, g.slot)
		}
	}
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	for _, n := range names {
		_, err := c2.Mutex(n).TryLock(bg)
		assert.ErrorIs(t, err, ErrNotAcquired, n)
	}
	rctx, err := m.Lock(lctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(rctx))

	// The holder's lease is kept by one renewal per slot.
	h := holds.Held(lctx, m.spec.Ref)
	require.Len(t, h.Renew, 7)
	require.Len(t, h.Release, 7)

	// A waiter blocked in a late slot holds nothing meanwhile.
	require.NoError(t, m.Unlock(lctx))
	last := m.groups[len(m.groups)-1].keys[0]
	mctx, err := c2.Mutex(last).Lock(bg)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		hctx, err := m.Lock(bg)
		if err == nil {
			err = m.Unlock(hctx)
		}
		got <- err
	}()
	eventually(t, 3*time.Second, "the MultiLock to wait", func() bool { return localWaiters(c1, multiChannel(last)) == 1 })
	// It tries once more when its subscription is confirmed, taking the
	// names before the last for a moment: then it holds none of them.
	eventually(t, 2*time.Second, "the names before the last to be free while the MultiLock waits", func() bool {
		for _, n := range names {
			if n != last && cc.Exists(bg, n).Val() != 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(100 * time.Millisecond)
	for _, n := range names {
		if n != last {
			assert.Zero(t, cc.Exists(bg, n).Val(), "%s is held while the MultiLock waits", n)
		}
	}
	lag := watchLag(t)
	start := time.Now()
	require.NoError(t, c2.Mutex(last).Unlock(mctx))
	select {
	case err := <-got:
		require.NoError(t, err)
		assert.Less(t, time.Since(start), time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}
	for _, n := range names {
		assert.Zero(t, cc.Exists(bg, n).Val(), n)
	}

	// Names of one slot only: one group, one script.
	one := c1.MultiLock([]string{"{ml}:x", "{ml}:y", "{ml}:z"})
	require.Len(t, one.groups, 1)
	lctx, err = one.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, one.Unlock(lctx))
}

// MultiLocks over overlapping sets of names, and Mutexes of some of them,
// on several Clients: never two holders of one name at once, and no
// deadlock: every goroutine keeps getting its locks.
func TestMultiLockContention(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	t.Run("redis", func(t *testing.T) {
		e := realEnv(t)
		var names []string
		for i := range 6 {
			names = append(names, "mc:"+strconv.Itoa(i))
		}
		multiContention(t, func() *Client { return e.client(t) }, names)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistestCluster(t)
		names := clusterMultiNames(t, cl.Client(t), 5)
		multiContention(t, func() *Client { return newClient(t, cl.Client(t)) }, names)
	})
}

// multiContention runs until every goroutine has had enough holds to show
// it is not starved (each), or until the goroutines together have had so
// many that one with none is starved (most), or, on a machine too slow for
// either, until run: counted in holds, not in seconds, as a busy machine
// slows every goroutine alike (3s once saw 9 holds in all).
func multiContention(t *testing.T, client func() *Client, names []string) {
	const clients, perClient = 3, 3
	const each, most = 10, 3000
	const run = time.Minute
	owners := make([]atomic.Int32, len(names))
	var overlaps atomic.Int32
	take := func(idx []int, who int32) {
		for _, i := range idx {
			if !owners[i].CompareAndSwap(0, who) {
				overlaps.Add(1)
				t.Errorf("%s held by %d and %d at once", names[i], owners[i].Load(), who)
			}
		}
	}
	give := func(idx []int, who int32) {
		for _, i := range idx {
			owners[i].CompareAndSwap(who, 0)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	wins := make([]atomic.Int32, clients*perClient+1)
	go func() { // ends the run
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			least, total := int32(most), int32(0)
			for i := range wins {
				least = min(least, wins[i].Load())
				total += wins[i].Load()
			}
			if least >= each || total >= most {
				cancel()
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for g := range clients * perClient {
		c := client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := int32(g + 1)
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for ctx.Err() == nil {
				// 2 to 4 of the names, picked at random.
				idx := rng.Perm(len(names))[:2+rng.IntN(3)]
				set := make([]string, len(idx))
				for i, x := range idx {
					set[i] = names[x]
				}
				m := c.MultiLock(set)
				lctx, err := m.Lock(ctx)
				if err != nil {
					require.ErrorIs(t, err, ctx.Err(), "the run ended")
					return
				}
				take(idx, who)
				wins[g].Add(1)
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
				give(idx, who)
				require.NoError(t, m.Unlock(lctx))
			}
		}()
	}
	// A Mutex of the first name, on a Client of its own.
	c := client()
	wg.Add(1)
	go func() {
		defer wg.Done()
		who := int32(len(wins))
		m := c.Mutex(names[0])
		for ctx.Err() == nil {
			lctx, err := m.Lock(ctx)
			if err != nil {
				return
			}
			take([]int{0}, who)
			wins[len(wins)-1].Add(1)
			time.Sleep(time.Millisecond)
			give([]int{0}, who)
			require.NoError(t, m.Unlock(lctx))
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(run + 30*time.Second):
		t.Fatal("deadlock: the goroutines did not stop")
	}
	total := 0
	var got []int32
	for i := range wins {
		n := wins[i].Load()
		got = append(got, n)
		total += int(n)
	}
	t.Logf("%d holds in %v, per goroutine %v", total, time.Since(start), got)
	assert.Zero(t, overlaps.Load())
	for i, n := range got {
		assert.NotZero(t, n, "goroutine %d never got its locks", i)
	}
}

// nolint helpers
var _ = errors.Is
var _ = fmt.Sprint

// A MultiLock waiting in a Client whose goroutines keep handing a Mutex of
// one of its names to each other (cohort handoff) still gets its turn.
// Counted in holds, not seconds: the run ends when the MultiLock has had
// enough (a quiet machine: ~1 for every 8 of the Mutex's), or when the
// Mutex's goroutines have had so many that it starved (a busy machine
// slows both alike: 2s once saw 20 and 7).
func TestMultiLockNotStarvedByHandoffs(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	c := e.client(t)
	const enough, starved = 20, 1000
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mutexWins, multiWins atomic.Int32
	go func() { // ends the run
		for ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			if multiWins.Load() >= enough || mutexWins.Load() >= starved {
				cancel()
			}
		}
	}()
	start := time.Now()
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.Mutex("starve:x")
			for ctx.Err() == nil {
				lctx, err := m.Lock(ctx)
				if err != nil {
					return
				}
				mutexWins.Add(1)
				time.Sleep(200 * time.Microsecond)
				_ = m.Unlock(lctx)
			}
		}()
	}
	var worst time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		m := c.MultiLock([]string{"starve:x", "starve:y"})
		for ctx.Err() == nil {
			start := time.Now()
			lctx, err := m.Lock(ctx)
			if err != nil {
				return
			}
			worst = max(worst, time.Since(start))
			multiWins.Add(1)
			_ = m.Unlock(lctx)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	wg.Wait()
	t.Logf("in %v: Mutex %d holds, MultiLock %d (longest wait %v)", time.Since(start), mutexWins.Load(), multiWins.Load(), worst)
	assert.GreaterOrEqual(t, multiWins.Load(), int32(enough), "the MultiLock starved")
}
