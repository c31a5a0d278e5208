package redisync

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/transport"
)

// Adversarial checks of the releaser's repair (internal/holds/heal.go):
// the give-back scripts it sends again must never touch a live hold, and
// its polling must cost what it says and end with the Client.

// switchPrimary gives the server rdb talks to a new replication id, as a
// replica promoted in a failover has, keeping its data: it becomes a
// replica of a port nobody listens on (no sync, nothing flushed) and a
// primary again at once.
func switchPrimary(t *testing.T, rdb *redis.Client) {
	t.Helper()
	ctx := context.Background()
	before, err := transport.ReplID(ctx, rdb)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := strings.Cut(l.Addr().String(), ":")
	require.NoError(t, l.Close())
	require.NoError(t, rdb.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err())
	require.NoError(t, rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	after, err := transport.ReplID(ctx, rdb)
	require.NoError(t, err)
	require.NotEqual(t, before, after, "a new replication id")
}

// A writer that took the read lock too (a downgrade) and released the
// write lock keeps its read hold through the healer's sends: the one it
// makes when it first sees the primary, and the one after a failover
// that lost the write Unlock (put back here by hand), which frees the
// write lock and nothing else.
func TestHealSparesDowngradedReadHold(t *testing.T) {
	e := realEnv(t)
	ctx := context.Background()
	rdb := e.rdb(t)
	a, b := e.client(t), e.client(t)
	rw := a.RWMutex("rwheal")
	w, err := rw.Lock(ctx)
	require.NoError(t, err)
	wf := holds.Held(w, rw.wspec.Ref).Field
	r, err := rw.RLock(w)
	require.NoError(t, err)
	require.NoError(t, rw.Unlock(w))
	time.Sleep(3 * holds.HealEvery) // the healer has seen the primary and sent the write Unlock again
	n, err := rwReaders(ctx, rw)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the downgraded read hold survived the first send")
	require.NoError(t, context.Cause(r))

	// What a failover that lost the write Unlock leaves.
	require.NoError(t, rdb.HSet(ctx, "rwheal", "mode", "write", "w:"+wf, 1).Err())
	switchPrimary(t, rdb)
	eventually(t, comeBack, "the lost write Unlock sent again", func() bool {
		mode, _ := rdb.HGet(ctx, "rwheal", "mode").Result()
		return mode == "read"
	})
	time.Sleep(2 * holds.HealEvery)
	require.NoError(t, context.Cause(r), "the read hold lives")
	n, err = rwReaders(ctx, rw)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the read hold is still in Redis")
	_, err = b.RWMutex("rwheal").TryLock(ctx)
	require.ErrorIs(t, err, ErrNotAcquired, "the read hold still excludes a writer")
	require.NoError(t, rw.RUnlock(r))
}

// A lock handed over in memory keeps its Redis field with the next
// holder: a failover and the healer's sends (and a waiter's) leave that
// holder's hold alone.
func TestHealSparesCohortReceiver(t *testing.T) {
	e := realEnv(t)
	ctx := context.Background()
	rdb := e.rdb(t)
	a := e.client(t)
	m := a.Mutex("cohortheal")
	// A release recorded before, of another field.
	h0, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(h0))

	h1, err := m.Lock(ctx)
	require.NoError(t, err)
	f1 := holds.Held(h1, m.spec.Ref).Field
	got := make(chan context.Context, 1)
	go func() {
		h2, err := m.Lock(ctx)
		assert.NoError(t, err)
		got <- h2
	}()
	time.Sleep(300 * time.Millisecond) // queued in the cohort
	require.NoError(t, m.Unlock(h1))
	h2 := <-got
	require.NotNil(t, h2)
	require.Equal(t, f1, holds.Held(h2, m.spec.Ref).Field, "handed over in memory: the field lives on")

	switchPrimary(t, rdb)
	// A waiter of the same Client, with a lease the holder's is shorter
	// than: it sends its Client's releases of the lock again.
	require.NoError(t, rdb.PExpire(ctx, "cohortheal", 10*time.Second).Err())
	_, err = m.TryLockFor(WithOwner(ctx), 4*holds.HealEvery)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, context.Cause(h2), "the receiver's hold lives")
	fs, err := rdb.HKeys(ctx, "cohortheal").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{f1}, fs, "Redis still has the receiver's field")
	require.NoError(t, m.Unlock(h2))
}

