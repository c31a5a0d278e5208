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

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The transport on its own, against real servers: calls in, replies out.
// The paths: a call sent alone (Do) goes on the full-duplex auto-pipeline
// (fd.go); batches (DoAll, Async) and the calls that wait for replicas go
// in pipelines, on lanes (lane path). Tests run each behaviour on every
// path it applies to.

// newT returns a transport on rdb, closed and drained with the test.
func newT(t testing.TB, rdb redis.UniversalClient, opt Options) *Transport {
	tr := New(rdb, opt)
	t.Cleanup(func() { tr.Close(); tr.Drain(5 * time.Second) })
	return tr
}

// hooked returns a client of srv with a fault hook.
func hooked(t testing.TB, addr string) (*redis.Client, *faultproxy.Hook) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	h := faultproxy.NewHook()
	rdb.AddHook(h)
	return rdb, h
}

// lockCall is the lock script's call taking key for a new owner.
func lockCall(key string) Call {
	return Call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "tr:owner", 0}, Takes: true}
}

// onKey matches the script commands whose first key is key.
func onKey(key string) func([]any) bool {
	return func(args []any) bool { return len(args) > 3 && args[3] == key }
}

func locked(t *testing.T, r Reply) {
	t.Helper()
	n, err := r.Int64() // lua/lock.lua's grant: the count
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}

// paths runs f on the full-duplex path and on the lane path (every call
// in pipelines).
func paths(t *testing.T, f func(t *testing.T, noFD bool)) {
	t.Run("full-duplex", func(t *testing.T) { f(t, false) })
	t.Run("lanes", func(t *testing.T) { f(t, true) })
}

// Calls ready together go out in one pipeline; a reply lost in it fails
// that call alone.
func TestLostReplyFailsOnlyItsCall(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hook := hooked(t, srv.Addr())
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	require.NoError(t, tr.Do(bg, lockCall("tr:warm"), nil).Err()) // the script cached
	lost := hook.OnCommand(faultproxy.CommandRule{Args: onKey("tr:b"), Times: 1, Action: faultproxy.LoseReply()})
	rs := tr.DoAll(bg, []Call{lockCall("tr:a"), lockCall("tr:b"), lockCall("tr:c")})
	require.Equal(t, 1, lost.Fired())
	locked(t, rs[0])
	locked(t, rs[2])
	require.ErrorIs(t, rs[1].Err(), faultproxy.ErrInjected)
	assert.Equal(t, rs[0].Pipe, rs[1].Pipe, "one pipeline")
	assert.Equal(t, rs[0].Pipe, rs[2].Pipe, "one pipeline")
	for _, k := range []string{"tr:a", "tr:b", "tr:c"} {
		assert.EqualValues(t, 1, srv.Client(t).Exists(bg, k).Val(), "%s: every script ran", k)
	}
}

// A call whose reply is slow holds up neither the calls sent after it nor
// its caller when its context ends: the caller leaves at once, and what
// its script took reaches its give-back (late). The slow reply is held
// until the test releases it, so "at once" is an order: the caller and
// the calls after it return while it is held, however busy the machine.
func TestSlowReplyHoldsNobodyElse(t *testing.T) {
	paths(t, func(t *testing.T, noFD bool) {
		srv := redistest.Start(t)
		rdb, hook := hooked(t, srv.Addr())
		tr := newT(t, rdb, Options{NoFullDuplex: noFD})
		bg := context.Background()
		require.NoError(t, tr.Do(bg, lockCall("tr:warm"), nil).Err())

		release := newRelease(t)
		slow := hook.OnCommand(faultproxy.CommandRule{Args: onKey("tr:slow"), Times: 1, Action: faultproxy.HoldReply(release.ch)})
		late := make(chan Reply, 1)
		var r Reply
		release.whileHeld("the caller leaves when its context ends", func() {
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			r = tr.Do(ctx, lockCall("tr:slow"), func(r Reply) { late <- r })
		})
		require.True(t, r.Gone)
		require.ErrorIs(t, r.Err(), context.DeadlineExceeded)
		require.Equal(t, 1, slow.Fired())

		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				release.whileHeld("a call after the slow one goes out on its own", func() {
					assert.NoError(t, tr.Do(bg, lockCall("tr:fast:"+strconv.Itoa(i)), nil).Err())
				})
			}()
		}
		wg.Wait()
		release.free()
		select {
		case r := <-late:
			locked(t, r)
		case <-time.After(3 * time.Second):
			t.Fatal("the abandoned call's reply never reached its give-back")
		}
	})
}

