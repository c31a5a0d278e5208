package redisync

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The transport (transport.go) on its own, against real servers.

// trLock is the lock script's call taking key for a new owner.
func trLock(key string) call {
	return call{script: lua.Lock, keys: []string{key}, args: []any{30000, "tr:owner", 0}, takes: true}
}

// onKey matches the script commands whose first key is key.
func onKey(key string) func([]any) bool {
	return func(args []any) bool { return len(args) > 3 && args[3] == key }
}

// Calls ready together go out in one pipeline; a reply lost in it fails
// that call alone.
func TestTransportLostReplyFailsOnlyItsCall(t *testing.T) {
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, c.tr.do(context.Background(), trLock("tr:warm"), nil).Err()) // the script cached
	lost := hook.OnCommand(faultproxy.CommandRule{Args: onKey("tr:b"), Times: 1, Action: faultproxy.LoseReply()})
	rs := c.tr.doAll(context.Background(), []call{trLock("tr:a"), trLock("tr:b"), trLock("tr:c")})
	require.Equal(t, 1, lost.Fired())
	for _, i := range []int{0, 2} {
		v, err := rs[i].Int64Slice()
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 1}, v)
	}
	require.ErrorIs(t, rs[1].Err(), faultproxy.ErrInjected)
	assert.Equal(t, rs[0].pipe, rs[1].pipe, "one pipeline")
	assert.Equal(t, rs[0].pipe, rs[2].pipe, "one pipeline")
	for _, k := range []string{"tr:a", "tr:b", "tr:c"} {
		n, err := e.rdb(t).Exists(context.Background(), k).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "%s: every script ran", k)
	}
}

// A pipeline whose reply is slow holds up neither the calls sent after
// it nor a caller in it whose context ends: that caller leaves at once,
// and what its script took reaches its give-back.
func TestTransportSlowGroupHoldsNobodyElse(t *testing.T) {
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	bg := context.Background()
	require.NoError(t, c.tr.do(bg, trLock("tr:warm"), nil).Err()) // connected, script loaded

	slow := hook.OnCommand(faultproxy.CommandRule{Args: onKey("tr:slow"), Times: 1, Action: faultproxy.DelayReply(800 * time.Millisecond)})
	late := make(chan reply, 1)
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := c.tr.do(ctx, trLock("tr:slow"), func(r reply) { late <- r })
	assert.Less(t, time.Since(start), 300*time.Millisecond, "the caller leaves when its context ends")
	require.True(t, r.gone)
	require.ErrorIs(t, r.Err(), context.DeadlineExceeded)
	require.Equal(t, 1, slow.Fired())

	start = time.Now()
	r = c.tr.do(bg, trLock("tr:fast"), nil)
	require.NoError(t, r.Err())
	assert.Less(t, time.Since(start), 300*time.Millisecond, "a call after the slow pipeline goes out on its own")

	select {
	case r := <-late:
		v, err := r.Int64Slice()
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 1}, v, "the give-back gets what the script took")
	case <-time.After(3 * time.Second):
		t.Fatal("the abandoned call's reply never reached its give-back")
	}
}

// A pipeline some of whose scripts Redis no longer has (SCRIPT FLUSH) is
// answered whole: those are sent again as EVAL, the others are not, and
// each reply is dated by the pipeline that produced it.
func TestTransportNoScriptInTheMiddleOfAGroup(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	admin := e.rdb(t)
	rdb := e.rdb(t)
	var names []string
	rdb.AddHook(cmdRecorder{&names})
	c := newClient(t, rdb)
	require.NoError(t, admin.ScriptFlush(bg).Err())
	require.NoError(t, lua.Renew.Load(bg, admin).Err()) // cached; lock.lua is not
	names = nil
	rs := c.tr.doAll(bg, []call{
		trLock("tr:n1"),
		{script: lua.Renew, keys: []string{"tr:n2"}, args: []any{1000, "x:1"}},
		trLock("tr:n3"),
		{keys: []string{"tr:n4"}, args: []any{"set", "tr:n4", "v"}},
	})
	for _, i := range []int{0, 2} {
		v, err := rs[i].Int64Slice()
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 1}, v)
	}
	n, err := rs[1].Int64()
	require.NoError(t, err)
	assert.Zero(t, n)
	require.NoError(t, rs[3].Err())
	var sent []string // without the handshake of a new connection
	for _, n := range names {
		if n != "hello" && n != "client" {
			sent = append(sent, n)
		}
	}
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha", "set", "eval", "eval"}, sent)
	assert.Equal(t, rs[1].pipe, rs[3].pipe)
	assert.NotEqual(t, rs[0].pipe, rs[1].pipe, "sent again in a pipeline of their own")
	assert.Equal(t, rs[0].pipe, rs[2].pipe)
	assert.True(t, rs[0].sent.After(rs[1].sent), "a resent script's lease counts from its resend")
}

