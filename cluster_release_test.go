package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// A release that meets ASK while its lock's slot is resharded (the engine
// follows it to the target at once): a hold
// lost before it (the key gone from the source) is reported lost, not
// released; a hold whose key was moved to the target is released there,
// once, a hold at a time.
func TestClusterReleaseMeetsAsk(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	admin := rc.Client(t)
	bg := context.Background()
	cc := rc.Client(t)
	c := newClient(t, cc)
	tag := "{" + nameOn(t, admin, rc.Masters[0], "askrel") + "}"
	lost, moved := c.Mutex(tag+"lost"), c.Mutex(tag+"moved")
	lctx, err := lost.Lock(bg)
	require.NoError(t, err)
	mctx, err := moved.Lock(bg)
	require.NoError(t, err)
	mctx, err = moved.Lock(mctx) // a re-entry: two holds
	require.NoError(t, err)

	mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], tag), rc.Masters[1])
	defer mig.Finish(t)
	require.NoError(t, mig.From.Client(t).Del(bg, lost.Name()).Err(), "the hold lost")
	mig.Move(t, moved.Name())

	err = lost.Unlock(lctx)
	assert.ErrorIs(t, err, ErrLeaseLost, "a lost hold's release met ASK")

	count := func() (int64, bool) {
		p := mig.To.Client(t).Pipeline()
		p.Do(bg, "asking")
		vals := p.HVals(bg, moved.Name())
		_, _ = p.Exec(bg)
		v, err := vals.Result()
		require.NoError(t, err)
		if len(v) == 0 {
			return 0, false
		}
		require.Len(t, v, 1)
		n := int64(0)
		for _, ch := range v[0] {
			n = n*10 + int64(ch-'0')
		}
		return n, true
	}
	require.NoError(t, moved.Unlock(mctx), "one of two holds released on the target")
	n, ok := count()
	require.True(t, ok, "one hold remains")
	assert.EqualValues(t, 1, n)
	require.NoError(t, moved.Unlock(mctx), "the last hold released on the target")
	_, ok = count()
	assert.False(t, ok, "released")
}

// A release that meets MOVED (its lock's slot moved to another master
// since the client read the slot map; the engine follows it): a hold
// lost before it is reported lost, not released.
func TestClusterReleaseMeetsMoved(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	admin := rc.Client(t)
	bg := context.Background()
	cc := rc.Client(t)
	c := newClient(t, cc)
	m := c.Mutex(nameOn(t, admin, rc.Masters[0], "movedrel"))
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	from := rc.Owner(t, redistest.SlotOf(t, rc.Masters[0], m.Name()))
	require.NoError(t, from.Client(t).Del(bg, m.Name()).Err(), "the hold lost")
	to := rc.Masters[0]
	if to == from {
		to = rc.Masters[1]
	}
	rc.MigrateSlot(t, redistest.SlotOf(t, from, m.Name()), to)
	assert.ErrorIs(t, m.Unlock(hctx), ErrLeaseLost, "a lost hold's release met MOVED")
}

// A release told TRYAGAIN while its slot is resharded (an RWMutex's write
// hold lost, its hash gone from the source while a waiting writer's entry
// is still there: some of the script's keys are missing), sent again until
// the migration ends, then run on the new master: the lost hold is
// reported lost.
func TestClusterReleaseMeetsTryagain(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	admin := rc.Client(t)
	bg := context.Background()
	cc := rc.Client(t)
	c, other := newClient(t, cc), newClient(t, rc.Client(t))
	name := "{" + nameOn(t, admin, rc.Masters[0], "tryrel") + "}rw"
	rw := c.RWMutex(name)
	wctx, err := rw.Lock(bg)
	require.NoError(t, err)
	octx, cancel := context.WithCancel(bg)
	defer cancel()
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		if h, err := other.RWMutex(name).Lock(octx); err == nil {
			_ = other.RWMutex(name).Unlock(h)
		}
	}()
	src := rc.Masters[0].Client(t)
	eventually(t, 5*time.Second, "a writer waits", func() bool { return src.Exists(bg, rw.keys[2]).Val() == 1 })

	mig := rc.BeginMigration(t, redistest.SlotOf(t, rc.Masters[0], name), rc.Masters[1])
	require.NoError(t, src.Del(bg, rw.keys[0]).Err(), "the hold lost")
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		time.Sleep(300 * time.Millisecond)
		mig.Finish(t)
	}()
	start := time.Now()
	err = rw.Unlock(wctx)
	assert.ErrorIs(t, err, ErrLeaseLost, "a lost hold's release met TRYAGAIN, then ran after the migration")
	assert.Greater(t, time.Since(start), 250*time.Millisecond, "it waited for the migration")
	cancel()
	<-waited
	// The release may run once the target owns the slot, before
	// the other masters are told: the migration ends before the
	// test does (its clients close with it).
	<-finished
}

// A Cluster release whose write runs and whose reply is lost with its
// connection: the engine never writes it again (it may have run), and the
// Unlock says so with an error wrapping transport.ErrNoReply; the lock is
// free (the one write ran). (go-redis used to write it again on a master's
// full-duplex connection, and that second run found the hold gone.)
func TestClusterReleaseLostReplyIsNoLoss(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	bg := context.Background()
	h := faultproxy.NewHook()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	c := newClient(t, cc, WithHooks(h))
	for _, srv := range cl.Masters { // a NOSCRIPT reply would be lost, not run
		require.NoError(t, lua.Unlock.Load(bg, srv.Client(t)).Err())
	}
	m := c.Mutex(nameOn(t, cc, cl.Masters[1], "lostreply"))
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	unlock := func(args []string) bool { return len(args) > 3 && args[1] == lua.Unlock.Hash() && args[3] == m.Name() }
	first := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Action: faultproxy.CloseAfterWrite(), Args: unlock})
	again := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Args: unlock}) // the release, not the give-back that follows it
	err = m.Unlock(hctx)
	require.ErrorIs(t, err, transport.ErrNoReply, "a release whose reply was lost")
	assert.NotErrorIs(t, err, ErrLeaseLost)
	assert.Equal(t, 1, first.Fired(), "the write's reply lost")
	assert.Zero(t, again.Fired(), "the release written twice")
	// The release may still be on its way to Redis when its caller is
	// told that its connection closed.
	eventually(t, time.Second, "the lock free", func() bool { return cc.Exists(bg, m.Name()).Val() == 0 })
}
