package redisync

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
)

// The subscription follows the primary (internal/transport/switch.go and
// internal/notify's Switched): after a planned failover the old primary
// still answers as a primary for a while (about 10s under Sentinel, until
// it is told to replicate the new one), and a subscription left on it
// hears none of the unlocks published on the new one. Each test below has
// a waiter wait on a lock that its holder releases after the switch, on
// the new primary, with the default 30s lease (so no re-check on the
// lease's bound can pass for a wake-up): the waiter must have it within a
// second of the switch, and before the old primary is demoted.

// followBound is how soon after a switch a waiter must have a lock
// released after it (plus the machine's measured scheduling delay).
const followBound = time.Second

// sentinelGroup is a primary with one replica and a Sentinel watching
// them, and failover clients of it.
type sentinelGroup struct {
	master, replica *redistest.Server
	s               *redistest.Sentinel
}

func startSentinelGroup(t *testing.T) *sentinelGroup {
	t.Helper()
	g := &sentinelGroup{master: redistest.Start(t)}
	g.replica = redistest.StartReplica(t, g.master)
	g.s = redistest.StartSentinel(t, g.master, "redisync", 1)
	return g
}

// client returns a new failover client of the group, closed with the test.
func (g *sentinelGroup) client(t *testing.T) *redis.Client {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: g.s.MasterName, SentinelAddrs: []string{g.s.Addr()},
		DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// failover runs a planned SENTINEL FAILOVER and returns when the Sentinel
// announces the new primary (+switch-master), and that moment; the old
// and new primaries swap in g.
func (g *sentinelGroup) failover(t *testing.T) time.Time {
	t.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.s.Addr()})
	defer sc.Close()
	sub := sc.Subscribe(ctx, "+switch-master")
	defer sub.Close()
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	waitReplicated(t, g.master.Client(t), "switch")
	// A Sentinel that has not yet seen the replica answer its INFO
	// refuses (NOGOODSLAVE): ask again.
	eventually(t, 20*time.Second, "the Sentinel to accept SENTINEL FAILOVER", func() bool {
		err := sc.Failover(ctx, g.s.MasterName).Err()
		if err != nil && !strings.HasPrefix(err.Error(), "NOGOODSLAVE") {
			require.NoError(t, err)
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
		return err == nil
	})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	require.NoError(t, err, "no +switch-master")
	switched := time.Now()
	t.Logf("+switch-master %s", msg.Payload)
	require.True(t, strings.HasSuffix(msg.Payload, " "+strings.ReplaceAll(g.replica.Addr(), ":", " ")), "switched to the replica")
	g.master, g.replica = g.replica, g.master
	return switched
}

// demoted reports whether s no longer says it is a primary.
func demoted(s *redistest.Server, rc *redis.Client) bool {
	role, err := rc.Do(context.Background(), "ROLE").Slice()
	return err == nil && len(role) > 0 && role[0] != "master"
}

// timedLock is the outcome of a Lock and when it returned.
type timedLock struct {
	ctx context.Context
	err error
	at  time.Time
}

// waitFor starts m.Lock in a goroutine and returns once its waiter is
// subscribed and confirmed on the lock's channel.
func waitFor(t *testing.T, c *Client, m *Mutex, d time.Duration) <-chan timedLock {
	t.Helper()
	got := make(chan timedLock, 1)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	go func() {
		h, err := m.Lock(ctx)
		got <- timedLock{ctx: h, err: err, at: time.Now()}
	}()
	eventually(t, 5*time.Second, "the waiter subscribed", func() bool {
		ch, ok := c.ps.Channel(m.channel)
		return ok && ch.Waiters == 1 && ch.Subscribed
	})
	return got
}

// gotLock returns what the waiter of got (waitFor) had, failing the test
// if it had nothing within 45s or its Lock failed.
func gotLock(t *testing.T, got <-chan timedLock) timedLock {
	t.Helper()
	select {
	case r := <-got:
		require.NoError(t, r.err)
		return r
	case <-time.After(45 * time.Second):
		t.Fatal("the waiter never got the lock")
		return timedLock{}
	}
}

// requireNotHeldBy fails the test if c holds name on the server rdb talks
// to (a field of c's in the lock's hash). Another Client may hold it: a
// waiter the release woke takes it at once.
func requireNotHeldBy(t *testing.T, rdb redis.Cmdable, name string, c *Client) {
	t.Helper()
	fields, err := rdb.HKeys(context.Background(), name).Result()
	require.NoError(t, err)
	for _, f := range fields {
		require.False(t, strings.HasPrefix(f, c.ID()+":"), "released on the new primary: %v", fields)
	}
}

