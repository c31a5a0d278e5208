package redisync

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of sharded pub/sub and of Redisson's protocol on every topology.
// Redisson is played by its protocol facts, not its code: a holder is a
// hash field "<uuid>:<thread>" -> count with a PEXPIRE lease; its unlock is
// a script that deletes the hash at zero and publishes "0" with the publish
// command it was given (PUBLISH, or SPUBLISH in sharded mode) on
// "redisson_lock__channel:" + name when the name contains "{", else on
// "redisson_lock__channel:{" + name + "}"; its waiters listen with
// SUBSCRIBE, or SSUBSCRIBE in sharded mode.

// redissonUnlock is Redisson's RLock unlock, as its script does it:
// KEYS[1] the lock, KEYS[2] its channel; ARGV[1] the message, ARGV[2] the
// field, ARGV[3] the publish command.
const redissonUnlock = `
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then return 0 end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1`

// redissonChannel is the channel Redisson uses for lock name.
func redissonChannel(name string) string {
	if strings.Contains(name, "{") {
		return "redisson_lock__channel:" + name
	}
	return "redisson_lock__channel:{" + name + "}"
}

// redissonPeer checks, both ways, that a Redisson peer and c guard lock
// name together on rdb and hear each other's unlocks at once (well before
// the 30s lease a missed message would cost): a Redisson holder's unlock
// wakes c's waiter, and c's unlock is heard by a Redisson listener.
func redissonPeer(t *testing.T, rdb redis.UniversalClient, c *Client, name string, sharded bool) {
	t.Helper()
	bg := context.Background()
	ch := redissonChannel(name)
	pub := "publish"
	if sharded {
		pub = "spublish"
	}
	m := c.Mutex(name)
	require.Equal(t, ch, m.channel)

	// Redisson holds; redisync waits; Redisson unlocks.
	const field = "6f0e6b1c-0d7e-4c0e-9a0b-1b2c3d4e5f60:57"
	require.NoError(t, rdb.HSet(bg, name, field, 1).Err())
	require.NoError(t, rdb.PExpire(bg, name, 30*time.Second).Err())
	got := make(chan error, 1)
	wctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	go func() {
		hctx, err := m.Lock(wctx)
		if err == nil {
			err = m.Unlock(hctx)
		}
		got <- err
	}()
	eventually(t, 2*time.Second, "the waiter to be subscribed", func() bool {
		x, ok := c.ps.Channel(ch)
		return ok && x.Waiters == 1 && x.Subscribed
	})
	start := time.Now()
	require.NoError(t, rdb.Eval(bg, redissonUnlock, []string{name, ch}, "0", field, pub).Err())
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatalf("Redisson's unlock of %q (%s on %q) did not wake the redisync waiter", name, pub, ch)
	}
	t.Logf("%s: Redisson unlock -> redisync acquired in %v", name, time.Since(start))

	// redisync holds; a Redisson waiter listens; redisync unlocks.
	var sub *redis.PubSub
	if sharded {
		sub = rdb.SSubscribe(bg, ch)
	} else {
		sub = rdb.Subscribe(bg, ch)
	}
	defer sub.Close()
	_, err := sub.Receive(bg)
	require.NoError(t, err)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	h, err := rdb.HGetAll(bg, name).Result()
	require.NoError(t, err)
	require.Len(t, h, 1, "a hash of one field, as Redisson's")
	for f, v := range h {
		assert.True(t, strings.HasPrefix(f, c.ID()+":"), f)
		assert.Equal(t, "1", v)
	}
	require.NoError(t, m.Unlock(hctx))
	rctx, rcancel := context.WithTimeout(bg, 5*time.Second)
	defer rcancel()
	msg, err := sub.ReceiveMessage(rctx)
	require.NoError(t, err, "redisync's unlock of %q was not heard by a Redisson %s listener on %q",
		name, map[bool]string{true: "SSUBSCRIBE", false: "SUBSCRIBE"}[sharded], ch)
	assert.Equal(t, ch, msg.Channel)
	assert.Equal(t, "0", msg.Payload)
}

// TestRedissonPeerSingleNode: on a single node (classic pub/sub), a
// Redisson peer and redisync hear each other on plain and {tag} names.
func TestRedissonPeerSingleNode(t *testing.T) {
	e := realEnv(t)
	rdb := e.rdb(t)
	c := newClient(t, rdb)
	require.Equal(t, PubSubClassic, c.PubSub())
	for _, name := range []string{"orders:42", "{orders}:42", "order{7}", "a{b}c{d}"} {
		t.Run(name, func(t *testing.T) { redissonPeer(t, rdb, c, name, false) })
	}
}