// release holds back replies (faultproxy.HoldReply(ch)) until free.
type release struct {
	t    *testing.T
	ch   chan struct{}
	once sync.Once
}

// newRelease returns a release, freed when the test ends.
func newRelease(t *testing.T) *release {
	r := &release{t: t, ch: make(chan struct{})}
	t.Cleanup(r.free)
	return r
}

func (r *release) free() { r.once.Do(func() { close(r.ch) }) }

// heldLiveness is how long whileHeld waits for a call that must not wait
// for a held reply: far past what such a call takes even on a busy
// machine, and finite only so that a broken one fails rather than hangs.
const heldLiveness = 10 * time.Second

// whileHeld runs f, which must return while the replies r holds back are
// still held (it must not wait for them), and fails the test with what
// if it did not: an order, not a bound in milliseconds. f may be called
// from any goroutine; so may whileHeld.
func (r *release) whileHeld(what string, f func()) {
	r.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		select {
		case <-r.ch:
			r.t.Errorf("%s: it returned after the held reply was released", what)
		default:
		}
		return
	case <-time.After(heldLiveness):
	}
	r.free()
	<-done
	r.t.Errorf("%s: it waited for the held reply (%v)", what, heldLiveness)
}

// A batch some of whose scripts Redis no longer has (SCRIPT FLUSH) is
// answered whole: those are sent again as EVAL, the others are not, and
// each reply is dated by the pipeline that produced it.
func TestNoScriptInTheMiddleOfABatch(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	admin := srv.Client(t)
	rdb := srv.Client(t)
	rec := &recorder{}
	rdb.AddHook(rec)
	tr := newT(t, rdb, Options{})
	require.NoError(t, admin.ScriptFlush(bg).Err())
	require.NoError(t, lua.Renew.Load(bg, admin).Err()) // cached; lock.lua is not
	rec.reset()
	rs := tr.DoAll(bg, []Call{
		lockCall("tr:n1"),
		{Script: lua.Renew, Keys: []string{"tr:n2"}, Args: []any{1000, "x:1"}},
		lockCall("tr:n3"),
		{Keys: []string{"tr:n4"}, Args: []any{"set", "tr:n4", "v"}},
	})
	locked(t, rs[0])
	locked(t, rs[2])
	n, err := rs[1].Int64()
	require.NoError(t, err)
	assert.Zero(t, n)
	require.NoError(t, rs[3].Err())
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha", "set", "eval", "eval"}, rec.sent())
	assert.Equal(t, rs[1].Pipe, rs[3].Pipe)
	assert.NotEqual(t, rs[0].Pipe, rs[1].Pipe, "sent again in a pipeline of their own")
	assert.Equal(t, rs[0].Pipe, rs[2].Pipe)
	assert.True(t, rs[0].Sent.After(rs[1].Sent), "a resent script's lease counts from its resend")
}

// On the full-duplex path too, a script Redis no longer has is sent again
// whole, once, and its reply dated from then; a release's write counter
// then says it was written once (NOSCRIPT: the first write ran nothing).
func TestNoScriptFullDuplex(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	rdb := srv.Client(t)
	rec := &recorder{}
	rdb.AddHook(rec)
	tr := newT(t, rdb, Options{})
	require.NoError(t, tr.Do(bg, lockCall("tr:fd:warm"), nil).Err())
	require.NoError(t, srv.Client(t).ScriptFlush(bg).Err())
	rec.reset()
	before := time.Now()
	k, w := Counted(Call{Script: lua.Unlock, Keys: []string{"tr:fd:warm"}, Args: []any{"tr:owner", 1, 30000, Publish, "0", "tr:chan"}})
	r := tr.Do(bg, k, nil)
	n, err := r.Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "released")
	assert.False(t, w.Again(), "written once that could run")
	assert.Equal(t, []string{"evalsha", "eval"}, rec.sent())
	assert.True(t, r.Sent.After(before))
}

