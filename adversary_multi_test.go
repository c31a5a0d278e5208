package redisync

import (
	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"

	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A MultiLock across Cluster slots whose Lock's context ends at random
// moments, often between two slots' scripts, while a rival Mutex comes and
// goes on its last name: every Lock either returns a live hold of every
// name, or an error and, once its give-backs have run, nothing of it is
// left in Redis; meanwhile another MultiLock over the same names never
// holds one of them at the same time.
func TestAdvMultiLockClusterCancelBetweenSlots(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	bg := context.Background()
	c1, c2, c3 := newClient(t, cc), newClient(t, cl.Client(t)), newClient(t, cl.Client(t))
	names := namesOnEveryShard(t, cc, 2)
	m1 := c1.MultiLock(names)
	m3 := c3.MultiLock(names)
	require.Greater(t, len(m1.groups), 2)
	last := m1.groups[len(m1.groups)-1].keys[0]

	stopRival := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a rival on the last name, on and off
		defer wg.Done()
		mu := c2.Mutex(last)
		for {
			select {
			case <-stopRival:
				return
			default:
			}
			hctx, err := mu.TryLock(bg)
			time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
			if err == nil {
				assert.NoError(t, mu.Unlock(hctx))
			}
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
		}
	}()
	var inUse sync.Mutex // held by whichever MultiLock holds the names
	var overlap int
	run := func(m *MultiLock, rounds int) (won, lost int) {
		for range rounds {
			ctx, cancel := context.WithTimeout(bg, time.Duration(rand.IntN(4000))*time.Microsecond)
			hctx, err := m.Lock(ctx)
			if err != nil {
				cancel()
				lost++
				continue
			}
			if !inUse.TryLock() {
				overlap++
			} else {
				if hctx.Err() == nil {
					time.Sleep(100 * time.Microsecond)
				}
				inUse.Unlock()
			}
			_ = m.Unlock(hctx)
			cancel()
			won++
		}
		return
	}
	var w1, l1, w3, l3 int
	done3 := make(chan struct{})
	go func() { defer close(done3); w3, l3 = run(m3, 150) }()
	w1, l1 = run(m1, 150)
	<-done3
	close(stopRival)
	wg.Wait()
	t.Logf("m1: %d won, %d failed; m3: %d won, %d failed", w1, l1, w3, l3)
	assert.Zero(t, overlap)
	eventually(t, 3*time.Second, "nothing left behind", func() bool {
		for _, n := range names {
			if cc.Exists(bg, n).Val() != 0 {
				return false
			}
		}
		return true
	})
}

// A MultiLock across two slots: the script of its second slot takes that
// slot's name but its reply is lost (the connection drops), and before the
// MultiLock tries again a rival takes the first slot's name. The MultiLock
// then waits for the rival; it promises to hold none of its names while it
// waits, so the second slot's name must be free meanwhile (not held for a
// lease by the attempt whose reply was lost).
func TestAdvMultiLockLostReplyThenWaitHoldsNothing(t *testing.T) {
	cl := sharedCluster(t)
	bg := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	hook := faultproxy.NewHook()
	gate(cc, hook)
	admin := cl.Client(t)
	c1, c2 := newClient(t, cc), newClient(t, cl.Client(t))
	names := namesOnEveryShard(t, admin, 1)
	m := c1.MultiLock(names)
	require.Len(t, m.groups, 3)
	first, second := m.groups[0].keys[0], m.groups[1].keys[0]
	// Every node knows the scripts (a NOSCRIPT reply would be lost, not run).
	wctx, err := m.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(wctx))
	isSecond := faultproxy.RunsScript(lua.MultiLock.Script)
	lost := hook.OnCommand(faultproxy.CommandRule{Times: 1, Action: faultproxy.LoseReply(), Args: func(args []any) bool {
		return isSecond(args) && len(args) > 3 && args[3] == second
	}})
	// Its next attempt at the first slot comes late, after the rival's.
	late := hook.OnCommand(faultproxy.CommandRule{Times: 1, Action: faultproxy.DelayBefore(300 * time.Millisecond), Args: func(args []any) bool {
		return lost.Fired() == 1 && isSecond(args) && len(args) > 3 && args[3] == first
	}})

	got := make(chan error, 1)
	go func() {
		hctx, err := m.Lock(bg)
		if err == nil {
			err = m.Unlock(hctx)
		}
		got <- err
	}()
	// The rival takes the first name as soon as the MultiLock gave it back.
	eventually(t, 2*time.Second, "the lost reply", func() bool { return lost.Fired() == 1 })
	rival := c2.Mutex(first)
	var rctx context.Context
	eventually(t, 2*time.Second, "the rival to take "+first, func() bool {
		var err error
		rctx, err = rival.TryLock(bg)
		return err == nil
	})
	select {
	case err := <-got:
		t.Fatalf("the MultiLock did not wait: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	eventually(t, 3*time.Second, "the MultiLock to wait", func() bool { return localWaiters(c1, multiChannel(first)) == 1 })
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, 1, late.Fired())
	for _, n := range names {
		if n != first {
			assert.Zero(t, admin.Exists(bg, n).Val(), "%s is held while the MultiLock waits for %s", n, first)
		}
	}
	require.NoError(t, rival.Unlock(rctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("not woken")
	}
}

// The MultiLock's doc promises that a Mutex.ForceUnlock of one of its
// names ends its hold in the ForceUnlock's process before the name is
// freed. Sequence: a MultiLock's script has taken both names (its reply is
// delayed); a ForceUnlock of one name through the same Client frees it;
// then the reply arrives. The grant cannot tell which ran first and must
// not be trusted, as a Mutex's grant is not (TestAdvForceUnlockRacingGrantInProcess).
func TestAdvMultiLockForceUnlockRacingGrantInProcess(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.MultiLock.Load(bg, rdb).Err())
	names := []string{"adv:mforce:a", "adv:mforce:b"}
	admin := e.rdb(t)
	slow := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.MultiLock.Script), Times: 1, Action: faultproxy.DelayReply(300 * time.Millisecond)})

	type res struct {
		hctx context.Context
		err  error
	}
	got := make(chan res, 1)
	wctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	go func() { hctx, err := c.MultiLock(names).Lock(wctx); got <- res{hctx, err} }()
	eventually(t, time.Second, "the MultiLock's script to have run", func() bool {
		n, err := admin.Exists(bg, names...).Result()
		return err == nil && n == 2
	})
	require.Equal(t, 1, slow.Fired(), "the MultiLock's reply delayed")
	freed, err := c.Mutex(names[0]).ForceUnlock(bg)
	require.NoError(t, err)
	require.True(t, freed, "ForceUnlock found the name held")
	b := e.client(t).Mutex(names[0])
	bctx, err := b.TryLock(bg)
	require.NoError(t, err, "the forced name is free")
	a := <-got
	if a.err == nil {
		assert.Error(t, a.hctx.Err(), "the MultiLock's hold is live while another client holds %q", names[0])
		_ = c.MultiLock(names).Unlock(a.hctx)
	} else {
		t.Logf("the MultiLock's Lock: %v", a.err)
	}
	require.NoError(t, b.Unlock(bctx))
}