// TestSubscriptionFollowsSentinelSwitch: a planned Sentinel failover
// while a waiter of one Client waits on a lock another Client holds; the
// holder releases it once its own redis client has followed the switch
// (on the new primary, which publishes the unlock there). The waiter's
// subscription was on the old primary, which still answers as one: it
// must move to the new primary and the waiter have the lock within
// followBound of +switch-master, and before the old primary is demoted
// (on main it had it only then, about 10s later, when the demotion
// dropped its subscription connection).
func TestSubscriptionFollowsSentinelSwitch(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	g := startSentinelGroup(t)
	a, b := newClient(t, g.client(t)), newClient(t, g.client(t)) // the default 30s lease
	ctx := context.Background()
	const name = "followed"
	held, err := a.Mutex(name).Lock(ctx)
	require.NoError(t, err)
	got := waitFor(t, b, b.Mutex(name), time.Minute)
	old := g.master
	oc := old.Client(t)
	// A's engine learns the switch from its watcher (within a round of
	// A's redis client's move), and writes there from then on.
	var toldTo atomic.Value
	a.tr.OnSwitch(func(s transport.Switch) { toldTo.Store(s.To.ReplID) })

	switched := g.failover(t)
	lag := watchLag(t)
	promoted := g.master.Client(t)
	id, err := transport.ReplID(ctx, promoted)
	require.NoError(t, err)
	eventually(t, 5*time.Second, "A's redis client to follow the switch", func() bool {
		got, err := transport.ReplID(ctx, a.rdb)
		return err == nil && got == id
	})
	eventually(t, 2*transport.SwitchEvery+time.Second, "A's engine to follow the switch", func() bool { return toldTo.Load() == id })
	require.False(t, demoted(old, oc), "the old primary still answers as one")
	require.NoError(t, a.Mutex(name).Unlock(held))
	released := time.Now()
	requireNotHeldBy(t, promoted, name, a)
	t.Logf("released %v after +switch-master", released.Sub(switched))

	r := gotLock(t, got)
	took := r.at.Sub(switched)
	t.Logf("the waiter had the lock %v after +switch-master (%v after the release); the old primary demoted by then: %v; the machine's worst delay: %v",
		took, r.at.Sub(released), demoted(old, oc), lag.Worst())
	require.False(t, demoted(old, oc), "the waiter had the lock only once the old primary was demoted (%v after the switch)", took)
	require.LessOrEqual(t, took, followBound+lag.Slack(), "the waiter had the lock %v after the switch", took)
	require.NoError(t, b.Mutex(name).Unlock(r.ctx))
}

// promotedAt polls s's ROLE until it says master, and sends when.
func promotedAt(t *testing.T, s *redistest.Server) <-chan time.Time {
	at := make(chan time.Time, 1)
	rc := s.Client(t)
	go func() {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			role, err := rc.Do(context.Background(), "ROLE").Slice()
			if err == nil && len(role) > 0 && role[0] == "master" {
				at <- time.Now()
				return
			}
		}
	}()
	return at
}

// shardOf returns the shard of cl whose master serves key.
func shardOf(t *testing.T, cl *redistest.ReplicatedCluster, key string) int {
	t.Helper()
	owner := cl.Owner(t, redistest.SlotOf(t, cl.Masters[0], key))
	for i, m := range cl.Masters {
		if m == owner {
			return i
		}
	}
	t.Fatalf("no shard serves %q", key)
	return -1
}

// TestSubscriptionFollowsClusterFailover: a planned CLUSTER FAILOVER of
// the shard of a lock while a waiter of one Client waits on it, in each
// pub/sub mode; its holder releases it once its own redis client has
// followed the switch. The waiter must have it within followBound of the
// replica's promotion.
func TestSubscriptionFollowsClusterFailover(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	ctx := context.Background()
	for _, mode := range []PubSubMode{PubSubClassic, PubSubSharded} {
		t.Run(mode.String(), func(t *testing.T) {
			name := "{" + mode.String() + "}followed"
			shard := shardOf(t, cl, name)
			ra := cl.Client(t)
			a, b := newClient(t, ra, WithPubSub(mode)), newClient(t, cl.Client(t), WithPubSub(mode))
			held, err := a.Mutex(name).Lock(ctx)
			require.NoError(t, err)
			got := waitFor(t, b, b.Mutex(name), time.Minute)
			replica := cl.Replicas[shard][0]
			promoted := promotedAt(t, replica)
			waitReplicated(t, cl.Masters[shard].Client(t), mode.String())
			cl.Failover(t, shard, false)
			switched := <-promoted
			lag := watchLag(t)
			eventually(t, 5*time.Second, "A's redis client to follow the switch", func() bool {
				ra.ReloadState(ctx)
				node, err := ra.MasterForKey(ctx, name)
				return err == nil && node.Options().Addr == replica.Addr()
			})
			require.NoError(t, a.Mutex(name).Unlock(held))
			released := time.Now()
			requireNotHeldBy(t, replica.Client(t), name, a)
			t.Logf("released %v after the promotion", released.Sub(switched))
			r := gotLock(t, got)
			// From the promotion, or from the release when A's client
			// followed the switch later (slow under load).
			from := switched
			if released.After(from) {
				from = released
			}
			took := r.at.Sub(from)
			t.Logf("the waiter had the lock %v after the promotion or the release (%v after the release); the machine's worst delay: %v",
				took, r.at.Sub(released), lag.Worst())
			require.LessOrEqual(t, took, followBound+lag.Slack(), "the waiter had the lock %v after the switch", took)
			require.NoError(t, b.Mutex(name).Unlock(r.ctx))
		})
	}
}
