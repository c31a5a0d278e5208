package matrix

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

// fixture is a Redis deployment shared by the cells of one group, one
// after the other: each cell starts on a healthy deployment with no keys
// (ready), and every fault leaves it healthy again, though the roles of
// its servers may have changed (a failover, a slot moved).
type fixture interface {
	// rdb returns a new go-redis client (its own pool, like another
	// process) with the hook h on its own commands (on a Cluster, its
	// nodes'), closed when t ends. redisync's scripts do not go through
	// it: a Client made on it takes h with WithHooks.
	rdb(t *testing.T, h *faultproxy.Hook) redis.UniversalClient
	// options are the Client options of a topology on this deployment.
	options(topo string) []redisync.Option
	// ready waits until every primary has its replica in sync, then
	// deletes every key.
	ready(t *testing.T)
	// keys returns every key in the deployment.
	keys(t *testing.T) []string
	// fault injects a deployment fault (not a reply fault, see cell.go)
	// around the lock named name, and returns once the deployment is
	// healthy again; lost reports that Redis lost its data.
	fault(t *testing.T, kind, name string) (lost bool)
}

// Timeouts of every go-redis client of the matrix.
const (
	dialTimeout = time.Second
	ioTimeout   = time.Second
	// pauseFor is how long the pause fault stops the lock's node: past
	// the lease, and well within the cluster's node timeout (no
	// automatic failover).
	pauseFor = lease * 13 / 10
	// clusterNodeTimeout is set on every cluster node, so that a pause
	// or a restart is not taken for a failure.
	clusterNodeTimeout = 5000
	// reshardFor is how long the resharding fault keeps the lock's slot
	// migrating, moving one of its keys every reshardStep.
	reshardFor  = 1200 * time.Millisecond
	reshardStep = 150 * time.Millisecond
	// A restart of the single node loads loadKeys keys, loadPerKey each,
	// before it is ready: it answers LOADING for half a second.
	loadKeys   = 1000
	loadPerKey = 500 * time.Microsecond
)

// admins keeps one plain go-redis client per server.
type admins struct {
	mu sync.Mutex
	m  map[*redistest.Server]*redis.Client
}

func (a *admins) of(t *testing.T, s *redistest.Server) *redis.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[*redistest.Server]*redis.Client{}
	}
	c := a.m[s]
	if c == nil {
		// Owned by the group's test, not the cell's (t may be either).
		c = redis.NewClient(&redis.Options{Addr: s.Addr(), DialTimeout: dialTimeout,
			ReadTimeout: 5 * time.Second, WriteTimeout: ioTimeout})
		a.m[s] = c
	}
	return c
}

func (a *admins) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.m {
		_ = c.Close()
	}
}

// waitUntil polls cond every 20ms until it holds, failing t after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := cond(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// role returns ROLE's first word: "master" or "slave".
func role(ctx context.Context, c *redis.Client) (string, error) {
	r, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(r) == 0 {
		return "", fmt.Errorf("empty ROLE reply")
	}
	s, _ := r[0].(string)
	return s, nil
}

// replicaOnline checks that the primary c has at least one replica online
// (WAIT with no write of its own answers with the replicas in sync).
func replicaOnline(ctx context.Context, c *redis.Client) error {
	if r, err := role(ctx, c); err != nil || r != "master" {
		return fmt.Errorf("role %q (%v), want master", r, err)
	}
	n, err := c.Do(ctx, "WAIT", 1, 100).Int()
	if err == nil && n < 1 {
		err = fmt.Errorf("no replica online")
	}
	return err
}

// ---------------------------------------------------------------------------
// A primary with one replica (the single-node topology)

// nodeFixture is a primary and its replica. Clients reach the primary
// through a proxy, which a failover retargets, as a service address (or
// Sentinel) would follow the new primary. Replication is set up by
// command, so a restarted server comes back as an empty primary.
type nodeFixture struct {
	primary, replica *redistest.Server
	proxy            *faultproxy.Proxy
	admins
}

func startNode(t *testing.T) *nodeFixture {
	args := append([]string{"--repl-diskless-sync-delay", "0"}, redistest.SlowLoading(loadPerKey)...)
	fx := &nodeFixture{primary: redistest.Start(t, args...), replica: redistest.Start(t, args...)}
	t.Cleanup(fx.close)
	fx.proxy = faultproxy.New(t, fx.primary.Addr())
	ctx := context.Background()
	if err := fx.of(t, fx.replica).ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(fx.primary.Port())).Err(); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	fx.ready(t)
	return fx
}