// With AckReplicas, the calls of a batch that take something are followed
// by one WAIT, whose answer each reply carries; a call alone that takes
// something waits too; calls that take nothing go without WAIT.
func TestOneWaitPerBatch(t *testing.T) {
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	_ = replica
	bg := context.Background()
	rdb := srv.Client(t)
	require.Eventually(t, func() bool {
		n, err := rdb.Do(bg, "wait", 1, 100).Int64()
		return err == nil && n == 1
	}, 5*time.Second, 50*time.Millisecond, "the replica acknowledges writes")
	rec := &recorder{}
	var pipes atomic.Int64
	rdb.AddHook(rec)
	rdb.AddHook(pipeCounter{&pipes})
	tr := newT(t, rdb, Options{AckReplicas: 1, AckTimeout: time.Second})
	require.NoError(t, tr.Do(bg, lockCall("tr:w0"), nil).Err()) // loads the script
	rec.reset()
	pipes.Store(0)
	rs := tr.DoAll(bg, []Call{lockCall("tr:w1"), lockCall("tr:w2"), lockCall("tr:w3"), lockCall("tr:w4")})
	for _, r := range rs {
		locked(t, r)
		assert.EqualValues(t, 1, r.Acked)
		assert.Equal(t, rs[0].Pipe, r.Pipe)
	}
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha", "evalsha", "wait"}, rec.sent())
	assert.EqualValues(t, 1, pipes.Load())

	rec.reset()
	r := tr.Do(bg, lockCall("tr:w5"), nil)
	locked(t, r)
	assert.EqualValues(t, 1, r.Acked)
	assert.Equal(t, []string{"evalsha", "wait"}, rec.sent())

	rec.reset()
	r = tr.Do(bg, Call{Script: lua.Unlock, Keys: []string{"tr:w1"}, Args: []any{"tr:owner", 1, 30000, Publish, "0", "tr:w1:chan"}}, nil)
	require.NoError(t, r.Err())
	assert.NotContains(t, rec.sent(), "wait", "a release does not wait for replicas")
	assert.EqualValues(t, -1, r.Acked)
}

type ctxKey struct{}

// The user's hooks see every command the transport sends, with the
// caller's context values (a tracer's span, say), never its end: a call
// alone carries its caller's, a batch its first caller's. What the hooks
// count is what Redis ran.
func TestHooksSeeEveryCommandWithItsCallersValues(t *testing.T) {
	paths(t, func(t *testing.T, noFD bool) {
		srv := redistest.Start(t)
		rdb := srv.Client(t)
		seen := &valueHook{}
		rdb.AddHook(seen)
		tr := newT(t, rdb, Options{NoFullDuplex: noFD})
		bg := context.Background()
		require.NoError(t, lua.Lock.Load(bg, srv.Client(t)).Err()) // no NOSCRIPT: one command a call
		for i := range 10 {
			ctx, cancel := context.WithCancel(context.WithValue(bg, ctxKey{}, "alone"))
			require.NoError(t, tr.Do(ctx, lockCall("tr:h:"+strconv.Itoa(i)), nil).Err())
			cancel()
		}
		ctx := context.WithValue(bg, ctxKey{}, "batch")
		for _, r := range tr.DoAll(ctx, []Call{lockCall("tr:h:b1"), lockCall("tr:h:b2")}) {
			require.NoError(t, r.Err())
		}
		info := srv.Client(t).Info(bg, "commandstats").Val()
		var ran int64
		for _, line := range strings.Split(info, "\r\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") || strings.HasPrefix(line, "cmdstat_eval:") {
				f := strings.SplitN(strings.TrimPrefix(line[strings.Index(line, ":")+1:], "calls="), ",", 2)
				v, _ := strconv.ParseInt(f[0], 10, 64)
				ran += v
			}
		}
		assert.EqualValues(t, ran, seen.scripts.Load(), "every script Redis ran, a hook saw")
		assert.EqualValues(t, 10, seen.count("alone"))
		assert.EqualValues(t, 2, seen.count("batch"))
		assert.Zero(t, seen.ended.Load(), "a hook saw a command whose context had ended")
	})
}

