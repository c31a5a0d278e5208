package redisync

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// forceKind is a lock a ForceUnlock frees, for the tests of ForceUnlock's
// bookkeeping; ops returns its handle's calls through c.
type forceKind struct {
	kind   string
	script *lua.Script // ForceUnlock's
	ops    func(c *Client, name string) forceOps
}

// forceOps are the calls of a lock handle: lock takes it (a read hold for
// "rw read", a MultiLock on the name and another for "multilock"), try
// takes it exclusively without waiting, untry releases what try took.
type forceOps struct {
	lock, try     func(context.Context) (context.Context, error)
	unlock, untry func(context.Context) error
	force         func(context.Context) (bool, error)
}

var forceKinds = []forceKind{
	{"mutex", lua.ForceUnlock, func(c *Client, n string) forceOps {
		m := c.Mutex(n)
		return forceOps{m.Lock, m.TryLock, m.Unlock, m.Unlock, m.ForceUnlock}
	}},
	{"fair", lua.FairForceUnlock, func(c *Client, n string) forceOps {
		f := c.FairMutex(n)
		return forceOps{f.Lock, f.TryLock, f.Unlock, f.Unlock, f.ForceUnlock}
	}},
	{"rw write", lua.RWForce, func(c *Client, n string) forceOps {
		r := c.RWMutex(n)
		return forceOps{r.Lock, r.TryLock, r.Unlock, r.Unlock, r.ForceUnlock}
	}},
	{"rw read", lua.RWForce, func(c *Client, n string) forceOps {
		r := c.RWMutex(n)
		return forceOps{r.RLock, r.TryLock, r.RUnlock, r.Unlock, r.ForceUnlock}
	}},
	// A MultiLock whose names include the Mutex force-unlocked.
	{"multilock", lua.ForceUnlock, func(c *Client, n string) forceOps {
		m, ml := c.Mutex(n), c.MultiLock([]string{n, n + "-other"})
		return forceOps{ml.Lock, m.TryLock, ml.Unlock, m.Unlock, m.ForceUnlock}
	}},
}

// A ForceUnlock whose caller leaves before its script has run must not
// leave its Client trusting new grants of the lock: the script still
// frees whatever holds the lock when it runs. Here the script reaches
// Redis 600ms late, its caller leaves after 50ms, and the same Client
// then takes the lock: either that hold is not granted before the script
// has run, or it is ended before another Client can take the lock (while
// its context is live, nobody else holds the lock).
func TestForceUnlockLeftEarlyKeepsGrantsUntrusted(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const delay = 600 * time.Millisecond
	for _, k := range forceKinds {
		t.Run(k.kind, func(t *testing.T) {
			t.Parallel()
			e := realEnv(t)
			bg := context.Background()
			admin := e.rdb(t)
			rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
			c := newClient(t, rdb)
			other := e.client(t)
			mine, theirs := k.ops(c, "force-left"), k.ops(other, "force-left")
			require.NoError(t, k.script.Load(bg, admin).Err()) // the EVALSHA is the one delayed
			slow := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(k.script.Script), Times: 1,
				Action: faultproxy.DelayBefore(delay)})

			fctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := mine.force(fctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, 1, slow.Fired())

			lctx, cancelL := context.WithTimeout(bg, 5*time.Second)
			defer cancelL()
			hctx, err := mine.lock(lctx)
			require.NoError(t, err)
			t.Logf("the Lock after the ForceUnlock that left returned after %v", time.Since(start).Round(time.Millisecond))

			// The script has surely run (and answered) well before the end.
			for until := start.Add(delay + 500*time.Millisecond); time.Now().Before(until); {
				octx, err := theirs.try(bg)
				if err == nil {
					if hctx.Err() == nil {
						t.Errorf("another Client took the lock while the hold taken after the ForceUnlock that left is live: two live holders")
					}
					assert.NoError(t, theirs.untry(octx))
					break
				}
				assert.ErrorIs(t, err, ErrNotAcquired)
				time.Sleep(10 * time.Millisecond)
			}
			_ = mine.unlock(hctx)
		})
	}
}

