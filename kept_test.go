package redisync

import (
	"context"
	"log/slog"
	"strconv"
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
)

// A release that reached no server is kept (internal/holds/kept.go): sent
// again until Redis answers it or the hold's lease would have ended. In
// these tests Client A reaches Redis through a proxy that refuses
// connections for a while (a stopped server, as A sees it); B reaches it
// directly. Every lease is the default 30s one.

// backBound is how soon after the server is back a lock whose release was
// kept must be taken by another Client: go-redis's pool, once its dials
// failed, probes the server once a second; the kept releases go out every
// holds.KeptEvery.
const backBound = 2 * time.Second

// keptFollow is how soon after a failover's switch (+switch-master) a
// lock whose release was kept during the outage must be taken by another
// Client (issue 46's bound).
const keptFollow = 1500 * time.Millisecond

// outageRelease is what a test of a kept release sets up: A holds a
// Mutex, an RWMutex's write lock, a Semaphore's one permit and an
// Election's leadership, through a proxy.
type outageRelease struct {
	p    *faultproxy.Proxy
	a, b *Client
	ra   *redis.Client
	srv  *redistest.Server
	logs recHandler // A's

	mu, rw, sem, elect             string
	aMu, aRW, aSem, aLead          context.Context
	muRel, rwRel, semRel, electRel error // what A's releases returned during the outage
}

func setUpOutage(t *testing.T, tag string) *outageRelease {
	o := &outageRelease{srv: redistest.Start(t), logs: newRecHandler(),
		mu: tag + ":mutex", rw: tag + ":rw", sem: tag + ":sem", elect: tag + ":elect"}
	o.p = faultproxy.New(t, o.srv.Addr())
	o.ra = redis.NewClient(&redis.Options{Addr: o.p.Addr()})
	t.Cleanup(func() { _ = o.ra.Close() })
	o.a, o.b = newClient(t, o.ra, WithLogger(slog.New(o.logs))), newClient(t, o.srv.Client(t))
	ctx := context.Background()
	var err error
	o.aMu, err = o.a.Mutex(o.mu).Lock(ctx)
	require.NoError(t, err)
	o.aRW, err = o.a.RWMutex(o.rw).Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, o.a.Semaphore(o.sem).SetPermits(ctx, 1))
	o.aSem, err = o.a.Semaphore(o.sem).Acquire(ctx, 1)
	require.NoError(t, err)
	o.aLead, err = o.a.Election(o.elect).Campaign(ctx, "a")
	require.NoError(t, err)
	return o
}

// releaseAll releases A's four holds at once while the proxy refuses, and
// checks that each release returns within its bound, as before.
func (o *outageRelease) releaseAll(t *testing.T) {
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { o.muRel = o.a.Mutex(o.mu).Unlock(o.aMu) })
	wg.Go(func() { o.rwRel = o.a.RWMutex(o.rw).Unlock(o.aRW) })
	wg.Go(func() { o.semRel = o.a.Semaphore(o.sem).Release(o.aSem, 1) })
	wg.Go(func() { o.electRel = o.a.Election(o.elect).Resign(o.aLead) })
	wg.Wait()
	took := time.Since(start)
	t.Logf("A's releases during the outage returned in %v: %v; %v; %v; %v", took, o.muRel, o.rwRel, o.semRel, o.electRel)
	assert.Less(t, took, holds.ReleaseTimeout+time.Second, "a release returns within its bound")
}

// givenUp waits until A has given up sending the release of each of
// names itself: its give-back was refused too (then it is kept, or, before
// releases were kept, dropped).
func givenUp(t *testing.T, logs recHandler, names ...string) {
	t.Helper()
	eventually(t, 2*holds.ReleaseTimeout, "the give-backs refused", func() bool {
		seen := map[string]bool{}
		for _, r := range logs.records() {
			if !strings.Contains(r.Message, "could not release a hold that ended") && !strings.Contains(r.Message, "a release reached no server") {
				continue
			}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "name" {
					seen[a.Value.String()] = true
				}
				return true
			})
		}
		for _, n := range names {
			if !seen[n] {
				return false
			}
		}
		return true
	})
}

