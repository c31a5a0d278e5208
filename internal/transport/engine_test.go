package transport

import (
	"context"
	"errors"
	"runtime"
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

// The engine on its own, against real servers: calls in, replies out.

// newT returns a transport on rdb, closed and drained with the test.
func newT(t testing.TB, rdb redis.UniversalClient, opt Options) *Transport {
	tr := New(rdb, opt)
	t.Cleanup(func() { tr.Close(); tr.Drain(5 * time.Second) })
	return tr
}

// lockCall is the lock script's call taking key for a new owner.
func lockCall(key string) Call {
	return Call{Script: lua.Lock, Keys: []string{key}, Args: []any{30000, "tr:owner", 0}, Takes: true}
}

// unlockCall is the unlock script's call releasing key's lockCall.
func unlockCall(key string) Call {
	return Call{Script: lua.Unlock, Keys: []string{key}, Args: []any{"tr:owner", 1, 30000, Publish, "0", "tr:chan"}, Direct: true}
}

func locked(t *testing.T, r Reply) {
	t.Helper()
	n, err := r.Int64() // lua/lock.lua's grant: the count
	require.NoError(t, err)
	assert.Equal(t, int64(1), n)
}

// commandCalls returns how many times the server of rdb ran each of
// names since its statistics were reset (INFO commandstats: calls).
func commandCalls(t *testing.T, rdb *redis.Client, names ...string) int64 {
	return commandStat(t, rdb, "calls", names...)
}

// commandFailed returns how many of those calls failed (failed_calls: a
// script's error, NOSCRIPT).
func commandFailed(t *testing.T, rdb *redis.Client, names ...string) int64 {
	return commandStat(t, rdb, "failed_calls", names...)
}

func commandStat(t *testing.T, rdb *redis.Client, stat string, names ...string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, want := range names {
			if name != "cmdstat_"+want {
				continue
			}
			for _, f := range strings.Split(stats, ",") {
				if k, v, _ := strings.Cut(f, "="); k == stat {
					x, _ := strconv.ParseInt(v, 10, 64)
					n += x
				}
			}
		}
	}
	return n
}

// onKey matches the script commands whose first key is key.
func onKey(key string) func([]any) bool {
	return func(args []any) bool { return len(args) > 3 && args[3] == key }
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
// if it did not: an order, not a bound in milliseconds.
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

// A call alone is written and read by its caller: its reply, written and
// answered; a call without a script is its command; a nil reply is
// redis.Nil, as go-redis says it.
func TestEngineDo(t *testing.T) {
	srv := redistest.Start(t)
	tr := newT(t, srv.Client(t), Options{})
	bg := context.Background()
	r := tr.Do(bg, lockCall("e:1"), nil)
	locked(t, r)
	assert.True(t, r.Written())
	assert.True(t, r.Answered())
	assert.False(t, r.Sent.IsZero())
	assert.EqualValues(t, -1, r.Acked)
	n, err := tr.Do(bg, unlockCall("e:1"), nil).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n, "released")

	require.NoError(t, tr.Do(bg, Call{Keys: []string{"e:s"}, Args: []any{"set", "e:s", "v"}}, nil).Err())
	v, err := tr.Do(bg, Call{Keys: []string{"e:s"}, Args: []any{"get", "e:s"}}, nil).Text()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	r = tr.Do(bg, Call{Keys: []string{"e:none"}, Args: []any{"get", "e:none"}}, nil)
	assert.ErrorIs(t, r.Err(), redis.Nil)
	assert.True(t, r.Answered())

	r = tr.Do(bg, Call{Keys: []string{"e:s"}, Args: []any{"hget", "e:s", "f"}}, nil)
	var re redis.Error
	require.ErrorAs(t, r.Err(), &re, "Redis's error reply is a redis.Error")
	assert.Contains(t, r.Err().Error(), "WRONGTYPE")
}

