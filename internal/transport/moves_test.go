package transport

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// A Cluster's slots moving under the engine: MOVED, ASK and TRYAGAIN
// during a resharding, a failover.

// A slot being resharded, its keys split between two masters: a call on
// one moved key follows ASK (with AckReplicas, ASKING, the call and WAIT
// on the importing master's connection), a call on keys split between the
// two is told TRYAGAIN and sent again until the migration ends; alone and
// in a batch, without and with replica acknowledgement.
func TestReshardingAskAndTryagain(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 1)
	bg := context.Background()
	cc := rc.Client(t)
	plain, acked := newT(t, cc, Options{}), newT(t, cc, Options{AckReplicas: 1, AckTimeout: time.Second})
	tag := "{" + nameOn(t, cc, rc.Masters[0], "trresh") + "}"
	src := rc.Masters[0].Client(t)
	for _, k := range []string{"moved", "split1", "split2"} {
		require.NoError(t, src.Set(bg, tag+k, 1, 0).Err())
	}
	require.NoError(t, plain.Do(bg, Call{Keys: []string{tag + "moved"}, Args: []any{"get", tag + "moved"}}, nil).Err(), "warm")
	mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], tag), rc.Masters[1])
	mig.Move(t, tag+"moved", tag+"split2")

	for name, tr := range map[string]*Transport{"plain": plain, "acked": acked} {
		k := Call{Script: lua.Lock, Keys: []string{tag + "moved:lock:" + name}, Args: []any{30000, "tr:owner", 0}, Takes: true}
		// A new key of the slot: on neither master, the source answers ASK.
		r := tr.Do(bg, k, nil)
		locked(t, r)
		if name == "acked" {
			assert.EqualValues(t, 1, r.Acked, "WAIT on the importing master's connection")
		}
		rs := tr.DoAll(bg, []Call{{Keys: []string{tag + "moved"}, Args: []any{"incr", tag + "moved"}}})
		require.NoError(t, rs[0].Err(), name)
	}
	// Keys split between the masters: TRYAGAIN until the migration ends.
	done := make(chan struct{})
	var finishing atomic.Bool
	go func() {
		defer close(done)
		time.Sleep(400 * time.Millisecond)
		finishing.Store(true)
		mig.Finish(t)
	}()
	// Bounded past the migration's end, which can take over 5s (redistest
	// sends the assignment again when a node is slow to see it).
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	split := Call{Keys: []string{tag + "split1", tag + "split2"}, Args: []any{"exists", tag + "split1", tag + "split2"}}
	var wg sync.WaitGroup
	for _, alone := range []bool{true, false} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Reply
			if alone {
				r = plain.Do(ctx, split, nil)
			} else {
				r = plain.DoAll(ctx, []Call{split})[0]
			}
			n, err := r.Int64()
			assert.NoError(t, err, "alone: %v", alone)
			assert.EqualValues(t, 2, n)
			assert.True(t, finishing.Load(), "it waited for the migration to end")
		}()
	}
	wg.Wait()
	<-done
	// After the migration, MOVED: the slot map learns it at once.
	locked(t, plain.Do(bg, lockCall(tag+"after"), nil))
	assert.Equal(t, rc.Masters[1].Addr(), plain.nodeOf(tag).addr)
}

// A batch that meets TRYAGAIN and ASK on a migrating slot runs each call
// once.
func TestClusterBatchMeetsTryagainAndAsk(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	bg := context.Background()
	cc := rc.Client(t)
	tr := newT(t, cc, Options{})
	tag := "{" + nameOn(t, cc, rc.Masters[0], "trbatch") + "}"
	src := rc.Masters[0].Client(t)
	require.NoError(t, src.Set(bg, tag+"a", 1, 0).Err())
	require.NoError(t, src.Set(bg, tag+"n", 0, 0).Err())
	mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], tag), rc.Masters[1])
	defer mig.Finish(t)
	mig.Move(t, tag+"n") // on the target: the source answers ASK for it
	require.NoError(t, tr.Do(bg, Call{Keys: []string{tag + "a"}, Args: []any{"get", tag + "a"}}, nil).Err(), "warm")

	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	rs := tr.DoAll(ctx, []Call{
		{Keys: []string{tag + "a", tag + "x"}, Args: []any{"exists", tag + "a", tag + "x"}}, // TRYAGAIN: a here, x nowhere
		{Keys: []string{tag + "n"}, Args: []any{"incr", tag + "n"}},                         // ASK
	})
	require.Error(t, rs[0].Err(), "TRYAGAIN until the context ended")
	n, err := rs[1].Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n)
	p := rc.Masters[1].Client(t).Pipeline()
	p.Do(bg, "asking")
	got := p.Get(bg, tag+"n")
	_, _ = p.Exec(bg)
	v, err := got.Int()
	require.NoError(t, err)
	assert.Equal(t, 1, v, "the INCR ran once")
}