// The write counter of a call: written once, it says so; written again
// by go-redis (its connection closed after the write, go-redis retries
// it on a new one), it says that, on every path.
func TestWritesCounted(t *testing.T) {
	paths(t, func(t *testing.T, noFD bool) {
		srv := redistest.Start(t)
		rdb, hook := hooked(t, srv.Addr())
		tr := newT(t, rdb, Options{NoFullDuplex: noFD})
		bg := context.Background()
		require.NoError(t, lua.Unlock.Load(bg, srv.Client(t)).Err())
		unlock := func(key string) (Call, *Writes) {
			return Counted(Call{Script: lua.Unlock, Keys: []string{key}, Args: []any{"tr:owner", 1, 30000, Publish, "0", "c"}, Direct: true})
		}
		require.NoError(t, tr.Do(bg, lockCall("tr:wc1"), nil).Err())
		k, w := unlock("tr:wc1")
		require.NoError(t, tr.Do(bg, k, nil).Err())
		assert.False(t, w.Again(), "written once")

		require.NoError(t, tr.Do(bg, lockCall("tr:wc2"), nil).Err())
		sha := lua.Unlock.Hash()
		r := hook.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Action: faultproxy.CloseAfterWrite(),
			Args: func(args []string) bool { return len(args) > 3 && args[1] == sha && args[3] == "tr:wc2" }})
		k, w = unlock("tr:wc2")
		n, err := tr.Do(bg, k, nil).Int64()
		require.Equal(t, 1, r.Fired())
		if err == nil {
			assert.EqualValues(t, 3, n, "the second run finds the hold its first released")
			assert.True(t, w.Again(), "written twice")
		}

		// What it cannot see (the README says so): a first write that
		// failed before any byte reached Redis still counts. Its hold
		// deleted meanwhile, the release is taken as written twice.
		r = hook.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Action: faultproxy.FailWrite(),
			Args: func(args []string) bool { return len(args) > 3 && args[1] == sha && args[3] == "tr:wc3" }})
		k, w = unlock("tr:wc3")
		n, err = tr.Do(bg, k, nil).Int64()
		require.Equal(t, 1, r.Fired())
		require.NoError(t, err)
		assert.EqualValues(t, 3, n, "the hold is gone")
		assert.True(t, w.Again(), "counted as written twice")
	})
}

// recorder records the names of the commands sent (process and pipeline
// hooks), without a new connection's handshake.
type recorder struct {
	mu    sync.Mutex
	names []string
}

func (r *recorder) reset() { r.mu.Lock(); r.names = nil; r.mu.Unlock() }
func (r *recorder) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.names {
		if n != "hello" && n != "client" {
			out = append(out, n)
		}
	}
	return out
}
func (r *recorder) add(n string)                                { r.mu.Lock(); r.names = append(r.names, n); r.mu.Unlock() }
func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.add(cmd.Name()); return next(ctx, cmd) }
}
func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.add(c.Name())
		}
		return next(ctx, cmds)
	}
}

// pipeCounter counts pipelines.
type pipeCounter struct{ n *atomic.Int64 }

func (pipeCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { p.n.Add(1); return next(ctx, cmds) }
}

// valueHook counts the scripts it sees, by the value of ctxKey in their
// context, and the commands whose context had ended.
type valueHook struct {
	scripts atomic.Int64
	ended   atomic.Int64
	mu      sync.Mutex
	byValue map[string]int
}

func (v *valueHook) count(val string) int { v.mu.Lock(); defer v.mu.Unlock(); return v.byValue[val] }
func (v *valueHook) see(ctx context.Context, cmd redis.Cmder) {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return
	}
	v.scripts.Add(1)
	if ctx.Err() != nil {
		v.ended.Add(1)
	}
	if s, ok := ctx.Value(ctxKey{}).(string); ok {
		v.mu.Lock()
		if v.byValue == nil {
			v.byValue = map[string]int{}
		}
		v.byValue[s]++
		v.mu.Unlock()
	}
}
func (v *valueHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (v *valueHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { v.see(ctx, cmd); return next(ctx, cmd) }
}
func (v *valueHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			v.see(ctx, c)
		}
		return next(ctx, cmds)
	}
}