// Many callers at once: each gets its own reply, calls queued while a
// write is under way go out together (fewer writes than calls), and
// Redis ran each once.
func TestEngineConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	tr := newT(t, srv.Client(t), Options{})
	bg := context.Background()
	require.NoError(t, tr.Do(bg, lockCall("e:warm"), nil).Err())
	require.NoError(t, admin.ConfigResetStat(bg).Err())
	const goroutines, each = 64, 50
	var wg sync.WaitGroup
	pipes := sync.Map{}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				key := "e:c:" + strconv.Itoa(g) + ":" + strconv.Itoa(i)
				r := tr.Do(bg, Call{Keys: []string{key}, Args: []any{"incrby", key, g*1000 + i}}, nil)
				n, err := r.Int64()
				if !assert.NoError(t, err) {
					return
				}
				assert.EqualValues(t, g*1000+i, n, "its own reply")
				pipes.Store(r.Pipe, true)
			}
		}()
	}
	wg.Wait()
	writes := 0
	pipes.Range(func(any, any) bool { writes++; return true })
	assert.EqualValues(t, goroutines*each, commandCalls(t, admin, "incrby"))
	t.Logf("%d calls in %d writes", goroutines*each, writes)
	assert.Less(t, writes, goroutines*each, "calls written together")
}

// A batch's calls to one node go in one write, and each gets its reply.
func TestEngineDoAll(t *testing.T) {
	srv := redistest.Start(t)
	tr := newT(t, srv.Client(t), Options{})
	bg := context.Background()
	calls := make([]Call, 100)
	for i := range calls {
		calls[i] = lockCall("e:b:" + strconv.Itoa(i))
	}
	require.NoError(t, tr.Do(bg, lockCall("e:b:warm"), nil).Err())
	rs := tr.DoAll(bg, calls)
	for _, r := range rs {
		locked(t, r)
		assert.Equal(t, rs[0].Pipe, r.Pipe, "one write")
	}
	got := make(chan Reply, len(calls))
	tr.Async(func(k Call, r Reply) { got <- r }, calls...)
	for range calls {
		select {
		case r := <-got:
			locked(t, r) // the same owner, counted from 0 again
		case <-time.After(5 * time.Second):
			t.Fatal("an Async reply never came")
		}
	}
}

// A batch some of whose scripts Redis no longer has (SCRIPT FLUSH) is
// answered whole: those are sent again as EVAL, together, the others are
// not, and each reply is dated by its own write.
func TestEngineNoScriptMidBatch(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	admin := srv.Client(t)
	tr := newT(t, srv.Client(t), Options{})
	require.NoError(t, admin.ScriptFlush(bg).Err())
	require.NoError(t, lua.Renew.Load(bg, admin).Err()) // cached; lock.lua is not
	require.NoError(t, admin.ConfigResetStat(bg).Err())
	rs := tr.DoAll(bg, []Call{
		lockCall("e:n1"),
		{Script: lua.Renew, Keys: []string{"e:n2"}, Args: []any{1000, "x:1"}},
		lockCall("e:n3"),
		{Keys: []string{"e:n4"}, Args: []any{"set", "e:n4", "v"}},
	})
	locked(t, rs[0])
	locked(t, rs[2])
	n, err := rs[1].Int64()
	require.NoError(t, err)
	assert.Zero(t, n)
	require.NoError(t, rs[3].Err())
	assert.EqualValues(t, 2, commandCalls(t, admin, "eval"), "the two scripts Redis lacked, whole")
	assert.EqualValues(t, 3, commandCalls(t, admin, "evalsha"), "each script once by its digest")
	assert.Equal(t, rs[1].Pipe, rs[3].Pipe)
	assert.NotEqual(t, rs[0].Pipe, rs[1].Pipe, "sent again in a write of their own")
	assert.Equal(t, rs[0].Pipe, rs[2].Pipe)
	assert.True(t, rs[0].Sent.After(rs[1].Sent), "a resent script's lease counts from its resend")

	// Alone too: sent whole once, answered.
	require.NoError(t, admin.ScriptFlush(bg).Err())
	n, err = tr.Do(bg, unlockCall("e:n1"), nil).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)
}

