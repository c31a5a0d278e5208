package transport

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// A Cluster's calls sent alone go on each master's full-duplex
// connection (go-redis's cluster router), as a single node's do.

// clusterHooked returns a client of cl whose nodes each have hook, as
// go-redis's own instrumentation (redisotel) adds its hooks.
func clusterHooked(t *testing.T, cl *redistest.Cluster, hook redis.Hook) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(hook) })
	return cc
}

// On a Cluster, calls whose replies are slow hold up neither the calls
// sent after them to the same master nor their callers: each is written
// at once on the master's connection (in pipelines, two slow replies held
// every lane's worker, and the calls behind them waited for one).
func TestClusterSlowRepliesHoldNobodyElse(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	hook := faultproxy.NewHook()
	cc := clusterHooked(t, cl, hook)
	tr := newT(t, cc, Options{})
	bg := context.Background()
	name := nameOn(t, cc, cl.Masters[0], "trcl")
	require.NoError(t, tr.Do(bg, lockCall(name+":warm"), nil).Err())

	// The slow replies are held until the test releases them: the callers
	// and the calls after them return while they are held (an order).
	release := newRelease(t)
	late := make(chan Reply, 2)
	for i := range 2 {
		key := "{" + name + "}slow" + strconv.Itoa(i)
		slow := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Times: 1, Action: faultproxy.HoldReply(release.ch)})
		var r Reply
		release.whileHeld("the caller leaves when its context ends", func() {
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			r = tr.Do(ctx, lockCall(key), func(r Reply) { late <- r })
		})
		require.True(t, r.Gone)
		require.ErrorIs(t, r.Err(), context.DeadlineExceeded)
		require.Equal(t, 1, slow.Fired())
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release.whileHeld("a call after the slow ones goes out on its own", func() {
				assert.NoError(t, tr.Do(bg, lockCall("{"+name+"}fast"+strconv.Itoa(i)), nil).Err())
			})
		}()
	}
	wg.Wait()
	release.free()
	for range 2 {
		select {
		case r := <-late:
			locked(t, r)
		case <-time.After(5 * time.Second):
			t.Fatal("an abandoned call's reply never reached its give-back")
		}
	}
}

// On a Cluster's full-duplex path, a script its master no longer has is
// sent again whole, once, and the hooks on the master's client see both
// sends; the release's write counter says it was written once that could
// run.
func TestClusterNoScriptFullDuplex(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	rec := &recorder{}
	cc := clusterHooked(t, cl, rec)
	tr := newT(t, cc, Options{})
	bg := context.Background()
	key := nameOn(t, cc, cl.Masters[1], "trclns")
	require.NoError(t, tr.Do(bg, lockCall(key), nil).Err())
	require.NoError(t, cl.Masters[1].Client(t).ScriptFlush(bg).Err())
	rec.reset()
	k, w := Counted(Call{Script: lua.Unlock, Keys: []string{key}, Args: []any{"tr:owner", 1, 30000, Publish, "0", "tr:chan"}})
	n, err := tr.Do(bg, k, nil).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "released")
	assert.False(t, w.Again(), "written once that could run")
	assert.Equal(t, []string{"evalsha", "eval"}, rec.sent())
}

// A Cluster master that stops answering (paused) while calls whose
// callers left pile up on it: a new call to it waits for room at most as
// long as its context, and leaves unsent (ErrNotSent); calls to the other
// masters go on as before; once the master answers again, the abandoned
// calls' replies reach their give-backs.
func TestClusterStalledMasterHoldsNoOther(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	tr := newT(t, cc, Options{})
	bg := context.Background()
	stalled, other := nameOn(t, cc, cl.Masters[0], "trclst"), nameOn(t, cc, cl.Masters[1], "trclok")
	require.NoError(t, tr.Do(bg, lockCall(stalled+":warm"), nil).Err())
	require.NoError(t, tr.Do(bg, lockCall(other+":warm"), nil).Err())
	k := lockCall(stalled)
	most := int(tr.leftOf(&k).max)
	require.Positive(t, most)

	// The other masters serve their slots while this one is paused,
	// however long that lasts on a busy machine (beyond the cluster's
	// node timeout, Redis would answer CLUSTERDOWN for every slot).
	for _, m := range cl.Masters {
		require.NoError(t, m.Client(t).ConfigSet(bg, "cluster-require-full-coverage", "no").Err())
	}
	cl.Masters[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			cl.Masters[0].Resume()
		}
	}()
	var gave sync.WaitGroup
	for i := range most {
		ctx, cancel := context.WithTimeout(bg, time.Millisecond)
		gave.Add(1)
		r := tr.Do(ctx, lockCall("{"+stalled+"}left"+strconv.Itoa(i)), func(Reply) { gave.Done() })
		cancel()
		require.True(t, r.Gone, "call %d: on its way", i)
	}
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	lag := watchLag(t)
	start := time.Now()
	r := tr.Do(ctx, lockCall("{"+stalled+"}new"), nil)
	took := time.Since(start)
	lag.Stop()
	assert.Less(t, took, time.Second+lag.Slack(), "it waited for room as long as its context (the machine's worst delay meanwhile: %v)", lag.Worst())
	require.ErrorIs(t, r.Err(), ErrNotSent)
	require.ErrorIs(t, r.Err(), context.DeadlineExceeded)

	// A call to another master is not held by the paused one (it would
	// wait until the test resumes it: the bound is only a liveness one).
	octx, ocancel := context.WithTimeout(bg, 10*time.Second)
	defer ocancel()
	locked(t, tr.Do(octx, lockCall(other), nil))

	cl.Masters[0].Resume()
	resumed = true
	done := make(chan struct{})
	go func() { gave.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the abandoned calls' replies did not all reach their give-backs")
	}
	locked(t, tr.Do(bg, lockCall("{"+stalled+"}after"), nil))
}
