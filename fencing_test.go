package redisync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/keys"
)

// fenced is one kind of lock that takes WithFencing, seen through the
// calls the fencing tests make.
type fenced struct {
	kind   string
	lock   func(ctx context.Context) (context.Context, error)
	try    func(ctx context.Context) (context.Context, error)
	unlock func(ctx context.Context) error
	force  func(ctx context.Context) (bool, error)
	token  func(ctx context.Context) (int64, bool)
}

var fencedKinds = []string{"mutex", "fair", "rw"}

// fencedLock returns the lock of kind named name on c (for "rw", its
// write lock).
func fencedLock(c *Client, kind, name string, opts ...anyOpt) fenced {
	switch kind {
	case "mutex":
		m := c.Mutex(name, as[MutexOption](opts)...)
		return fenced{kind, m.Lock, m.TryLock, m.Unlock, m.ForceUnlock, m.Token}
	case "fair":
		f := c.FairMutex(name, as[FairOption](opts)...)
		return fenced{kind, f.Lock, f.TryLock, f.Unlock, f.ForceUnlock, f.Token}
	case "rw":
		r := c.RWMutex(name, as[RWOption](opts)...)
		return fenced{kind, r.Lock, r.TryLock, r.Unlock, r.ForceUnlock, r.Token}
	}
	panic("unknown kind " + kind)
}

// fenceCounter reads a lock's fencing counter in Redis, and its PTTL.
func fenceCounter(t testing.TB, rdb *redis.Client, name string) (int64, time.Duration) {
	t.Helper()
	bg := context.Background()
	k := keys.Companion(name, "fence")
	n, err := rdb.Get(bg, k).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, -2
	}
	require.NoError(t, err)
	ttl, err := rdb.PTTL(bg, k).Result()
	require.NoError(t, err)
	return n, ttl
}

// Tokens strictly increase across holders: several clients (processes)
// and many goroutines contend for one fenced lock; every holder reads its
// token and, under the lock, finds it above every token seen before and
// equal to the counter in Redis. A re-entry keeps the token. (That failed
// attempts cost no token is TestFencingCounterSurvives's.)
func TestFencingTokensIncrease(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		for _, kind := range fencedKinds {
			t.Run(kind, func(t *testing.T) {
				name := "fence:inc:" + kind
				rdb := e.rdb(t)
				const clients, workers, rounds = 3, 4, 12
				var last atomic.Int64
				var holds atomic.Int64
				seen := sync.Map{}
				var wg sync.WaitGroup
				for i := 0; i < clients; i++ {
					c := e.client(t)
					for w := 0; w < workers; w++ {
						wg.Add(1)
						go func() {
							defer wg.Done()
							l := fencedLock(c, kind, name, WithFencing())
							for r := 0; r < rounds; r++ {
								lctx, err := l.lock(context.Background())
								if !assert.NoError(t, err) {
									return
								}
								holds.Add(1)
								tok, ok := l.token(lctx)
								assert.True(t, ok, "a fenced hold has a token")
								if prev := last.Swap(tok); tok <= prev {
									t.Errorf("token %d after %d: not increasing", tok, prev)
								}
								if _, dup := seen.LoadOrStore(tok, true); dup {
									t.Errorf("token %d given twice", tok)
								}
								n, _ := fenceCounter(t, rdb, name)
								assert.Equal(t, tok, n, "the counter in Redis is the holder's token")
								re, err := l.lock(lctx)
								if assert.NoError(t, err, "re-entry") {
									rt, ok := l.token(re)
									assert.True(t, ok)
									assert.Equal(t, tok, rt, "a re-entry keeps the token")
									assert.NoError(t, l.unlock(re))
								}
								assert.NoError(t, l.unlock(lctx))
							}
						}()
					}
				}
				wg.Wait()
				n, ttl := fenceCounter(t, rdb, name)
				assert.Equal(t, last.Load(), n, "the counter is the last token given")
				distinct := 0
				seen.Range(func(any, any) bool { distinct++; return true })
				assert.Equal(t, int(holds.Load()), distinct, "one token per first acquisition")
				assert.Equal(t, int64(clients*workers*rounds), holds.Load())
				assert.Equal(t, time.Duration(-1), ttl, "the counter never expires")
			})
		}
	})
}