// With WithReplicaAck, the calls of a pipeline that take something are
// followed by one WAIT, whose answer each reply carries; calls that take
// nothing go in pipelines without WAIT.
func TestTransportOneWaitPerGroup(t *testing.T) {
	e := realEnv(t)
	ackReplica(t, e)
	bg := context.Background()
	rdb := ackRDB(t, e.addr)
	var names []string
	var pipes atomic.Int64
	rdb.AddHook(cmdRecorder{&names})
	rdb.AddHook(countHook{n: new(atomic.Int64), pipes: &pipes})
	c := newClient(t, rdb, WithReplicaAck(1, time.Second))
	require.NoError(t, c.tr.do(bg, trLock("tr:w0"), nil).Err()) // loads the script
	names = nil
	pipes.Store(0)
	calls := []call{trLock("tr:w1"), trLock("tr:w2"), trLock("tr:w3"), trLock("tr:w4")}
	rs := c.tr.doAll(bg, calls)
	for _, r := range rs {
		v, err := c.acquired(r)
		require.NoError(t, err)
		assert.Equal(t, []int64{1, 1}, v)
		assert.EqualValues(t, 1, r.acked)
		assert.Equal(t, rs[0].pipe, r.pipe)
	}
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha", "evalsha", "wait"}, names)
	assert.EqualValues(t, 1, pipes.Load())

	names = nil
	r := c.tr.do(bg, call{script: lua.Unlock, keys: []string{"tr:w1"}, args: []any{"tr:owner", 1, 30000, publish, "0", "tr:w1:chan"}}, nil)
	require.NoError(t, r.Err())
	assert.NotContains(t, names, "wait", "a release does not wait for replicas")
	assert.EqualValues(t, -1, r.acked)
}

// The user's hooks see every command redisync sends: what a hook on the
// redis client counts is what Redis ran, on a single node and, through
// the cluster client, on a Cluster.
func TestTransportHooksSeeEveryCommand(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	workload := func(t *testing.T, c *Client) {
		bg := context.Background()
		for i := range 20 {
			m := c.Mutex("tr:hook:" + strconv.Itoa(i%5))
			lctx, err := m.Lock(bg)
			require.NoError(t, err)
			lctx, err = m.Lock(lctx)
			require.NoError(t, err)
			require.NoError(t, m.Unlock(lctx))
			require.NoError(t, m.Unlock(lctx))
			f := c.FairMutex("tr:hook:f")
			fctx, err := f.Lock(bg)
			require.NoError(t, err)
			require.NoError(t, f.Unlock(fctx))
		}
	}
	scriptsRun := func(t *testing.T, rdb *redis.Client) int64 {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		var n int64
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
				f := strings.SplitN(strings.TrimPrefix(line[strings.Index(line, ":")+1:], "calls="), ",", 2)
				v, err := strconv.ParseInt(f[0], 10, 64)
				require.NoError(t, err)
				n += v
			}
		}
		return n
	}
	t.Run("single node", func(t *testing.T) {
		e := realEnv(t)
		var seen atomic.Int64
		rdb := e.rdb(t)
		rdb.AddHook(countHook{n: &seen})
		workload(t, newClient(t, rdb))
		assert.Equal(t, scriptsRun(t, e.rdb(t)), seen.Load())
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistestCluster(t)
		var seen atomic.Int64
		cc := cl.Client(t)
		cc.AddHook(countHook{n: &seen})
		workload(t, newClient(t, cc))
		var ran int64
		for _, m := range cl.Masters {
			ran += scriptsRun(t, m.Client(t))
		}
		assert.Equal(t, ran, seen.Load())
	})
	t.Run("cluster with replica ack", func(t *testing.T) {
		// The scripts go on each master's own client (WAIT answers for
		// the writes of its connection): a hook on every node, as
		// redisotel adds one, sees them all.
		rc := redistest.StartClusterWithReplicas(t, 3, 1)
		var seen atomic.Int64
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = cc.Close() })
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(countHook{n: &seen}) })
		workload(t, newClient(t, cc, WithReplicaAck(1, time.Second)))
		var ran int64
		for _, m := range rc.Masters {
			ran += scriptsRun(t, m.Client(t))
		}
		assert.Equal(t, ran, seen.Load())
	})
}