func (fx *nodeFixture) rdb(t *testing.T, h *faultproxy.Hook) redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: fx.proxy.Addr(), DialTimeout: dialTimeout,
		ReadTimeout: ioTimeout, WriteTimeout: ioTimeout})
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (fx *nodeFixture) options(string) []redisync.Option { return nil }

func (fx *nodeFixture) ready(t *testing.T) {
	t.Helper()
	p := fx.of(t, fx.primary)
	waitUntil(t, 20*time.Second, "the replica in sync", func(ctx context.Context) error {
		return replicaOnline(ctx, p)
	})
	if err := p.FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
	if fx.proxy.Target() != fx.primary.Addr() {
		t.Fatalf("the proxy goes to %s, not to the primary %s", fx.proxy.Target(), fx.primary.Addr())
	}
}

func (fx *nodeFixture) keys(t *testing.T) []string {
	ks, err := fx.of(t, fx.primary).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return ks
}

func (fx *nodeFixture) fault(t *testing.T, kind, _ string) bool {
	ctx := context.Background()
	p := fx.of(t, fx.primary)
	switch kind {
	case faultFailover:
		// FAILOVER: the primary pauses its writers until the replica
		// caught up, then the two swap roles; no write is lost. The
		// proxy then follows, and its connections are cut.
		old, next := fx.primary, fx.replica
		if err := p.Do(ctx, "FAILOVER", "TO", "127.0.0.1", next.Port(), "TIMEOUT", 5000).Err(); err != nil {
			t.Fatalf("FAILOVER: %v", err)
		}
		nc := fx.of(t, next)
		waitUntil(t, 10*time.Second, "the replica to become the primary", func(ctx context.Context) error {
			if r, err := role(ctx, nc); err != nil || r != "master" {
				return fmt.Errorf("role %q (%v)", r, err)
			}
			return nil
		})
		fx.proxy.Retarget(next.Addr())
		fx.proxy.CutAll()
		fx.primary, fx.replica = next, old
		fx.heal(t)
	case faultPubSub:
		if err := p.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
			t.Fatalf("CLIENT KILL: %v", err)
		}
	case faultPause:
		fx.primary.Pause()
		time.Sleep(pauseFor)
		fx.primary.Resume()
	case faultRestart:
		// It loads another dataset first, answering LOADING meanwhile.
		fx.primary.RestartLoading(t, loadKeys)
		ks, err := p.Keys(ctx, redistest.LoadingKeys).Result()
		if err == nil && len(ks) > 0 {
			err = p.Unlink(ctx, ks...).Err()
		}
		if err != nil {
			t.Fatalf("delete the keys loaded: %v", err)
		}
		fx.heal(t)
		return true
	case faultFlush:
		for _, s := range []*redistest.Server{fx.primary, fx.replica} {
			if err := fx.of(t, s).ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
	default:
		t.Fatalf("fault %q on a single node", kind)
	}
	return false
}

// heal waits until the primary has its replica in sync again.
func (fx *nodeFixture) heal(t *testing.T) {
	t.Helper()
	p := fx.of(t, fx.primary)
	waitUntil(t, 20*time.Second, "the replica in sync after the fault", func(ctx context.Context) error {
		return replicaOnline(ctx, p)
	})
}

// ---------------------------------------------------------------------------
// A cluster of three masters with a replica each

type clusterFixture struct {
	rc *redistest.ReplicatedCluster
	admins
	// assigning serialises the ends of the slot migrations of cells that
	// run at once: each SETSLOT NODE bumps the target's config epoch
	// without consensus, and two at once between the same masters could
	// leave a slot with the wrong owner.
	assigning sync.Mutex
}

func startCluster(t *testing.T) *clusterFixture {
	fx := &clusterFixture{rc: redistest.StartClusterWithReplicas(t, 3, 1)}
	t.Cleanup(fx.close)
	for _, s := range fx.nodes() {
		fx.configure(t, s)
	}
	fx.ready(t)
	return fx
}

// configure sets what a restart forgets.
func (fx *clusterFixture) configure(t *testing.T, s *redistest.Server) {
	ctx := context.Background()
	c := fx.of(t, s)
	for k, v := range map[string]string{"cluster-node-timeout": strconv.Itoa(clusterNodeTimeout), "repl-diskless-sync-delay": "0"} {
		if err := c.ConfigSet(ctx, k, v).Err(); err != nil {
			t.Fatalf("CONFIG SET %s on %s: %v", k, s.Addr(), err)
		}
	}
}

// nodes returns every node, masters first.
func (fx *clusterFixture) nodes() []*redistest.Server {
	all := append([]*redistest.Server(nil), fx.rc.Masters...)
	for _, rs := range fx.rc.Replicas {
		all = append(all, rs...)
	}
	return all
}