// The counter survives Unlock, ForceUnlock and lease expiry, never
// expires, and is not bumped by a refused TryLock; an unfenced lock of
// the same name leaves it alone.
func TestFencingCounterSurvives(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		for _, kind := range fencedKinds {
			t.Run(kind, func(t *testing.T) {
				bg := context.Background()
				name := "fence:survive:" + kind
				rdb := e.rdb(t)
				c1, c2 := e.client(t), e.client(t)
				a := fencedLock(c1, kind, name, WithFencing())
				b := fencedLock(c2, kind, name, WithFencing())
				plain := fencedLock(c2, kind, name)

				// Unlock.
				lctx, err := a.lock(bg)
				require.NoError(t, err)
				t1, ok := a.token(lctx)
				require.True(t, ok)
				now, err := rdb.Time(bg).Result()
				require.NoError(t, err)
				require.LessOrEqual(t, t1, now.UnixMicro(), "the first token is Redis's clock, in µs")
				require.Greater(t, t1, now.Add(-time.Minute).UnixMicro())
				_, err = b.try(bg)
				require.ErrorIs(t, err, ErrNotAcquired)
				n, ttl := fenceCounter(t, rdb, name)
				require.Equal(t, t1, n, "a refused TryLock costs no token")
				require.NoError(t, a.unlock(lctx))
				n, ttl = fenceCounter(t, rdb, name)
				require.Equal(t, t1, n, "Unlock keeps the counter")
				require.Equal(t, time.Duration(-1), ttl, "the counter has no expiry")

				// An unfenced hold of the same name does not touch it.
				pctx, err := plain.lock(bg)
				require.NoError(t, err)
				_, ok = plain.token(pctx)
				require.False(t, ok, "an unfenced hold has no token")
				require.NoError(t, plain.unlock(pctx))
				n, _ = fenceCounter(t, rdb, name)
				require.Equal(t, t1, n)

				// ForceUnlock.
				bctx, err := b.lock(bg)
				require.NoError(t, err)
				t2, _ := b.token(bctx)
				require.Greater(t, t2, t1)
				held, err := a.force(bg)
				require.NoError(t, err)
				require.True(t, held)
				n, ttl = fenceCounter(t, rdb, name)
				require.Equal(t, t2, n, "ForceUnlock keeps the counter")
				require.Equal(t, time.Duration(-1), ttl)
				lctx, err = a.lock(bg)
				require.NoError(t, err)
				t3, _ := a.token(lctx)
				require.Greater(t, t3, t2)
				require.NoError(t, a.unlock(lctx))

				// Lease expiry.
				const lease = 60 * time.Millisecond
				short := fencedLock(c2, kind, name, WithFencing(), WithLease(lease))
				sctx, err := short.lock(bg)
				require.NoError(t, err)
				t4, _ := short.token(sctx)
				require.Greater(t, t4, t3)
				<-sctx.Done()
				require.ErrorIs(t, context.Cause(sctx), ErrLeaseLost)
				if e.mr != nil {
					e.mr.FastForward(lease)
				}
				eventually(t, 5*time.Second, "the lease to run out in Redis", func() bool {
					ok, err := rdb.Exists(bg, name).Result()
					return err == nil && ok == 0
				})
				n, ttl = fenceCounter(t, rdb, name)
				require.Equal(t, t4, n, "lease expiry keeps the counter")
				require.Equal(t, time.Duration(-1), ttl)
				lctx, err = a.lock(bg)
				require.NoError(t, err)
				t5, _ := a.token(lctx)
				require.Greater(t, t5, t4)
				require.NoError(t, a.unlock(lctx))
			})
		}
	})
}