// On a Cluster, calls follow their slot to its new master after a
// failover and after a slot migration: through the cluster client's
// pipelines, and on a master's own connection (WithReplicaAck), where
// the MOVED reply has the slot map reloaded.
func TestTransportFollowsMovedSlots(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	bg := context.Background()
	ackRdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = ackRdb.Close() })
	clients := map[string]*Client{
		"cluster pipeline":  newClient(t, rc.Client(t), WithPubSub(PubSubClassic)),
		"master connection": newClient(t, ackRdb, WithReplicaAck(1, time.Second), WithPubSub(PubSubClassic)),
	}
	cc := rc.Client(t)
	from := rc.Masters[0]
	names := map[string]string{}
	for what, c := range clients {
		names[what] = nameOn(t, cc, from, "trmv")
		require.NoError(t, c.tr.do(bg, trLock(names[what]+":warm"), nil).Err())
	}
	check := func(t *testing.T, suffix string) {
		for what, c := range clients {
			r := c.tr.do(bg, trLock(names[what]+suffix), nil)
			v, err := c.acquired(r)
			require.NoError(t, err, what)
			assert.Equal(t, []int64{1, 1}, v, what)
		}
	}
	t.Run("failover", func(t *testing.T) {
		rc.Failover(t, 0, false)
		check(t, ":fo")
	})
	t.Run("migration", func(t *testing.T) {
		base := names["cluster pipeline"]
		for what := range names {
			names[what] = "{" + base + "}" + what // one slot
		}
		rc.MigrateSlot(t, redistest.SlotOf(t, rc.Masters[0], base), rc.Masters[1])
		check(t, ":mig")
	})
}

// replyErr is an error reply of Redis's.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// A reply that says "not now" (TRYAGAIN, CLUSTERDOWN, LOADING: Redis
// refused the command before running it) is sent again within the call's
// bound: its context's deadline, and at most releaseTimeout (a release's
// bound when it has no deadline). A call that is still told "not now" when
// its bound comes gets that reply, before its context ends.
func TestTransportRetriesNotNow(t *testing.T) {
	e := realEnv(t)
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	bg := context.Background()
	for _, msg := range []string{
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down",
		"LOADING Redis is loading the dataset in memory",
	} {
		key := "tr:notnow:" + strings.Fields(msg)[0]
		rule := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Times: 3, Action: faultproxy.Fail(replyErr(msg))})
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		v, err := c.acquired(c.tr.do(ctx, trLock(key), nil))
		cancel()
		require.NoError(t, err, msg)
		assert.Equal(t, []int64{1, 1}, v)
		assert.Equal(t, 3, rule.Fired())

		// A release, whose context cannot end.
		del := func(args []any) bool { return len(args) == 2 && args[0] == "del" && args[1] == key }
		rule = hook.OnCommand(faultproxy.CommandRule{Args: del, Times: 3, Action: faultproxy.Fail(replyErr(msg))})
		n, err := c.tr.do(bg, call{keys: []string{key}, args: []any{"del", key}, direct: true}, nil).Int64()
		require.NoError(t, err, msg)
		assert.EqualValues(t, 1, n)
		assert.Equal(t, 3, rule.Fired())
	}

	key := "tr:notnow:long"
	rule := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Action: faultproxy.Fail(replyErr("TRYAGAIN Multiple keys request during rehashing of slot"))})
	defer rule.Remove()
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	r := c.tr.do(ctx, trLock(key), nil)
	assert.False(t, r.gone, "the reply came before the context ended")
	require.ErrorContains(t, r.Err(), "TRYAGAIN")
	assert.NoError(t, ctx.Err())
	assert.Greater(t, rule.Fired(), 2)
}

// A batch that meets TRYAGAIN (first) and ASK (after it) on a Cluster's
// migrating slot runs each call once: go-redis's cluster pipeline, which
// sends a node's whole batch again when its first command answers
// TRYAGAIN, must not send the call it is already following to the ASK
// target a second time (it did: the call ran twice, and two goroutines
// read replies into one command).
func TestTransportClusterBatchMeetsTryagainAndAsk(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	bg := context.Background()
	cc := rc.Client(t)
	c := newClient(t, cc)
	tag := "{" + nameOn(t, cc, rc.Masters[0], "trbatch") + "}"
	src := rc.Masters[0].Client(t)
	require.NoError(t, src.Set(bg, tag+"a", 1, 0).Err())
	require.NoError(t, src.Set(bg, tag+"n", 0, 0).Err())
	mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], tag), rc.Masters[1])
	defer mig.Finish(t)
	mig.Move(t, tag+"n") // on the target: the source answers ASK for it
	require.NoError(t, c.tr.do(bg, call{keys: []string{tag + "a"}, args: []any{"get", tag + "a"}}, nil).Err(), "warm")

	ctx, cancel := context.WithTimeout(bg, time.Second)
	defer cancel()
	rs := c.tr.doAll(ctx, []call{
		{keys: []string{tag + "a", tag + "x"}, args: []any{"exists", tag + "a", tag + "x"}}, // TRYAGAIN: a here, x nowhere
		{keys: []string{tag + "n"}, args: []any{"incr", tag + "n"}},                         // ASK
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