// A reply that does not come (the server paused) delays no caller past
// its own context: a caller alone on its connection and callers queued
// behind it leave when their contexts end; those whose calls were written
// get their replies in late once the server answers; those whose calls
// were not written never see them written.
func TestEngineSilentServer(t *testing.T) {
	srv := redistest.Start(t)
	tr := newT(t, srv.Client(t), Options{})
	bg := context.Background()
	require.NoError(t, tr.Do(bg, lockCall("e:warm"), nil).Err())
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	lag := watchLag(t)
	late := make(chan Reply, 64)
	var gone atomic.Int32
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			r := tr.Do(ctx, lockCall("e:silent:"+strconv.Itoa(i)), func(r Reply) { late <- r })
			took := time.Since(start)
			assert.Less(t, took, 100*time.Millisecond+50*time.Millisecond+lag.Slack(), "left with its context")
			require.Error(t, r.Err())
			if r.Gone {
				gone.Add(1)
				assert.ErrorIs(t, r.Err(), context.DeadlineExceeded)
			} else {
				assert.ErrorIs(t, r.Err(), ErrNotSent)
			}
		}()
	}
	wg.Wait()
	srv.Resume()
	resumed = true
	// The written calls' replies come: each to its late.
	assert.Positive(t, gone.Load(), "some were written")
	for range gone.Load() {
		select {
		case r := <-late:
			locked(t, r)
		case <-time.After(5 * time.Second):
			t.Fatal("a written call's reply never reached its late")
		}
	}
	select {
	case <-late:
		t.Fatal("a call not written reached late")
	case <-time.After(100 * time.Millisecond):
	}
}

// Close (Drain) while calls are in flight on a silent server: Drain gives
// up when told, what was in flight fails, the engine's goroutines end, and
// a call after Drain is not sent.
func TestEngineDrainWhileInFlight(t *testing.T) {
	srv := redistest.Start(t)
	tr := New(srv.Client(t), Options{})
	bg := context.Background()
	require.NoError(t, tr.Do(bg, lockCall("e:warm"), nil).Err())
	runtime.GC()
	g0 := runtime.NumGoroutine()
	srv.Pause()
	defer srv.Resume()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tr.Do(bg, Call{Keys: []string{"k"}, Args: []any{"incr", "e:d:" + strconv.Itoa(i)}}, nil).Err()
		}()
	}
	require.Eventually(t, func() bool { return tr.load() == 16 }, 2*time.Second, time.Millisecond)
	tr.Close()
	start := time.Now()
	tr.Drain(200 * time.Millisecond)
	assert.Less(t, time.Since(start), 2*time.Second)
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.True(t, errors.Is(err, ErrNoReply) || errors.Is(err, ErrNotSent), "%v", err)
	}
	assert.ErrorIs(t, tr.Do(bg, lockCall("e:after"), nil).Err(), ErrNotSent)
	if !assert.Eventually(t, func() bool { return tr.Workers() == 0 }, 2*time.Second, time.Millisecond) {
		buf := make([]byte, 1<<20)
		t.Log(string(buf[:runtime.Stack(buf, true)]))
	}
	var g1 int
	assert.Eventually(t, func() bool {
		g1 = runtime.NumGoroutine()
		return g1 <= g0+2
	}, 5*time.Second, 10*time.Millisecond, "goroutines: %d before, %d after", g0, g1)
}