// nameOn returns a key whose slot the master s serves.
func nameOn(t *testing.T, cc *redis.ClusterClient, s *redistest.Server, prefix string) string {
	t.Helper()
	for i := 0; ; i++ {
		name := prefix + ":" + strconv.Itoa(i)
		node, err := cc.MasterForKey(context.Background(), name)
		require.NoError(t, err)
		if node.Options().Addr == s.Addr() {
			return name
		}
	}
}

// replyErr is an error reply of Redis's.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// On the lane path, a reply that says "not now" (TRYAGAIN, CLUSTERDOWN,
// LOADING: Redis refused the command before running it; a hook stands
// for it here, before the command is written) has the call sent again
// within its bound: its context's deadline, and at most ReleaseTimeout (a
// release's bound when it has no deadline). A call still told "not now"
// when its bound comes gets that reply, before its context ends. (The
// full-duplex path meets real TRYAGAIN replies in TestReshardingOnEveryPath.)
func TestRetriesNotNow(t *testing.T) {
	srv := redistest.Start(t)
	rdb, hook := hooked(t, srv.Addr())
	tr := newT(t, rdb, Options{NoFullDuplex: true})
	bg := context.Background()
	for _, msg := range []string{
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"CLUSTERDOWN The cluster is down",
		"LOADING Redis is loading the dataset in memory",
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

	key := "tr:notnow:long"
	rule := hook.OnCommand(faultproxy.CommandRule{Args: onKey(key), Action: faultproxy.Fail(replyErr("TRYAGAIN Multiple keys request during rehashing of slot"))})
	defer rule.Remove()
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	r := tr.Do(ctx, lockCall(key), nil)
	assert.False(t, r.Gone, "the reply came before the context ended")
	require.ErrorContains(t, r.Err(), "TRYAGAIN")
	assert.NoError(t, ctx.Err())
	assert.Greater(t, rule.Fired(), 2)
}

// A slot being resharded, its keys split between two masters: a call on
// one moved key follows ASK (with AckReplicas, ASKING, the call and WAIT
// on the importing master's connection), a call on keys split between the
// two is told TRYAGAIN and sent again until the migration ends, on every
// path: a call alone (on its master's full-duplex connection, and in the
// cluster client's pipelines) and a batch, without and with replica
// acknowledgement.
func TestReshardingOnEveryPath(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 1)
	bg := context.Background()
	cc := rc.Client(t)
	ackCC := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = ackCC.Close() })
	plain, acked := newT(t, cc, Options{}), newT(t, ackCC, Options{AckReplicas: 1, AckTimeout: time.Second})
	lanes := newT(t, cc, Options{NoFullDuplex: true})
	tag := "{" + nameOn(t, cc, rc.Masters[0], "trresh") + "}"
	src := rc.Masters[0].Client(t)
	for _, k := range []string{"moved", "split1", "split2"} {
		require.NoError(t, src.Set(bg, tag+k, 1, 0).Err())
	}
	require.NoError(t, plain.Do(bg, Call{Keys: []string{tag + "moved"}, Args: []any{"get", tag + "moved"}}, nil).Err(), "warm")
	mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], tag), rc.Masters[1])
	mig.Move(t, tag+"moved", tag+"split2")

	// One moved key: ASK, at once.
	for name, tr := range map[string]*Transport{"plain": plain, "lanes": lanes, "acked": acked} {
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
		defer close(done) // also when Finish fails the test (Goexit): the test waits for it
		time.Sleep(400 * time.Millisecond)
		finishing.Store(true)
		mig.Finish(t)
	}()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	split := Call{Keys: []string{tag + "split1", tag + "split2"}, Args: []any{"exists", tag + "split1", tag + "split2"}}
	var wg sync.WaitGroup
	for name, tr := range map[string]*Transport{"plain": plain, "lanes": lanes} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := tr.Do(ctx, split, nil).Int64()
			assert.NoError(t, err, name)
			assert.EqualValues(t, 2, n, name)
			assert.True(t, finishing.Load(), "%s: it waited for the migration to end", name)
		}()
	}
	wg.Wait()
	<-done
	rs := plain.DoAll(ctx, []Call{split})
	n, err := rs[0].Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
}