// namesOnEveryShard returns n names per master of cc, plus hash-tagged ones.
func namesOnEveryShard(t *testing.T, cc *redis.ClusterClient, n int) []string {
	t.Helper()
	per := map[string]int{}
	var names []string
	for i := 0; len(names) < n*3; i++ {
		name := "shard-lock:" + strconv.Itoa(i)
		node, err := cc.MasterForKey(context.Background(), name)
		require.NoError(t, err)
		if a := node.Options().Addr; per[a] < n {
			per[a]++
			names = append(names, name)
		}
	}
	require.Len(t, per, 3)
	return names
}

// TestRedissonPeerClusterSharded: on a Redis 7 Cluster, redisync's AUTO
// mode picks sharded pub/sub, as Redisson's does, and a Redisson peer
// (SPUBLISH from its unlock script, SSUBSCRIBE) and redisync hear each
// other, for locks on every shard and for {tag} names.
func TestRedissonPeerClusterSharded(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	c := newClient(t, cc)
	require.Equal(t, PubSubSharded, c.PubSub())
	names := append(namesOnEveryShard(t, cc, 1), "{user:7}:lock", "acct{9}")
	for _, name := range names {
		t.Run(name, func(t *testing.T) { redissonPeer(t, cc, c, name, true) })
	}
}

// TestRedissonPeerClusterClassic: with sharded pub/sub turned off (as a
// Redisson client configured without it), redisync uses PUBLISH and
// SUBSCRIBE on the cluster and still hears a Redisson peer in that mode.
func TestRedissonPeerClusterClassic(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	c := newClient(t, cc, WithPubSub(PubSubClassic))
	require.Equal(t, PubSubClassic, c.PubSub())
	for _, name := range append(namesOnEveryShard(t, cc, 1), "{user:7}:lock") {
		t.Run(name, func(t *testing.T) { redissonPeer(t, cc, c, name, false) })
	}
}

// TestShardedForcedSingleNode: sharded pub/sub forced on a single Redis 7
// node works for every primitive's wake-ups, and the unlock goes out with
// SPUBLISH (a SUBSCRIBE listener does not hear it, an SSUBSCRIBE one does).
func TestShardedForcedSingleNode(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	rdb := e.rdb(t)
	c1 := newClient(t, rdb, WithPubSub(PubSubSharded))
	c2 := newClient(t, e.rdb(t), WithPubSub(PubSubSharded))
	require.Equal(t, PubSubSharded, c1.PubSub())
	redissonPeer(t, rdb, c1, "forced", true)
	handoffs(t, []*Client{c1, c2}, []string{"forced-a", "forced-b"})
}

// handoffs makes the clients contend for each lock of names (Mutex,
// FairMutex, RWMutex writers, a one-permit Semaphore, and a latch counted
// down) and checks every wait ends by a wake-up, not by a lease: the
// holders keep the locks for 30s leases unless they release them.
func handoffs(t *testing.T, cs []*Client, names []string) {
	t.Helper()
	bg := context.Background()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	for _, name := range names {
		// Each primitive: the first client holds, the others wait, the
		// holder releases; every waiter gets its turn within seconds.
		type lockable struct {
			lock   func(c *Client) (context.Context, error)
			unlock func(c *Client, hctx context.Context) error
		}
		kinds := map[string]lockable{
			"mutex": {func(c *Client) (context.Context, error) { return c.Mutex(name).Lock(ctx) },
				func(c *Client, h context.Context) error { return c.Mutex(name).Unlock(h) }},
			"fair": {func(c *Client) (context.Context, error) { return c.FairMutex(name + ":fair").Lock(ctx) },
				func(c *Client, h context.Context) error { return c.FairMutex(name + ":fair").Unlock(h) }},
			"rw": {func(c *Client) (context.Context, error) { return c.RWMutex(name + ":rw").Lock(ctx) },
				func(c *Client, h context.Context) error { return c.RWMutex(name + ":rw").Unlock(h) }},
			"sem": {func(c *Client) (context.Context, error) { return c.Semaphore(name+":sem").Acquire(ctx, 1) },
				func(c *Client, h context.Context) error { return c.Semaphore(name+":sem").Release(h, 1) }},
		}
		require.NoError(t, cs[0].Semaphore(name+":sem").SetPermits(bg, 1))
		for kind, k := range kinds {
			held, err := k.lock(cs[0])
			require.NoError(t, err, kind)
			done := make(chan error, len(cs))
			for _, c := range cs {
				go func() {
					h, err := k.lock(c)
					if err == nil {
						time.Sleep(5 * time.Millisecond)
						err = k.unlock(c, h)
					}
					done <- err
				}()
			}
			time.Sleep(200 * time.Millisecond) // the waiters subscribe
			start := time.Now()
			require.NoError(t, k.unlock(cs[0], held), kind)
			for range cs {
				require.NoError(t, <-done, "%s %s", kind, name)
			}
			assert.Less(t, time.Since(start), 5*time.Second, "%s %s: waits ended by wake-ups", kind, name)
		}
		l := cs[0].CountDownLatch(name + ":latch")
		ok, err := l.TrySetCount(bg, 1)
		require.NoError(t, err)
		require.True(t, ok)
		done := make(chan error, len(cs))
		for _, c := range cs {
			go func() { done <- c.CountDownLatch(name + ":latch").Wait(ctx) }()
		}
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, l.CountDown(bg))
		for range cs {
			require.NoError(t, <-done)
		}
	}
}

