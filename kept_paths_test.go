package redisync

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The other paths by which a release can reach no server are kept too
// (internal/holds/kept.go), as kept_test.go's releases are: the release
// of the holds still live at Close, within Close's own bound; the undo of
// an attempt that was abandoned before its grant came; the give-back of a
// handoff nobody took. Each is sent again until Redis answers it or what
// it releases would have ended.

// Close releases the holds still live; when their release is refused, it
// is sent again within Close's bound (holds.ReleaseTimeout): A1's server
// is back 1s after Close began, and B takes each of A1's locks within
// backBound of that, not at the lease's end; A2's never comes back, and
// A2's Close returns at its bound.
func TestKeptReleaseAtCloseWithinItsBound(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	o1, o2 := setUpOutage(t, "kept:close1"), setUpOutage(t, "kept:close2")
	o1.p.Refuse(t, true)
	o2.p.Refuse(t, true)
	var took1, took2 time.Duration
	var got map[string]time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	back := start.Add(time.Second)
	wg.Go(func() { assert.NoError(t, o1.a.Close()); took1 = time.Since(start) })
	wg.Go(func() { assert.NoError(t, o2.a.Close()); took2 = time.Since(start) })
	wg.Go(func() { got = o1.takeAll(t, back, backBound+3*time.Second) })
	time.Sleep(time.Until(back))
	o1.p.Refuse(t, false)
	wg.Wait()
	t.Logf("A1's Close (its server back after 1s) took %v, A2's (never back) %v; B took A1's locks after the server was back: %v", took1, took2, got)
	for name, d := range got {
		assert.True(t, d >= 0 && d < backBound, "%s: B took it %v after the server was back (-1: not within the wait); want < %v", name, d, backBound)
	}
	for _, name := range []string{o2.mu, o2.rw, o2.sem, o2.elect} {
		n, err := o2.srv.Client(t).Exists(context.Background(), name).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "%s: A2's release reached no server", name)
	}
	lag := startLag()
	defer lag.Stop()
	assert.Less(t, took1, holds.ReleaseTimeout, "A1's Close returns once its releases are answered")
	assert.Less(t, took2, holds.ReleaseTimeout+500*time.Millisecond+lag.Slack(), "A2's Close returns at its bound")
}

// refusedGiveBack waits until logs say a give-back reached no server:
// kept (kept.go), or, before those were kept, dropped.
func refusedGiveBack(t *testing.T, logs recHandler) {
	t.Helper()
	eventually(t, 2*holds.ReleaseTimeout, "the give-back refused", func() bool {
		for _, r := range logs.records() {
			if strings.Contains(r.Message, "a release reached no server") || strings.Contains(r.Message, "could not give back") {
				return true
			}
		}
		return false
	})
}

// outageClient returns A, a Client through a proxy of a server of its
// own, with a fault hook and its log; and B, a Client of that server
// directly.
func outageClient(t *testing.T) (p *faultproxy.Proxy, h *faultproxy.Hook, a, b *Client, logs recHandler, srv *redistest.Server) {
	srv = redistest.Start(t)
	p = faultproxy.New(t, srv.Addr())
	rdb, h := faultRDB(t, &redis.Options{Addr: p.Addr()})
	logs = newRecHandler()
	a, b = newClient(t, rdb, WithLogger(slog.New(logs))), newClient(t, srv.Client(t))
	return p, h, a, b, logs, srv
}

// takenSoonAfterBack has B take name's Mutex while A's proxy refuses, the
// server back 1s later, and checks that B took it within backBound of
// that.
func takenSoonAfterBack(t *testing.T, p *faultproxy.Proxy, b *Client, srv *redistest.Server, name string) {
	t.Helper()
	n, err := srv.Client(t).Exists(context.Background(), name).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "%s held in Redis during the outage", name)
	back := time.Now().Add(time.Second)
	got := make(chan time.Duration, 1)
	go func() {
		hctx, err := b.Mutex(name).TryLockFor(context.Background(), backBound+3*time.Second)
		if err != nil {
			got <- -1
			return
		}
		d := time.Since(back)
		assert.NoError(t, b.Mutex(name).Unlock(hctx))
		got <- d
	}()
	time.Sleep(time.Until(back))
	p.Refuse(t, false)
	d := <-got
	t.Logf("B took the lock %v after the server was back", d)
	assert.True(t, d >= 0 && d < backBound, "B took it %v after the server was back (-1: not within the wait); want < %v", d, backBound)
}