// A batch that meets TRYAGAIN (first) and ASK (after it) on a Cluster's
// migrating slot runs each call once: go-redis's cluster pipeline, which
// sends a node's whole batch again when its first command answers
// TRYAGAIN, must not send the call it is already following to the ASK
// target a second time (it did: the call ran twice, and two goroutines
// read replies into one command).
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
// failover and after a slot migration: on a master's full-duplex
// connection (go-redis's cluster router runs a MOVED again through the
// cluster client), through the cluster client's pipelines, and on a
// master's own connection (AckReplicas), where the MOVED reply has the
// slot map reloaded.
func TestFollowsMovedSlots(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	bg := context.Background()
	ackRdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = ackRdb.Close() })
	trs := map[string]*Transport{
		"full-duplex":       newT(t, rc.Client(t), Options{}),
		"cluster pipeline":  newT(t, rc.Client(t), Options{NoFullDuplex: true}),
		"master connection": newT(t, ackRdb, Options{AckReplicas: 1, AckTimeout: time.Second}),
	}
	cc := rc.Client(t)
	from := rc.Masters[0]
	names := map[string]string{}
	for what, tr := range trs {
		names[what] = nameOn(t, cc, from, "trmv")
		require.NoError(t, tr.Do(bg, lockCall(names[what]+":warm"), nil).Err())
	}
	check := func(t *testing.T, suffix string) {
		for what, tr := range trs {
			r := tr.Do(bg, lockCall(names[what]+suffix), nil)
			require.NoError(t, r.Err(), what)
			locked(t, r)
		}
	}
	t.Run("failover", func(t *testing.T) {
		rc.Failover(t, 0, false)
		check(t, ":fo")
	})
	t.Run("migration", func(t *testing.T) {
		base := names["cluster pipeline"]
		for what := range names {
			names[what] = "{" + base + "}" + strings.ReplaceAll(what, " ", "-") // one slot
		}
		rc.MigrateSlot(t, redistest.SlotOf(t, rc.Masters[0], base), rc.Masters[1])
		check(t, ":mig")
	})
}

// A caller whose context (without a deadline) ends while its call, told
// "not now" (LOADING: a server restarting with its data), waits to be sent
// again leaves at once, on every path, and the call is not sent again:
// nothing ran, nothing to give back. (Issue 33, break 4: the full-duplex
// path waited out the pause, up to notNowMaxPause, in the caller's
// goroutine.)
func TestRefusedCallLeavesWithItsCaller(t *testing.T) {
	paths(t, func(t *testing.T, noFD bool) {
		srv := redistest.Start(t, redistest.SlowLoading(200*time.Microsecond)...)
		// go-redis does not retry LOADING itself: each refusal is the
		// transport's to wait out.
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		hook := faultproxy.NewHook()
		rdb.AddHook(hook)
		tr := newT(t, rdb, Options{NoFullDuplex: noFD})
		key := "tr:refused:leaves"
		get := func(args []any) bool { return len(args) == 2 && args[0] == "get" && args[1] == key }
		sends := hook.OnCommand(faultproxy.CommandRule{Args: get, Action: faultproxy.DelayBefore(0)})
		restarted := make(chan struct{})
		go func() { defer close(restarted); srv.RestartLoading(t, 10000) }() // about 2s of LOADING
		defer func() { <-restarted }()
		probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		defer probe.Close()
		require.Eventually(t, func() bool { return notNow(probe.Ping(context.Background()).Err()) }, 10*time.Second, time.Millisecond, "the server answers LOADING")

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var cancelled atomic.Int64
		go func() {
			// The sixth refusal starts a pause of notNowMaxPause; the
			// caller leaves 50ms after the sixth send, in that pause
			// (the refusal comes within a few ms).
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
		// Not after the pause (150ms more): at once, but for what the
		// machine delayed the caller's goroutine.
		assert.Less(t, late, notNowMaxPause/2+lag.Slack(), "the caller left %v after its context ended (the machine's worst delay meanwhile: %v)", late, lag.Worst())
		fired := sends.Fired()
		time.Sleep(2 * notNowMaxPause)
		assert.Equal(t, fired, sends.Fired(), "sent again after its caller left")
		if !noFD {
			assert.ErrorIs(t, r.Err(), ErrNotSent)
			assert.False(t, r.Gone, "nothing to give back")
		}
	})
}
