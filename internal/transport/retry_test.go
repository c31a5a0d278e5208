package transport

import (
	"context"
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

// replyErr is an error reply of Redis's, as a hook makes one up.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// A reply that says "not now" (TRYAGAIN, CLUSTERDOWN, LOADING, BUSY,
// MASTERDOWN: Redis refused the command before running it; a hook stands
// for it here) has the call sent again within its bound: its context's
// deadline, and at most ReleaseTimeout (a release's bound when it has no
// deadline). A call still told "not now" when its bound comes gets that
// reply, before its context ends.
func TestRetriesNotNow(t *testing.T) {
	srv := redistest.Start(t)
	tr, hook := hookedT(t, srv)
	bg := context.Background()
	for _, msg := range []string{
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down",
		"LOADING Redis is loading the dataset in memory",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
	} {
		key := "tr:notnow:" + strings.Fields(msg)[0]
		rule := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Times: 3, Action: faultproxy.Fail(replyErr(msg))})
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		r := tr.Do(ctx, lockCall(key), nil)
		cancel()
		locked(t, r)
		assert.Equal(t, 3, rule.Fired())

		// A release, whose context cannot end.
		del := func(args []any) bool { return len(args) == 2 && args[0] == "del" && args[1] == key }
		rule = hook.OnCommand(faultproxy.CommandRule{Args: del, Times: 3, Action: faultproxy.Fail(replyErr(msg))})
		n, err := tr.Do(bg, Call{Keys: []string{key}, Args: []any{"del", key}, Direct: true}, nil).Int64()
		require.NoError(t, err, msg)
		assert.EqualValues(t, 1, n)
		assert.Equal(t, 3, rule.Fired())
	}
	// Once: the refusal is returned as it is.
	key := "tr:notnow:once"
	rule := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Times: 1, Action: faultproxy.Fail(replyErr("LOADING x"))})
	once := lockCall(key)
	once.Once = true
	require.ErrorContains(t, tr.Do(bg, once, nil).Err(), "LOADING")
	assert.Equal(t, 1, rule.Fired())

	key = "tr:notnow:long"
	rule = hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Action: faultproxy.Fail(replyErr("TRYAGAIN Multiple keys request during rehashing of slot"))})
	defer rule.Remove()
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	r := tr.Do(ctx, lockCall(key), nil)
	assert.False(t, r.Gone, "the reply came before the context ended")
	require.ErrorContains(t, r.Err(), "TRYAGAIN")
	assert.NoError(t, ctx.Err())
	assert.Greater(t, rule.Fired(), 2)
}

// A server restarting with its data answers LOADING for a while: a call
// is sent again until it is served, within its bound, and a caller whose
// context (without a deadline) ends while its call waits to be sent again
// leaves at once, the call not sent again: nothing ran, nothing to give
// back.
func TestRetriesLoading(t *testing.T) {
	srv := redistest.Start(t, redistest.SlowLoading(200*time.Microsecond)...)
	tr, hook := hookedT(t, srv)
	key := "tr:loading"
	get := func(args []any) bool { return len(args) == 2 && args[0] == "get" && args[1] == key }
	sends := hook.OnCommand(faultproxy.CommandRule{Args: get, Action: faultproxy.DelayBefore(0)})
	restarted := make(chan struct{})
	go func() { defer close(restarted); srv.RestartLoading(t, 10000) }() // about 2s of LOADING
	defer func() { <-restarted }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer probe.Close()
	require.Eventually(t, func() bool {
		err := probe.Ping(context.Background()).Err()
		return err != nil && strings.HasPrefix(err.Error(), "LOADING")
	}, 10*time.Second, time.Millisecond, "the server answers LOADING")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var cancelled atomic.Int64
	go func() {
		// The sixth refusal starts a pause of notNowMaxPause; the caller
		// leaves 50ms after the sixth send, in that pause.
		for sends.Fired() < 6 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		cancelled.Store(time.Now().UnixNano())
		cancel()
	}()
	lag := watchLag(t)
	r := tr.Do(ctx, Call{Keys: []string{key}, Args: []any{"get", key}}, nil)
	late := time.Since(time.Unix(0, cancelled.Load()))
	lag.Stop()
	require.ErrorIs(t, r.Err(), context.Canceled)
	assert.Less(t, late, notNowMaxPause/2+lag.Slack(), "the caller left %v after its context ended (the machine's worst delay meanwhile: %v)", late, lag.Worst())
	fired := sends.Fired()
	time.Sleep(2 * notNowMaxPause)
	assert.Equal(t, fired, sends.Fired(), "sent again after its caller left")
	assert.ErrorIs(t, r.Err(), ErrNotSent)
	assert.False(t, r.Gone, "nothing to give back")

	// A call within its bound rides the loading out.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	for {
		err := tr.Do(ctx2, Call{Keys: []string{key}, Args: []any{"set", key, "v"}, Direct: true}, nil).Err()
		if err == nil {
			break
		}
		require.ErrorContains(t, err, "LOADING", "refused for now, past its 5s bound")
	}
}