// takeAll has B take the four locks, each waiting at most wait, and
// returns how long each took from from (-1: not within wait).
func (o *outageRelease) takeAll(t *testing.T, from time.Time, wait time.Duration) map[string]time.Duration {
	ctx := context.Background()
	out := map[string]time.Duration{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	take := func(name string, f func() (context.Context, error), release func(context.Context) error) {
		wg.Go(func() {
			hctx, err := f()
			d := time.Since(from)
			if err != nil {
				d = -1
			} else {
				assert.NoError(t, release(hctx))
			}
			mu.Lock()
			out[name] = d
			mu.Unlock()
		})
	}
	take("Mutex", func() (context.Context, error) { return o.b.Mutex(o.mu).TryLockFor(ctx, wait) }, o.b.Mutex(o.mu).Unlock)
	take("RWMutex", func() (context.Context, error) { return o.b.RWMutex(o.rw).TryLockFor(ctx, wait) }, o.b.RWMutex(o.rw).Unlock)
	take("Semaphore", func() (context.Context, error) { return o.b.Semaphore(o.sem).TryAcquireFor(ctx, 1, wait) },
		func(c context.Context) error { return o.b.Semaphore(o.sem).Release(c, 1) })
	take("Election", func() (context.Context, error) { return o.b.Election(o.elect).TryCampaignFor(ctx, "b", wait) },
		o.b.Election(o.elect).Resign)
	wg.Wait()
	return out
}

// The releases A made while its server refused connections are sent
// again once it is back, within their lease: B takes each lock within
// backBound of that moment, not at the lease's end. The outage lasts
// longer than a release's own attempts (its bound and its give-back's),
// which, before releases were kept, dropped it at the first refusal.
func TestKeptReleaseAnsweredAfterOutage(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	o := setUpOutage(t, "kept")
	o.p.Refuse(t, true)
	o.releaseAll(t)
	givenUp(t, o.logs, o.mu, o.rw, o.sem, o.elect)
	for _, name := range []string{o.mu, o.rw, o.sem, o.elect} {
		n, err := o.srv.Client(t).Exists(context.Background(), name).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "%s still held in Redis during the outage", name)
	}
	var got map[string]time.Duration
	var wg sync.WaitGroup
	back := time.Now().Add(200 * time.Millisecond) // B waits before the server is back
	wg.Go(func() { got = o.takeAll(t, back, backBound+3*time.Second) })
	time.Sleep(time.Until(back))
	o.p.Refuse(t, false)
	wg.Wait()
	t.Logf("B took each lock after A's server was back: %v", got)
	for name, d := range got {
		assert.True(t, d >= 0 && d < backBound, "%s: B took it %v after the server was back (-1: not within the wait); want < %v", name, d, backBound)
	}
}

// fastRefused returns a go-redis client of addr whose calls fail at the
// first refused dial: no retries of its own.
func fastRefused(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// scriptsRun returns how many scripts srv has run (EVAL and EVALSHA).
func scriptsRun(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Client(t).Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"cmdstat_eval:", "cmdstat_evalsha:"} {
			if rest, ok := strings.CutPrefix(line, cmd+"calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				v, err := strconv.ParseInt(calls, 10, 64)
				require.NoError(t, err)
				n += v
			}
		}
	}
	return n
}