func (fx *clusterFixture) rdb(t *testing.T, h *faultproxy.Hook) redis.UniversalClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: fx.rc.Addrs(), DialTimeout: dialTimeout,
		ReadTimeout: ioTimeout, WriteTimeout: ioTimeout})
	// On the nodes' clients, so that the faults reach every command
	// that stays on go-redis.
	c.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (fx *clusterFixture) options(topo string) []redisync.Option {
	if topo == topoClassic {
		return []redisync.Option{redisync.WithPubSub(redisync.PubSubClassic)}
	}
	return []redisync.Option{redisync.WithPubSub(redisync.PubSubSharded)}
}

func (fx *clusterFixture) ready(t *testing.T) {
	t.Helper()
	fx.heal(t)
	for _, m := range fx.rc.Masters {
		if err := fx.of(t, m).FlushAll(context.Background()).Err(); err != nil {
			t.Fatalf("FLUSHALL on %s: %v", m.Addr(), err)
		}
	}
}

// heal waits until every node sees the cluster ok and every master has
// its replica in sync.
func (fx *clusterFixture) heal(t *testing.T) {
	t.Helper()
	for _, s := range fx.nodes() {
		c := fx.of(t, s)
		waitUntil(t, 20*time.Second, "cluster ok on "+s.Addr(), func(ctx context.Context) error {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok\r") {
				err = fmt.Errorf("cluster not ok")
			}
			return err
		})
	}
	for _, m := range fx.rc.Masters {
		c := fx.of(t, m)
		waitUntil(t, 20*time.Second, "a replica of "+m.Addr()+" in sync", func(ctx context.Context) error {
			return replicaOnline(ctx, c)
		})
	}
}

func (fx *clusterFixture) keys(t *testing.T) []string {
	var all []string
	for _, m := range fx.rc.Masters {
		ks, err := fx.of(t, m).Keys(context.Background(), "*").Result()
		if err != nil {
			t.Fatalf("KEYS on %s: %v", m.Addr(), err)
		}
		all = append(all, ks...)
	}
	return all
}

// owner returns the master of name's slot, and its index in Masters.
func (fx *clusterFixture) owner(t *testing.T, name string) (*redistest.Server, int, int) {
	slot := redistest.SlotOf(t, fx.rc.Masters[0], name)
	o := fx.rc.Owner(t, slot)
	for i, m := range fx.rc.Masters {
		if m == o {
			return o, i, slot
		}
	}
	t.Fatalf("the owner %s of slot %d is not a master", o.Addr(), slot)
	return nil, 0, 0
}

func (fx *clusterFixture) fault(t *testing.T, kind, name string) bool {
	ctx := context.Background()
	o, i, slot := fx.owner(t, name)
	switch kind {
	case faultFailover:
		// CLUSTER FAILOVER (not FORCE): the master agrees, no write lost.
		fx.rc.Failover(t, i, false)
		fx.heal(t)
	case faultMigrate:
		fx.rc.MigrateSlot(t, slot, fx.rc.Masters[(i+1)%len(fx.rc.Masters)])
		fx.heal(t)
	case faultReshard:
		// As redis-cli --cluster reshard, slowly: the slot MIGRATING on
		// its master and IMPORTING on the next one for reshardFor, while
		// the contenders go on; every reshardStep one key the source
		// still has moves (MIGRATE), so the lock's keys are split
		// between the two for most of it; then the slot is assigned.
		mig := fx.rc.BeginMigration(t, slot, fx.rc.Masters[(i+1)%len(fx.rc.Masters)])
		for end := time.Now().Add(reshardFor); time.Now().Before(end); {
			time.Sleep(reshardStep)
			mig.Move(t, mig.Keys(t, 1)...)
		}
		fx.assigning.Lock()
		mig.Finish(t)
		fx.assigning.Unlock()
		fx.heal(t)
	case faultPubSub:
		for _, s := range fx.nodes() {
			if err := fx.of(t, s).ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
				t.Fatalf("CLIENT KILL on %s: %v", s.Addr(), err)
			}
		}
	case faultPause:
		o.Pause()
		time.Sleep(pauseFor)
		o.Resume()
	case faultRestart:
		o.Restart(t)
		fx.configure(t, o)
		fx.heal(t)
		return true
	case faultFlush:
		for _, s := range fx.nodes() {
			if err := fx.of(t, s).ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH on %s: %v", s.Addr(), err)
			}
		}
	default:
		t.Fatalf("fault %q on a cluster", kind)
	}
	return false
}