// With AckReplicas, the calls of a batch that take something are followed
// by one WAIT, on a connection of their own, whose answer each reply
// carries; a call alone that takes something waits too; calls that take
// nothing go without WAIT.
func TestOneWaitPerBatch(t *testing.T) {
	srv := redistest.Start(t)
	redistest.StartReplica(t, srv)
	bg := context.Background()
	admin := srv.Client(t)
	require.Eventually(t, func() bool {
		n, err := admin.Do(bg, "wait", 1, 100).Int64()
		return err == nil && n == 1
	}, 5*time.Second, 50*time.Millisecond, "the replica acknowledges writes")
	tr := newT(t, srv.Client(t), Options{AckReplicas: 1, AckTimeout: time.Second})
	require.NoError(t, tr.Do(bg, lockCall("tr:w0"), nil).Err()) // loads the script
	require.NoError(t, admin.ConfigResetStat(bg).Err())
	rs := tr.DoAll(bg, []Call{lockCall("tr:w1"), lockCall("tr:w2"), lockCall("tr:w3"), lockCall("tr:w4")})
	for _, r := range rs {
		locked(t, r)
		assert.EqualValues(t, 1, r.Acked)
		assert.Equal(t, rs[0].Pipe, r.Pipe)
	}
	assert.EqualValues(t, 1, commandCalls(t, admin, "wait"), "one WAIT")

	r := tr.Do(bg, lockCall("tr:w5"), nil)
	locked(t, r)
	assert.EqualValues(t, 1, r.Acked)
	assert.EqualValues(t, 2, commandCalls(t, admin, "wait"))

	r = tr.Do(bg, Call{Script: lua.Unlock, Keys: []string{"tr:w1"}, Args: []any{"tr:owner", 1, 30000, Publish, "0", "tr:w1:chan"}}, nil)
	require.NoError(t, r.Err())
	assert.EqualValues(t, 2, commandCalls(t, admin, "wait"), "a release does not wait for replicas")
	assert.EqualValues(t, -1, r.Acked)

	// A WAIT that blocks (no replica answers in time) holds up no other
	// call: those go on the shared connections.
	tr2 := newT(t, srv.Client(t), Options{AckReplicas: 2, AckTimeout: 500 * time.Millisecond})
	require.NoError(t, tr2.Do(bg, lockCall("tr:w6:warm"), nil).Err())
	done := make(chan Reply, 1)
	go func() { done <- tr2.Do(bg, lockCall("tr:w6"), nil) }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	require.ErrorIs(t, tr2.Do(bg, Call{Keys: []string{"x"}, Args: []any{"get", "x"}}, nil).Err(), redis.Nil)
	assert.Less(t, time.Since(start), 250*time.Millisecond, "not behind the blocked WAIT")
	r = <-done
	locked(t, r)
	assert.EqualValues(t, 1, r.Acked, "one of the two replicas asked for")
}