// TestClusterShardedEveryPrimitive: on a Redis 7 Cluster in sharded mode,
// every primitive's waiters are woken by their unlocks, for locks on every
// shard.
func TestClusterShardedEveryPrimitive(t *testing.T) {
	cl := sharedCluster(t)
	c1 := newClient(t, cl.Client(t))
	c2 := newClient(t, cl.Client(t))
	require.Equal(t, PubSubSharded, c1.PubSub())
	handoffs(t, []*Client{c1, c2}, namesOnEveryShard(t, cl.Client(t), 1))
}

// TestClusterOneShardedConnectionPerNode: waiters on many locks spread over
// the shards share one SSUBSCRIBE connection per node, each channel
// subscribed on the node that owns its slot.
func TestClusterOneShardedConnectionPerNode(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	holder := newClient(t, cl.Client(t))
	c := newClient(t, cc)
	bg := context.Background()
	names := namesOnEveryShard(t, cc, 10)
	holds := lockAll(t, holder, names)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := make(chan struct{}, len(names))
	for _, name := range names {
		go func() {
			defer func() { done <- struct{}{} }()
			if h, err := c.Mutex(name).Lock(ctx); err == nil {
				_ = c.Mutex(name).Unlock(h)
			}
		}()
	}
	eventually(t, 5*time.Second, "every channel confirmed", func() bool {
		n := 0
		for _, ch := range c.ps.Channels() {
			if ch.Subscribed {
				n++
			}
		}
		return n == len(names)
	})
	for _, m := range cl.Masters {
		list, err := m.Client(t).ClientList(bg).Result()
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(list, "ssub=")-strings.Count(list, "ssub=0 "),
			"one sharded subscription connection on %s:\n%s", m.Addr(), list)
	}
	assert.Len(t, c.ps.Nodes(), 3)
	for _, ch := range c.ps.Channels() {
		node, err := cc.MasterForKey(bg, ch.Name)
		require.NoError(t, err)
		assert.Equal(t, node.Options().Addr, ch.Node, ch.Name)
	}
	for i, name := range names {
		require.NoError(t, holder.Mutex(name).Unlock(holds[i]))
	}
	for range names {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken by its unlock")
		}
	}
}

// TestPubSubModeOption: WithPubSub refuses an unknown mode; PubSub reports
// the mode in use.
func TestPubSubModeOption(t *testing.T) {
	e := realEnv(t)
	_, err := New(e.rdb(t), WithPubSub(PubSubMode(9)))
	require.ErrorIs(t, err, ErrInvalid)
	for mode, want := range map[PubSubMode]PubSubMode{PubSubAuto: PubSubClassic, PubSubClassic: PubSubClassic, PubSubSharded: PubSubSharded} {
		c := newClient(t, e.rdb(t), WithPubSub(mode))
		assert.Equal(t, want, c.PubSub(), mode.String())
	}
	assert.Equal(t, "sharded", PubSubSharded.String())
	assert.Equal(t, PubSubAuto, (*Client)(nil).PubSub())
}

