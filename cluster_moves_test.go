package redisync

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// nameOn returns a lock name whose slot master s serves, as cc sees it.
func nameOn(t *testing.T, cc *redis.ClusterClient, s *redistest.Server, prefix string) string {
	t.Helper()
	for i := 0; ; i++ {
		name := prefix + ":" + time.Now().Format("150405.000000") + ":" + string(rune('a'+i%26))
		node, err := cc.MasterForKey(context.Background(), name)
		require.NoError(t, err)
		if node.Options().Addr == s.Addr() {
			return name
		}
	}
}

// subscribedOn reports whether c's channel is confirmed on its connection
// to addr.
func subscribedOn(c *Client, channel, addr string) bool {
	ch, ok := c.ps.Channel(channel)
	return ok && ch.Node == addr && ch.Subscribed
}

// waitAcross holds name with holder, starts a Lock of it by waiter, waits
// until that waiter is subscribed on from, runs move (which moves the
// lock's slot to another master, to), and checks that the waiter
// re-subscribes on to and that the holder's unlock then wakes it at once,
// not after the 30s lease.
func waitAcross(t *testing.T, holder, waiter *Client, name string, from, to *redistest.Server, move func()) {
	t.Helper()
	bg := context.Background()
	m := waiter.Mutex(name)
	hctx, err := holder.Mutex(name).Lock(bg)
	require.NoError(t, err)
	got := make(chan error, 1)
	wctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	go func() {
		h, err := m.Lock(wctx)
		if err == nil {
			err = m.Unlock(h)
		}
		got <- err
	}()
	eventually(t, 5*time.Second, "the waiter subscribed on "+from.Addr(), func() bool { return subscribedOn(waiter, m.channel, from.Addr()) })
	move()
	eventually(t, 10*time.Second, "the waiter subscribed again on "+to.Addr(), func() bool { return subscribedOn(waiter, m.channel, to.Addr()) })
	require.NoError(t, hctx.Err(), "the holder's hold survives a move that kept its key")
	start := time.Now()
	require.NoError(t, holder.Mutex(name).Unlock(hctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the unlock after the move did not wake the waiter")
	}
	t.Logf("unlock after the move -> waiter acquired in %v", time.Since(start))
}

// TestClusterSlotMoves: on a cluster with replicas in sharded mode, waiters
// of a lock whose slot moves (a failover to the replica, a slot migrated
// to another master) subscribe again on the new owner and are woken by the
// next unlock; a holder whose lock vanished in a failover is told.
func TestClusterSlotMoves(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 3, 1)
	cc := rc.Client(t)
	holder := newClient(t, rc.Client(t))
	waiter := newClient(t, cc)
	require.Equal(t, PubSubSharded, waiter.PubSub())

	t.Run("failover", func(t *testing.T) {
		from, to := rc.Masters[0], rc.Replicas[0][0]
		name := nameOn(t, cc, from, "fo")
		waitAcross(t, holder, waiter, name, from, to, func() { rc.Failover(t, 0, false) })
	})

	t.Run("migration", func(t *testing.T) {
		from, to := rc.Masters[1], rc.Masters[2]
		name := nameOn(t, cc, from, "mig")
		slot := redistest.SlotOf(t, from, name)
		waitAcross(t, holder, waiter, name, from, to, func() { rc.MigrateSlot(t, slot, to) })
	})

	t.Run("lost in failover", func(t *testing.T) {
		// The lock is taken while the replica is down, so it never
		// reaches it; the replica comes back while the master is stopped
		// (it cannot sync) and takes over without the master.
		bg := context.Background()
		lossy := newClient(t, rc.Client(t), WithWatchdogTimeout(6*time.Second))
		master, replica := rc.Masters[2], rc.Replicas[2][0]
		name := nameOn(t, cc, master, "lost")
		replica.Kill()
		hctx, err := lossy.Mutex(name).Lock(bg)
		require.NoError(t, err)
		master.Pause()
		replica.Restart(t)
		rc.Masters[2], rc.Replicas[2][0] = replica, master
		require.NoError(t, replica.Client(t).Do(bg, "CLUSTER", "FAILOVER", "TAKEOVER").Err())
		eventually(t, 5*time.Second, "the replica to be master", func() bool {
			role, err := replica.Client(t).Do(bg, "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master"
		})
		took := time.Now()
		master.Resume()
		// Another client finds the lock free on the new master...
		other := newClient(t, rc.Client(t))
		octx, err := other.Mutex(name).TryLockFor(bg, 5*time.Second)
		require.NoError(t, err, "the lock vanished with the failover")
		defer func() { _ = other.Mutex(name).Unlock(octx) }()
		// ...and the holder is told at its next renewal (every 2s).
		select {
		case <-hctx.Done():
			assert.True(t, errors.Is(context.Cause(hctx), ErrLeaseLost), "cause %v", context.Cause(hctx))
			t.Logf("holder told %v after the takeover", time.Since(took))
		case <-time.After(6 * time.Second):
			t.Fatal("the holder whose lock vanished was not told")
		}
	})
}