// A kept release is owner-checked, as every resend is: the lock it
// released was forced and taken by B during the outage, and A's release,
// sent again once the server is back, runs there and leaves B's hold
// alone.
func TestKeptReleaseLeavesAnotherOwnersHold(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	srv := redistest.Start(t)
	p := faultproxy.New(t, srv.Addr())
	logs := newRecHandler()
	a := newClient(t, fastRefused(t, p.Addr()), WithLogger(slog.New(logs)))
	b := newClient(t, srv.Client(t))
	ctx := context.Background()
	const name = "kept:taken"
	actx, err := a.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	p.Refuse(t, true)
	_ = a.Mutex(name).Unlock(actx)
	givenUp(t, logs, name)
	forced, err := b.Mutex(name).ForceUnlock(ctx)
	require.NoError(t, err)
	require.True(t, forced)
	bm := b.Mutex(name, WithLease(30*time.Second)) // a fixed lease: B runs no script meanwhile
	bctx, err := bm.TryLock(ctx)
	require.NoError(t, err)
	before := scriptsRun(t, srv)
	p.Refuse(t, false)
	eventually(t, backBound, "A's kept release to run on the server", func() bool { return scriptsRun(t, srv) > before })
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, context.Cause(bctx), "B's hold lives")
	n, err := bm.HoldCount(bctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "B's hold untouched")
	f, err := srv.Client(t).HKeys(ctx, name).Result()
	require.NoError(t, err)
	require.Len(t, f, 1)
	assert.True(t, strings.HasPrefix(f[0], b.ID()+":"), "B holds it in Redis: %v", f)
	require.NoError(t, bm.Unlock(bctx))
}

// Close with kept releases pending gives them its own bound
// (holds.ReleaseTimeout) and no more, and leaves no goroutine: A1's
// server comes back during its Close, which sends A1's release there
// before it returns; A2's never does, and A2's Close returns at its bound,
// the lock still held (its lease frees it).
func TestCloseSendsKeptReleasesWithinItsBound(t *testing.T) {
	base := redisyncGoroutines()
	srv := redistest.Start(t)
	p1, p2 := faultproxy.New(t, srv.Addr()), faultproxy.New(t, srv.Addr())
	logs1, logs2 := newRecHandler(), newRecHandler()
	a1 := newClient(t, fastRefused(t, p1.Addr()), WithLogger(slog.New(logs1)))
	a2 := newClient(t, fastRefused(t, p2.Addr()), WithLogger(slog.New(logs2)))
	ctx := context.Background()
	const x, y = "kept:close:x", "kept:close:y"
	xctx, err := a1.Mutex(x).Lock(ctx)
	require.NoError(t, err)
	yctx, err := a2.Mutex(y).Lock(ctx)
	require.NoError(t, err)
	p1.Refuse(t, true)
	p2.Refuse(t, true)
	_ = a1.Mutex(x).Unlock(xctx)
	_ = a2.Mutex(y).Unlock(yctx)
	givenUp(t, logs1, x)
	givenUp(t, logs2, y)

	rdb := srv.Client(t)
	var took1, took2 time.Duration
	var held1, held2 int64
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		assert.NoError(t, a1.Close())
		took1 = time.Since(start)
		held1, _ = rdb.Exists(ctx, x).Result()
	})
	wg.Go(func() {
		assert.NoError(t, a2.Close())
		took2 = time.Since(start)
		held2, _ = rdb.Exists(ctx, y).Result()
	})
	time.Sleep(time.Second)
	p1.Refuse(t, false)
	wg.Wait()
	t.Logf("A1's Close (its server back after 1s) took %v, A2's (never back) %v", took1, took2)
	assert.Zero(t, held1, "A1's kept release sent during its Close")
	assert.EqualValues(t, 1, held2, "A2's release reached no server")
	lag := startLag()
	defer lag.Stop()
	assert.Less(t, took1, holds.ReleaseTimeout, "A1's Close returns once its release is answered")
	assert.Less(t, took2, holds.ReleaseTimeout+500*time.Millisecond+lag.Slack(), "A2's Close returns at its bound")
	eventually(t, time.Second, "goroutines to stop", func() bool { return redisyncGoroutines() <= base })
}

// switchMaster subscribes to s's +switch-master and returns when it comes
// (the zero time: not within a minute).
func switchMaster(t *testing.T, s *redistest.Sentinel) <-chan time.Time {
	t.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	sub := sc.Subscribe(ctx, "+switch-master")
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	at := make(chan time.Time, 1)
	go func() {
		defer sc.Close()
		defer sub.Close()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		_, err := sub.ReceiveMessage(rctx)
		if err != nil {
			at <- time.Time{}
			return
		}
		at <- time.Now()
	}()
	return at
}