// TestClusterAutoDetectedLater: New on a cluster that does not answer
// returns within its detection bound with the mode not known yet, and the
// Client detects it when it first needs it: its waiters are then woken by
// sharded unlocks.
func TestClusterAutoDetectedLater(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistestCluster(t)
	for _, m := range cl.Masters {
		m.Pause()
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ReadTimeout: time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	start := time.Now()
	c := newClient(t, cc)
	took := time.Since(start)
	assert.Equal(t, PubSubAuto, c.PubSub(), "not known while the cluster is silent")
	assert.Less(t, took, notify.DetectTimeout+time.Second)
	for _, m := range cl.Masters {
		m.Resume()
	}
	// go-redis's read timeout ends the first detection; notify.DetectEvery passes.
	time.Sleep(time.Second + notify.DetectEvery + 500*time.Millisecond)
	other := newClient(t, cl.Client(t))
	require.Equal(t, PubSubSharded, other.PubSub())
	handoffs(t, []*Client{c, other}, []string{"later"})
	assert.Equal(t, PubSubSharded, c.PubSub())
}

// TestClusterShardedSubscriptionKilled: when every sharded subscription
// connection is killed, with channels of several slots on each, the
// channels are subscribed again (go-redis's own re-subscription of them
// all in one SSUBSCRIBE is refused across slots: redisync subscribes each
// again) and the next unlocks wake the waiters at once.
func TestClusterShardedSubscriptionKilled(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	holder := newClient(t, cl.Client(t))
	c := newClient(t, cc)
	bg := context.Background()
	names := namesOnEveryShard(t, cc, 4)
	holds := lockAll(t, holder, names)
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	done := make(chan error, len(names))
	for _, name := range names {
		go func() {
			h, err := c.Mutex(name).Lock(ctx)
			if err == nil {
				err = c.Mutex(name).Unlock(h)
			}
			done <- err
		}()
	}
	allConfirmed := func() bool {
		n := 0
		for _, ch := range c.ps.Channels() {
			if ch.Subscribed {
				n++
			}
		}
		return n == len(names)
	}
	eventually(t, 5*time.Second, "every channel confirmed", allConfirmed)
	for _, m := range cl.Masters {
		n, err := m.Client(t).ClientKillByFilter(bg, "TYPE", "pubsub").Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "one subscription connection killed on %s", m.Addr())
	}
	eventually(t, 5*time.Second, "every channel confirmed again", allConfirmed)
	start := time.Now()
	for i, name := range names {
		require.NoError(t, holder.Mutex(name).Unlock(holds[i]))
	}
	for range names {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken by its unlock after its subscription was killed")
		}
	}
	t.Logf("%d unlocks after the kill heard in %v", len(names), time.Since(start))
}

// TestClusterAutoClassicWhenRefused: AUTO picks classic pub/sub on a
// cluster whose masters refuse PUBSUB SHARDNUMSUB (as Redis below 7 does;
// here an ACL refuses it), and the Client works in that mode.
func TestClusterAutoClassicWhenRefused(t *testing.T) {
	cl := sharedCluster(t)
	bg := context.Background()
	for _, m := range cl.Masters {
		mc := m.Client(t)
		require.NoError(t, mc.Do(bg, "ACL", "SETUSER", "default", "-pubsub|shardnumsub").Err())
		t.Cleanup(func() { // the cluster is shared
			assert.NoError(t, mc.Do(bg, "ACL", "SETUSER", "default", "+pubsub|shardnumsub").Err())
		})
	}
	c := newClient(t, cl.Client(t))
	require.Equal(t, PubSubClassic, c.PubSub())
	redissonPeer(t, cl.Client(t), c, "refused", false)
}

// TestClusterShardedRotation: under contention the clients rotate on the
// lock's sharded channel (SUNSUBSCRIBE and SSUBSCRIBE again on the owning
// node) so they take turns, and no unlock is lost on the way.
func TestClusterShardedRotation(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	cs := []*Client{newClient(t, cl.Client(t)), newClient(t, cl.Client(t))}
	bg := context.Background()
	const name = "rotating"
	node, err := cc.MasterForKey(bg, name)
	require.NoError(t, err)
	ssubs := func() int64 {
		info, err := node.Info(bg, "commandstats").Result()
		require.NoError(t, err)
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_ssubscribe:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
	before := ssubs()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var wins [2]atomic.Int64
	var inside atomic.Bool
	var wg sync.WaitGroup
	for i, c := range cs {
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 40 {
					h, err := c.Mutex(name).Lock(ctx)
					if !assert.NoError(t, err) {
						return
					}
					assert.False(t, inside.Swap(true), "two holders at once")
					wins[i].Add(1)
					time.Sleep(200 * time.Microsecond)
					inside.Store(false)
					assert.NoError(t, c.Mutex(name).Unlock(h))
				}
			}()
		}
	}
	wg.Wait()
	rotations := ssubs() - before
	t.Logf("wins %d/%d, SSUBSCRIBEs on the owning node %d", wins[0].Load(), wins[1].Load(), rotations)
	assert.EqualValues(t, 160, wins[0].Load())
	assert.EqualValues(t, 160, wins[1].Load())
	assert.Greater(t, rotations, int64(4), "the clients re-subscribed (rotated) on the sharded channel")
}

// lockAll locks every name through c and returns the holds, in order.
func lockAll(t *testing.T, c *Client, names []string) []context.Context {
	t.Helper()
	var holds []context.Context
	for _, name := range names {
		h, err := c.Mutex(name).Lock(context.Background())
		require.NoError(t, err)
		holds = append(holds, h)
	}
	return holds
}