// What Token reports, and the options it is refused with.
func TestFencingTokenContract(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		for _, kind := range fencedKinds {
			t.Run(kind, func(t *testing.T) {
				name := "fence:contract:" + kind
				l := fencedLock(c, kind, name, WithFencing())
				_, ok := l.token(bg)
				assert.False(t, ok, "no hold, no token")

				lctx, err := l.lock(bg)
				require.NoError(t, err)
				tok, ok := l.token(lctx)
				require.True(t, ok)
				_, ok = l.token(WithOwner(lctx))
				assert.False(t, ok, "WithOwner starts another owner: no token")
				_, ok = fencedLock(c, kind, name+":other", WithFencing()).token(lctx)
				assert.False(t, ok, "a hold of another lock gives no token")
				got, ok := fencedLock(c, kind, name).token(lctx)
				assert.True(t, ok, "Token reads the hold, whatever handle asks")
				assert.Equal(t, tok, got)

				// A hold keeps the options it was taken with.
				_, err = fencedLock(c, kind, name).lock(lctx)
				assert.ErrorIs(t, err, ErrInvalid, "re-entry of a fenced hold through an unfenced handle")

				// After the hold has ended, ctx still carries it, and
				// its token: a fence value stays valid.
				require.NoError(t, l.unlock(lctx))
				require.Error(t, lctx.Err())
				got, ok = l.token(lctx)
				assert.True(t, ok, "the token of an ended hold is still reported")
				assert.Equal(t, tok, got)

				pctx, err := fencedLock(c, kind, name).lock(bg)
				require.NoError(t, err)
				_, err = l.lock(pctx)
				assert.ErrorIs(t, err, ErrInvalid, "re-entry of an unfenced hold through a fenced handle")
				require.NoError(t, fencedLock(c, kind, name).unlock(pctx))
			})
		}

		// Read holds have no token; a downgrade's read context still
		// carries the write hold it came from.
		r := c.RWMutex("fence:contract:rw-read", WithFencing())
		rctx, err := r.RLock(bg)
		require.NoError(t, err)
		_, ok := r.Token(rctx)
		assert.False(t, ok, "a read hold has no token")
		require.NoError(t, r.RUnlock(rctx))
		n, _ := fenceCounter(t, e.rdb(t), r.Name())
		assert.Zero(t, n, "a read hold costs no token")
		wctx, err := r.Lock(bg)
		require.NoError(t, err)
		wt, _ := r.Token(wctx)
		dctx, err := r.RLock(wctx)
		require.NoError(t, err)
		require.NoError(t, r.Unlock(wctx))
		got, ok := r.Token(dctx)
		assert.True(t, ok)
		assert.Equal(t, wt, got, "the downgrade's context carries the (ended) write hold")
		require.NoError(t, r.RUnlock(dctx))

		// Refused: a name without companion keys (a Semaphore's
		// WithFencing does not compile: TestOptionsTyped).
		_, err = c.Mutex("a}b", WithFencing()).TryLock(bg)
		assert.ErrorIs(t, err, ErrInvalid)
		actx, err := c.Mutex("a}b").TryLock(bg)
		require.NoError(t, err, "such a name is fine without fencing")
		require.NoError(t, c.Mutex("a}b").Unlock(actx))
		// The counter's key cannot be a lock's name.
		_, err = c.Mutex(keys.Companion("fence:contract:mutex", "fence")).TryLock(bg)
		assert.ErrorIs(t, err, ErrInvalid)

		// An unfenced lock writes no counter.
		m := c.Mutex("fence:contract:plain")
		mctx, err := m.Lock(bg)
		require.NoError(t, err)
		_, ok = m.Token(mctx)
		assert.False(t, ok)
		require.NoError(t, m.Unlock(mctx))
		assert.NotContains(t, e.keys(t), keys.Companion(m.Name(), "fence"))
	})
}

// A fenced counter that holds a value of another type is reported, and the
// lock is not taken.
func TestFencingCounterOfAnotherType(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		c := e.client(t)
		for _, kind := range fencedKinds {
			name := "fence:wrongtype:" + kind
			require.NoError(t, e.rdb(t).HSet(bg, keys.Companion(name, "fence"), "x", 1).Err())
			_, err := fencedLock(c, kind, name, WithFencing()).try(bg)
			require.Error(t, err, kind)
			if e.real() { // miniredis words an INCR's WRONGTYPE from a script otherwise
				assertWrongType(t, err, keys.Companion(name, "fence"), kind)
			}
			n, err := e.rdb(t).Exists(bg, name).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "%s: nothing written", kind)
		}
	})
}

// fencedWrite is the protected resource: a hash holding a value and the
// highest token that wrote it. A write with a lower token is rejected.
var fencedWrite = redis.NewScript(`
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then
  return 0
end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1`)