// On a Cluster, calls follow their slot to its new master after a
// failover and after a slot migration, alone and in batches, with and
// without replica acknowledgement.
func TestFollowsMovedSlots(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	bg := context.Background()
	ackRdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = ackRdb.Close() })
	trs := map[string]*Transport{
		"plain": newT(t, rc.Client(t), Options{}),
		"acked": newT(t, ackRdb, Options{AckReplicas: 1, AckTimeout: time.Second}),
	}
	cc := rc.Client(t)
	from := rc.Masters[0]
	names := map[string]string{}
	for what, tr := range trs {
		names[what] = "{" + nameOn(t, cc, from, "trmv") + "}" + what
		require.NoError(t, tr.Do(bg, lockCall(names[what]+":warm"), nil).Err())
	}
	check := func(t *testing.T, suffix string) {
		for what, tr := range trs {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			r := tr.Do(ctx, lockCall(names[what]+suffix), nil)
			cancel()
			require.NoError(t, r.Err(), what)
			locked(t, r)
			rs := tr.DoAll(bg, []Call{lockCall(names[what] + suffix + ":b")})
			locked(t, rs[0])
		}
	}
	t.Run("failover", func(t *testing.T) {
		rc.Failover(t, 0, false)
		check(t, ":fo")
	})
	t.Run("migration", func(t *testing.T) {
		base := names["plain"]
		for what := range names {
			names[what] = base + strings.ReplaceAll(what, " ", "-") // one slot
		}
		rc.MigrateSlot(t, redistest.SlotOf(t, rc.Masters[0], base), rc.Masters[1])
		check(t, ":mig")
	})
}

// Two masters each naming the other as a slot's owner (as while a
// migration's end is agreed on): a call sent back and forth is redirected
// after pauses, within its bound, until one of them serves the slot, rather
// than give up after a few redirects in microseconds.
func TestMovedBackAndForthWaitsForAnOwner(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	bg := context.Background()
	cc := rc.Client(t)
	tr := newT(t, cc, Options{})
	tag := "{" + nameOn(t, cc, rc.Masters[0], "trpingpong") + "}"
	slot := redistest.SlotOf(t, rc.Masters[0], tag)
	m0, m1 := rc.Masters[0].Client(t), rc.Masters[1].Client(t)
	id1 := redistest.NodeID(t, rc.Masters[1])
	locked(t, tr.Do(bg, lockCall(tag+"warm"), nil))
	require.NoError(t, m0.Del(bg, tag+"warm").Err())
	// The slot's owner (with no keys in it) gives it to the other, who has
	// not taken it: each names the other.
	require.NoError(t, m0.Do(bg, "cluster", "setslot", slot, "node", id1).Err())
	require.Eventually(t, func() bool {
		err := m1.Get(bg, tag+"x").Err()
		return err != nil && strings.HasPrefix(err.Error(), "MOVED "+strconv.Itoa(slot)+" "+rc.Masters[0].Addr())
	}, 5*time.Second, 10*time.Millisecond, "the other still names the first")
	require.ErrorContains(t, m0.Get(bg, tag+"x").Err(), "MOVED "+strconv.Itoa(slot)+" "+rc.Masters[1].Addr())

	const settle = 500 * time.Millisecond
	settled := make(chan time.Time, 1)
	go func() {
		time.Sleep(settle)
		settled <- time.Now()
		assert.NoError(t, m1.Do(bg, "cluster", "setslot", slot, "node", id1).Err(), "the other takes the slot")
	}()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	start := time.Now()
	locked(t, tr.Do(ctx, lockCall(tag+"l"), nil))
	at := <-settled
	assert.Greater(t, time.Since(start), settle, "it waited for an owner")
	assert.False(t, time.Now().Before(at))
	n, err := m1.Exists(bg, tag+"l").Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "on the master that took the slot")
}