// A connection reset while calls are in flight: those written are told
// written without a reply (never sent again), and the engine dials a new
// connection for the next.
func TestEngineConnectionReset(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.New(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	require.NoError(t, tr.Do(bg, lockCall("e:warm"), nil).Err())
	p.Blackhole(true)
	done := make(chan Reply, 1)
	go func() { done <- tr.Do(bg, Call{Keys: []string{"e:r"}, Args: []any{"incr", "e:r"}}, nil) }()
	require.Eventually(t, func() bool { return tr.load() == 1 }, 2*time.Second, time.Millisecond)
	p.CutAll() // still blackholed: the INCR's bytes were dropped
	r := <-done
	p.Blackhole(false)
	require.ErrorIs(t, r.Err(), ErrNoReply)
	assert.True(t, r.Written())
	assert.False(t, r.Answered())
	n, err := tr.Do(bg, Call{Keys: []string{"e:r"}, Args: []any{"incr", "e:r"}}, nil).Int64()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the first INCR never reached Redis (blackholed), and was not sent again")
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

// The user's client closed: redisync's calls fail (not sent, wrapping
// redis.ErrClosed) within closedEvery, and its connections close.
func TestEngineFollowsTheClientsClose(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	locked(t, tr.Do(bg, lockCall("cl:1"), nil))
	require.NoError(t, rdb.Close())
	time.Sleep(2 * closedEvery)
	r := tr.Do(bg, lockCall("cl:2"), nil)
	require.ErrorIs(t, r.Err(), redis.ErrClosed)
	require.ErrorIs(t, r.Err(), ErrNotSent)
	assert.Zero(t, srv.Client(t).Exists(bg, "cl:2").Val())
	assert.Eventually(t, func() bool { return len(tr.single.all()) == 0 }, time.Second, time.Millisecond, "its connections closed")
}

// Redis restarts while the engine's connections are idle: the calls after
// it do not go on a connection the old process closed (its bytes would
// never reach the new one, and it would be told written without a reply):
// each idle connection is looked at before it is written to.
func TestEngineCallAfterRestartOnIdleConnections(t *testing.T) {
	srv := redistest.Start(t)
	tr := newT(t, srv.Client(t), Options{})
	bg := context.Background()
	var wg sync.WaitGroup
	for i := range 8 { // both connections dialled
		wg.Add(1)
		go func() { defer wg.Done(); _ = tr.Do(bg, lockCall("rs:"+strconv.Itoa(i)), nil).Err() }()
	}
	wg.Wait()
	require.NotEmpty(t, tr.single.all())
	srv.Restart(t)
	for i := range 2 * nodeConns {
		r := tr.Do(bg, lockCall("rs:after:"+strconv.Itoa(i)), nil)
		locked(t, r)
	}
}

// A connection on which Redis answers nothing for the client's
// ReadTimeout while calls are in flight (a link that drops bytes without
// closing) is taken for dead: the calls written on it are told, and the
// next ones go on a new connection.
func TestEngineSilentConnectionIsDead(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.New(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	locked(t, tr.Do(bg, lockCall("sil:warm"), nil))
	p.Blackhole(true)
	start := time.Now()
	r := tr.Do(bg, Call{Keys: []string{"sil:a"}, Args: []any{"incr", "sil:a"}}, nil) // no deadline of its own
	took := time.Since(start)
	p.Blackhole(false)
	require.ErrorIs(t, r.Err(), ErrNoReply)
	assert.Contains(t, r.Err().Error(), "answered nothing")
	assert.Less(t, took, 2*time.Second)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	// In a batch, through the reader: the same.
	locked(t, tr.Do(bg, lockCall("sil:warm2"), nil)) // a new connection
	p.Blackhole(true)
	rs := tr.DoAll(bg, []Call{{Keys: []string{"sil:b"}, Args: []any{"incr", "sil:b"}}})
	p.Blackhole(false)
	require.ErrorIs(t, rs[0].Err(), ErrNoReply)
	n, err := tr.Do(bg, Call{Keys: []string{"sil:c"}, Args: []any{"incr", "sil:c"}}, nil).Int64()
	require.NoError(t, err, "a new connection")
	assert.EqualValues(t, 1, n)
}