func writeFenced(ctx context.Context, rdb redis.Scripter, key string, token int64, value string) (bool, error) {
	n, err := fencedWrite.Run(ctx, rdb, []string{key}, token, value).Int()
	return n == 1, err
}

// The real use: A, with a short fixed lease, stalls past it; B takes the
// lock (a higher token) and writes the resource; A's late write, from
// code past its last check, is rejected by the resource.
func TestFencingRejectsLateWrite(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		for _, kind := range fencedKinds {
			t.Run(kind, func(t *testing.T) {
				name := "fence:late:" + kind
				resource := "fence:late:resource:" + kind
				rdb := e.rdb(t)
				const lease = 100 * time.Millisecond
				a := fencedLock(e.client(t), kind, name, WithFencing(), WithLease(lease))
				b := fencedLock(e.client(t), kind, name, WithFencing())

				actx, err := a.lock(bg)
				require.NoError(t, err)
				ta, _ := a.token(actx)
				require.NoError(t, actx.Err(), "A's last check: it holds the lock")

				// A stalls past its lease.
				if e.mr != nil {
					e.mr.FastForward(2 * lease)
				} else {
					time.Sleep(2 * lease)
					// A is told, but its code may be past its last check.
					require.ErrorIs(t, context.Cause(actx), ErrLeaseLost)
				}
				bctx, err := b.lock(bg)
				require.NoError(t, err)
				tb, _ := b.token(bctx)
				require.Greater(t, tb, ta)
				ok, err := writeFenced(bg, rdb, resource, tb, "B")
				require.NoError(t, err)
				require.True(t, ok, "B's write is accepted")

				ok, err = writeFenced(bg, rdb, resource, ta, "A")
				require.NoError(t, err)
				assert.False(t, ok, "A's late write is rejected")
				v, err := rdb.HGet(bg, resource, "value").Result()
				require.NoError(t, err)
				assert.Equal(t, "B", v)
				ok, err = writeFenced(bg, rdb, resource, tb, "B again")
				require.NoError(t, err)
				assert.True(t, ok, "the current holder may write again")
				require.NoError(t, b.unlock(bctx))
			})
		}
	})
}

// Every key a fenced lock touches is in its name's Cluster slot, declared
// to the scripts: fenced locks work on a Redis Cluster.
func TestFencingOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	c1, c2 := newClient(t, cl.Client(t)), newClient(t, cl.Client(t))
	bg := context.Background()
	for _, kind := range fencedKinds {
		for _, name := range []string{"cl:fence:" + kind, "{cl}:fence:" + kind, "x{cl:t}:" + kind} {
			var prev int64
			for i := 0; i < 4; i++ {
				l := fencedLock([]*Client{c1, c2}[i%2], kind, name, WithFencing())
				lctx, err := l.lock(bg)
				require.NoError(t, err, "%s %s", kind, name)
				tok, ok := l.token(lctx)
				require.True(t, ok)
				require.Greater(t, tok, prev, fmt.Sprintf("%s %s", kind, name))
				prev = tok
				require.NoError(t, l.unlock(lctx))
			}
		}
	}
}

// A fenced acquisition costs no extra round trip: Lock and Unlock send
// the same commands with WithFencing as without, one to take the lock.
func TestFencingNoExtraRoundTrip(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		for _, kind := range fencedKinds {
			var cmds []string
			rdb := e.rdb(t)
			late := hookLater(rdb)
			c := newClient(t, rdb)
			run := func(name string, opts ...anyOpt) []string {
				t.Helper()
				l := fencedLock(c, kind, name, opts...)
				cmds = nil
				lctx, err := l.lock(recording(bg))
				require.NoError(t, err)
				taken := len(cmds)
				require.NoError(t, l.unlock(lctx))
				require.Equal(t, 1, taken, "%s: one command takes the lock: %v", kind, cmds)
				return cmds
			}
			// Load the scripts first.
			warm := fencedLock(c, kind, "fence:trip:warm:"+kind, WithFencing())
			lctx, err := warm.lock(bg)
			require.NoError(t, err)
			require.NoError(t, warm.unlock(lctx))
			late.add(cmdRecorder{&cmds})
			plain := run("fence:trip:plain:" + kind)
			fenced := run("fence:trip:fenced:"+kind, WithFencing())
			assert.Equal(t, plain, fenced, kind)
		}
	})
}