// An attempt abandoned before its grant came (its caller's wait ended)
// gives back what it took once the grant comes; that give-back, refused,
// is sent again until Redis answers it (the attempt's lease stands): B
// takes the lock within backBound of the server's return.
func TestKeptUndoOfAbandonedAttempt(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	p, h, a, b, logs, srv := outageClient(t)
	bg := context.Background()
	const name = "kept:undo"
	require.NoError(t, lua.Lock.Load(bg, srv.Client(t)).Err()) // the held reply is the grant, not NOSCRIPT
	late := holdReplies(t)
	held := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1,
		Action: faultproxy.HoldReply(late.ch)})
	tried := make(chan error, 1)
	go func() { _, err := a.Mutex(name).TryLockFor(bg, 300*time.Millisecond); tried <- err }()
	eventually(t, time.Second, "the attempt sent", func() bool { return held.Fired() == 1 })
	// The grant ran in Redis and its reply reached A (held by the hook)
	// before the server refuses: a cut before the reply was read would
	// make the outcome unknown (a sweep's, not this undo's).
	eventually(t, time.Second, "the grant run", func() bool {
		n, err := srv.Client(t).Exists(bg, name).Result()
		return err == nil && n == 1
	})
	time.Sleep(50 * time.Millisecond)
	p.Refuse(t, true) // before the attempt is left: what it left is given back to a server refusing
	require.Error(t, <-tried, "the attempt's wait ended before its reply")
	late.free() // the grant comes: its give-back is refused
	refusedGiveBack(t, logs)
	takenSoonAfterBack(t, p, b, srv, name)
}

// A handoff whose receiver left before its grant came is given back once
// it comes (holds.Machine.GiveBackHandoff); that give-back, refused, is
// sent again until Redis answers it: B takes the lock within backBound of
// the server's return.
func TestKeptGiveBackOfUntakenHandoff(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	p, h, a, b, logs, srv := outageClient(t)
	bg := context.Background()
	const name = "kept:handoff"
	require.NoError(t, lua.Handoff.Load(bg, srv.Client(t)).Err()) // the held reply is the grant, not NOSCRIPT
	m := a.Mutex(name)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	wctx, leave := context.WithCancel(bg)
	defer leave()
	w := idleWaiter(t, wctx, a, m)
	late := holdReplies(t)
	unlocked := slowHandoff(t, h, faultproxy.HoldReply(late.ch), m, hctx)
	leave() // the receiver leaves before the grant
	select {
	case r := <-w:
		require.Error(t, r.err, "the receiver left")
	case <-time.After(5 * time.Second):
		t.Fatal("the receiver did not leave")
	}
	p.Refuse(t, true)
	late.free() // the grant comes, nobody's: its give-back is refused
	select {
	case err := <-unlocked:
		t.Logf("A's Unlock returned %v", err)
	case <-time.After(2 * holds.ReleaseTimeout):
		t.Fatal("A's Unlock did not return")
	}
	refusedGiveBack(t, logs)
	takenSoonAfterBack(t, p, b, srv, name)
}

// An attempt abandoned while its script ran in Redis and its reply was
// lost (the caller's wait ended while Redis was paused; the reply, once
// it ran, never came: the connection died): what it may have taken is
// given back, owner-checked, once a server answers, rather than held
// until its lease ends.
func TestAbandonedAttemptWhoseReplyWasLostIsGivenBack(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	p, _, a, b, _, srv := outageClient(t)
	bg := context.Background()
	const name = "kept:lostlate"
	require.NoError(t, lua.Lock.Load(bg, srv.Client(t)).Err())
	warm, err := a.Mutex(name + ":warm").Lock(bg) // A's connection dialled
	require.NoError(t, err)
	require.NoError(t, a.Mutex(name+":warm").Unlock(warm))
	srv.Pause()
	tried := make(chan error, 1)
	go func() { _, err := a.Mutex(name).TryLockFor(bg, 300*time.Millisecond); tried <- err }()
	time.Sleep(100 * time.Millisecond) // written: waiting in the paused server's socket
	p.Blackhole(true)                  // its reply will be lost
	require.Error(t, <-tried, "the attempt's wait ended before its reply")
	srv.Resume()
	eventually(t, 2*time.Second, "the abandoned attempt's script run", func() bool {
		n, err := srv.Client(t).Exists(bg, name).Result()
		return err == nil && n == 1
	})
	p.CutAll() // the connection dies: the reply is lost for good
	p.Blackhole(false)
	start := time.Now()
	hctx, err := b.Mutex(name).TryLockFor(bg, backBound+3*time.Second)
	require.NoError(t, err, "B could not take the lock: A's abandoned grant was not given back")
	t.Logf("B took the lock %v after the reply was lost", time.Since(start))
	assert.Less(t, time.Since(start), backBound)
	require.NoError(t, b.Mutex(name).Unlock(hctx))
}