// A Sentinel primary killed while A holds a lock that B waits for; A
// releases it during the outage, before the Sentinel promotes the replica
// (A's redis client fails at the first refused dial, so its release and
// its give-back are refused at once: under load, go-redis's pool fails
// every dial at once after as many failures as it has connections). B
// must have the lock within keptFollow of +switch-master, not at the
// lease's end (30s).
func TestKeptReleaseAfterSentinelPrimaryKilled(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	g := startSentinelGroup(t)
	ra := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.s.MasterName, SentinelAddrs: []string{g.s.Addr()},
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = ra.Close() })
	logs := newRecHandler()
	a, b := newClient(t, ra, WithLogger(slog.New(logs))), newClient(t, g.client(t))
	ctx := context.Background()
	const name = "kept:killed"
	held, err := a.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	got := waitFor(t, b, b.Mutex(name), time.Minute)
	waitReplicated(t, g.master.Client(t), "killed")
	switched := switchMaster(t, g.s)
	g.master.Kill()
	killed := time.Now()
	at := releaseRefused(t, a.Mutex(name), held, killed, logs, switched)
	require.False(t, at.IsZero(), "no +switch-master")
	lag := watchLag(t)
	r := gotLock(t, got)
	took := r.at.Sub(at)
	t.Logf("+switch-master %v after the kill; B had the lock %v after it; the machine's worst delay: %v", at.Sub(killed), took, lag.Worst())
	require.LessOrEqual(t, took, keptFollow+lag.Slack(), "B had the lock %v after +switch-master", took)
	require.NoError(t, b.Mutex(name).Unlock(r.ctx))
}

// A Cluster master killed while A holds a lock on it that B waits for; A
// releases it during the outage, before the replica is promoted (A's
// redis client fails at the first refused dial, as in
// TestKeptReleaseAfterSentinelPrimaryKilled). B must
// have the lock within keptFollow of the promotion, not at the lease's
// end (30s).
func TestKeptReleaseAfterClusterMasterKilled(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	ra := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = ra.Close() })
	logs := newRecHandler()
	a, b := newClient(t, ra, WithLogger(slog.New(logs))), newClient(t, cl.Client(t))
	ctx := context.Background()
	name := "{kept}killed"
	shard := shardOf(t, cl, name)
	held, err := a.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	got := waitFor(t, b, b.Mutex(name), time.Minute)
	waitReplicated(t, cl.Masters[shard].Client(t), "kept")
	promoted := promotedAt(t, cl.Replicas[shard][0])
	cl.Masters[shard].Kill()
	killed := time.Now()
	at := releaseRefused(t, a.Mutex(name), held, killed, logs, promoted)
	lag := watchLag(t)
	r := gotLock(t, got)
	took := r.at.Sub(at)
	if took > keptFollow {
		for _, rec := range logs.records() {
			t.Logf("A's log, %v after the promotion: %s", rec.Time.Sub(at), recordText(rec))
		}
	}
	t.Logf("promoted %v after the kill; B had the lock %v after it; the machine's worst delay: %v", at.Sub(killed), took, lag.Worst())
	require.LessOrEqual(t, took, keptFollow+lag.Slack(), "B had the lock %v after the promotion", took)
	require.NoError(t, b.Mutex(name).Unlock(r.ctx))
}

// releaseRefused unlocks held, the lock of m's Client, after its server was
// killed at killed; the release must be refused (given up in logs) before
// the switch comes on switched, which it then waits for and returns.
func releaseRefused(t *testing.T, m *Mutex, held context.Context, killed time.Time, logs recHandler, switched <-chan time.Time) time.Time {
	t.Helper()
	err := m.Unlock(held)
	t.Logf("A's Unlock returned %v after the kill: %v", time.Since(killed), err)
	givenUp(t, logs, m.Name())
	select {
	case at := <-switched:
		t.Fatalf("the replica was promoted (%v after the kill) before A's release was refused", at.Sub(killed))
	default:
	}
	t.Logf("A's release refused %v after the kill", time.Since(killed))
	return <-switched
}