// infoCalls returns how many INFO commands the server has run.
func infoCalls(t testing.TB, rdb *redis.Client) int {
	t.Helper()
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_info:calls="); ok {
			var n int
			_, err := fmt.Sscanf(rest, "%d", &n)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// The healer's cost: while a Client has releases within their lease, one
// INFO per primary every HealEvery, whatever its rate of releases; none
// once they are past their lease; its loop ends with Close.
func TestHealerCost(t *testing.T) {
	e := realEnv(t)
	ctx := context.Background()
	rdb := e.rdb(t)
	base := redisyncGoroutines()
	c := newClient(t, e.rdb(t))
	const d = time.Second
	m := c.Mutex("cost", WithLease(d))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var releases atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				h, err := m.Lock(ctx)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, m.Unlock(h))
				releases.Add(1)
			}
		}()
	}
	time.Sleep(2 * holds.HealEvery)
	i0, t0, r0 := infoCalls(t, rdb), time.Now(), releases.Load()
	time.Sleep(2 * time.Second)
	i1, t1, r1 := infoCalls(t, rdb), time.Now(), releases.Load()
	close(stop)
	wg.Wait()
	span := t1.Sub(t0)
	rate := float64(i1-i0-1) / span.Seconds() // one is infoCalls' own
	t.Logf("busy: %d releases/s, %.1f INFO/s (HealEvery %v)", int(float64(r1-r0)/span.Seconds()), rate, holds.HealEvery)
	assert.LessOrEqual(t, rate, 2*float64(time.Second/holds.HealEvery), "one INFO per round")
	assert.Greater(t, rate, 0.0, "the healer asks while releases are recent")

	time.Sleep(d + 2*holds.HealEvery) // past every release's lease
	i2 := infoCalls(t, rdb)
	time.Sleep(1 * time.Second)
	i3 := infoCalls(t, rdb)
	assert.Equal(t, 1, i3-i2, "no INFO once the releases are past their lease (one is infoCalls' own)")

	require.NoError(t, c.Close())
	eventually(t, 5*time.Second, "the library's goroutines to end with Close", func() bool {
		return redisyncGoroutines() <= base
	})
}

// countingHandler counts log records at Warn and above.
type countingHandler struct {
	n    atomic.Int64
	msgs sync.Map
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.n.Add(1)
		h.msgs.Store(r.Message, true)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// A user whose ACL forbids INFO: locks work, the healer says once that
// it cannot ask who serves the locks (it cannot see a failover), not at
// every round, and a waiter still heals its Client's lost release (it
// needs no INFO).
func TestHealerWithoutInfo(t *testing.T) {
	e := realEnv(t)
	ctx := context.Background()
	admin := e.rdb(t)
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err())
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, Username: "noinfo", Password: "pw"})
	t.Cleanup(func() { _ = rdb.Close() })
	require.Error(t, rdb.Info(ctx, "replication").Err(), "INFO refused")
	logs := &countingHandler{}
	c := newClient(t, rdb, WithLogger(slog.New(logs)))
	m := c.Mutex("noinfo")
	for range 5 {
		h, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, m.Unlock(h))
	}
	time.Sleep(8 * holds.HealEvery)
	var msgs []string
	logs.msgs.Range(func(k, _ any) bool { msgs = append(msgs, k.(string)); return true })
	t.Logf("warnings: %d %q", logs.n.Load(), msgs)
	assert.Equal(t, int64(1), logs.n.Load(), "one warning that the repair cannot see a failover, not one at every round")

	// The waiter path needs no INFO.
	h, err := m.Lock(ctx)
	require.NoError(t, err)
	field := holds.Held(h, m.spec.Ref).Field
	require.NoError(t, m.Unlock(h))
	require.NoError(t, admin.HSet(ctx, "noinfo", field, 1).Err())
	require.NoError(t, admin.PExpire(ctx, "noinfo", 20*time.Second).Err())
	h, err = m.TryLockFor(ctx, comeBack)
	require.NoError(t, err, "the waiter healed its Client's lost release")
	require.NoError(t, m.Unlock(h))
}

// Under contention, with the primary switched three times (each switch
// makes the healer send every recent release again, and for 2s every new
// one too), no hold that is live is ever gone from Redis, and no two
// holders overlap: the cohort hands the lock over in memory (the field
// lives on with the next holder) and new holders of the same Client take
// the lock again and again, while their Client's releases are sent again.
func TestHealNeverFreesALiveHold(t *testing.T) {
	e := realEnv(t)
	ctx := context.Background()
	rdb := e.rdb(t)
	const name = "liveheal"
	var inside, holds, gone atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		c := e.client(t)
		m := c.Mutex(name)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					h, err := m.TryLockFor(ctx, 2*time.Second)
					if err != nil {
						continue // refused while the server is briefly a replica
					}
					if n := inside.Add(1); n != 1 {
						t.Errorf("%d holders at once", n)
					}
					field := holdField(h, m)
					time.Sleep(time.Millisecond)
					ok, err := rdb.HExists(ctx, name, field).Result()
					if err == nil && !ok && context.Cause(h) == nil {
						gone.Add(1)
					}
					inside.Add(-1)
					holds.Add(1)
					_ = m.Unlock(h)
				}
			}()
		}
	}
	for range 3 {
		time.Sleep(600 * time.Millisecond)
		switchPrimary(t, rdb)
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d holds", holds.Load())
	require.Positive(t, holds.Load())
	require.Zero(t, gone.Load(), "live holds gone from Redis")
}

func holdField(ctx context.Context, m *Mutex) string { return holds.Held(ctx, m.spec.Ref).Field }