// forceOrderRound runs one round of the FairMutex order test: c's first
// goroutine holds the lock, a second waits at the head of the queue, a
// waiter of another Client queues behind it, then c force-unlocks. It
// reports whether the head got the lock first.
func forceOrderRound(t *testing.T, admin *redis.Client, c, o *Client, name string) bool {
	bg := context.Background()
	f := c.FairMutex(name)
	hctx, err := f.Lock(bg)
	require.NoError(t, err)
	var seq atomic.Int32
	type res struct{ n int32 }
	wait := func(m *FairMutex) <-chan res {
		ch := make(chan res, 1)
		go func() {
			ctx, cancel := context.WithTimeout(bg, 5*time.Second)
			defer cancel()
			wctx, err := m.Lock(ctx)
			if !assert.NoError(t, err) {
				ch <- res{-1}
				return
			}
			n := seq.Add(1)
			time.Sleep(5 * time.Millisecond)
			assert.NoError(t, m.Unlock(wctx))
			ch <- res{n}
		}()
		return ch
	}
	queued := func(n int64) func() bool {
		return func() bool { q, err := admin.ZCard(bg, f.queue).Result(); return err == nil && q == n }
	}
	head := wait(f)
	eventually(t, 2*time.Second, "the head queued", queued(1))
	next := wait(o.FairMutex(name))
	eventually(t, 2*time.Second, "the next waiter queued", queued(2))
	freed, err := f.ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, freed)
	assert.ErrorIs(t, context.Cause(hctx), ErrLeaseLost)
	h, n := <-head, <-next
	return h.n == 1 && n.n == 2
}

// A ForceUnlock from the Client whose own waiter heads a FairMutex's
// queue hands the lock to that waiter: the force script wakes it, and its
// grant (sent after the script ran) is its own, not one the ForceUnlock
// may have freed; the waiter behind it, in another Client, comes second.
func TestForceUnlockKeepsFairOrder(t *testing.T) {
	e := realEnv(t)
	admin := e.rdb(t)
	c, o := e.client(t), e.client(t)
	const rounds = 20
	broken := 0
	for i := range rounds {
		if !forceOrderRound(t, admin, c, o, "force-order-"+string(rune('a'+i))) {
			broken++
		}
	}
	if broken > 0 {
		t.Errorf("the queue's order broke in %d of %d rounds: the head woken by the ForceUnlock came second", broken, rounds)
	}
}

// The same on an RWMutex: c's writer waits (registered, which keeps new
// readers out), a reader of another Client comes after it, and c
// force-unlocks the write hold: the writer gets the lock first.
func TestForceUnlockKeepsWriterBeforeLaterReader(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	admin := e.rdb(t)
	c, o := e.client(t), e.client(t)
	const rounds = 20
	broken := 0
	for i := range rounds {
		r := c.RWMutex("force-rw-" + string(rune('a'+i)))
		hctx, err := r.Lock(bg)
		require.NoError(t, err)
		var seq atomic.Int32
		run := func(lock func(context.Context) (context.Context, error), unlock func(context.Context) error) <-chan int32 {
			ch := make(chan int32, 1)
			go func() {
				ctx, cancel := context.WithTimeout(bg, 5*time.Second)
				defer cancel()
				lctx, err := lock(ctx)
				if !assert.NoError(t, err) {
					ch <- -1
					return
				}
				n := seq.Add(1)
				time.Sleep(5 * time.Millisecond)
				assert.NoError(t, unlock(lctx))
				ch <- n
			}()
			return ch
		}
		w := run(r.Lock, r.Unlock)
		eventually(t, 2*time.Second, "the writer registered", func() bool {
			n, err := admin.ZCard(bg, r.keys[2]).Result()
			return err == nil && n == 1
		})
		or := o.RWMutex(r.name)
		rd := run(or.RLock, or.RUnlock)
		eventually(t, 2*time.Second, "the reader waiting", func() bool {
			n, err := admin.PubSubNumSub(bg, r.rchan).Result()
			return err == nil && n[r.rchan] == 1
		})
		freed, err := r.ForceUnlock(bg)
		require.NoError(t, err)
		require.True(t, freed)
		assert.ErrorIs(t, context.Cause(hctx), ErrLeaseLost)
		if wn, rn := <-w, <-rd; wn != 1 || rn != 2 {
			broken++
		}
	}
	if broken > 0 {
		t.Errorf("a reader that came after a waiting writer got the lock first in %d of %d rounds", broken, rounds)
	}
}
