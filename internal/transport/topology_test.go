package transport

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// What the layers above ask of the topology (topology.go).

// otherClient is a redis client of a kind redisync does not know.
type otherClient struct{ redis.UniversalClient }

// Only a non-nil *redis.Client or *redis.ClusterClient is accepted; the
// others are refused with a reason.
func TestTopologyCheckClient(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	assert.NoError(t, CheckClient(rdb))
	assert.NoError(t, CheckClient(cc))
	for _, c := range []struct {
		rdb  redis.UniversalClient
		want string
	}{
		{nil, "nil redis client"},
		{(*redis.Client)(nil), "nil *redis.Client"},
		{(*redis.ClusterClient)(nil), "nil *redis.ClusterClient"},
		{ring, "a *redis.Ring is not supported"},
		{otherClient{rdb}, "type transport.otherClient is not supported"},
	} {
		err := CheckClient(c.rdb)
		require.Error(t, err, "%T", c.rdb)
		assert.Contains(t, err.Error(), c.want)
	}
	assert.False(t, IsCluster(rdb))
	assert.True(t, IsCluster(cc))
	assert.False(t, IsCluster(ring))
	assert.False(t, IsCluster(nil))
}

// ReadTimeout is the one of the client's options, for the clients whose
// calls WAIT can follow on their node's connection.
func TestTopologyReadTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 1500 * time.Millisecond})
	defer rdb.Close()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ReadTimeout: 2500 * time.Millisecond})
	defer cc.Close()
	d, ok := ReadTimeout(rdb)
	assert.True(t, ok)
	assert.Equal(t, 1500*time.Millisecond, d)
	d, ok = ReadTimeout(cc)
	assert.True(t, ok)
	assert.Equal(t, 2500*time.Millisecond, d)
	_, ok = ReadTimeout(otherClient{rdb})
	assert.False(t, ok)
}

// On a single node every key has the one primary, known by its
// replication id, which changes when the server becomes a primary again
// (as a promoted replica does); a replica is no primary.
func TestTopologyPrimariesSingleNode(t *testing.T) {
	t.Parallel() // its own servers
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tr := newT(t, rdb, Options{})
	ctx := context.Background()
	id, err := ReplID(ctx, rdb)
	require.NoError(t, err)
	require.NotEmpty(t, id)
	for _, k := range []string{"a", "b", "{c}d", "redisson_lock__channel:{a}"} {
		assert.Zero(t, tr.Route(k), "one route where one server serves every key: %q", k)
	}
	ps := tr.Primaries(ctx, []string{"a", "b", "{c}d"})
	require.Len(t, ps, 3)
	for _, p := range ps {
		require.NoError(t, p.Err)
		assert.Equal(t, id, p.ID)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := strings.Cut(l.Addr().String(), ":")
	require.NoError(t, l.Close())
	require.NoError(t, rdb.Do(ctx, "REPLICAOF", "127.0.0.1", port).Err())
	_, err = ReplID(ctx, rdb)
	require.ErrorIs(t, err, ErrNotPrimary, "a replica")
	p := tr.Primaries(ctx, []string{"a"})[0]
	require.ErrorIs(t, p.Err, ErrNotPrimary)
	require.NoError(t, rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	p = tr.Primaries(ctx, []string{"a"})[0]
	require.NoError(t, p.Err)
	assert.NotEqual(t, id, p.ID, "a new replication id")
}

// On a Cluster a key's primary is the master of its slot: its address and
// its replication id, one per master.
func TestTopologyPrimariesCluster(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	tr := newT(t, cc, Options{})
	ctx := context.Background()
	var ks, want []string
	for _, m := range cl.Masters {
		id, err := ReplID(ctx, m.Client(t))
		require.NoError(t, err)
		for _, prefix := range []string{"x", "y"} {
			ks = append(ks, nameOn(t, cc, m, "prim"+prefix))
			want = append(want, m.Addr()+" "+id)
		}
	}
	for _, k := range append(ks, "a", "{a}b", "redisson_lock__channel:{a}") {
		slot, err := cc.ClusterKeySlot(ctx, k).Result()
		require.NoError(t, err)
		assert.Equal(t, int(slot), tr.Route(k), "a key's route on a Cluster is its slot: %q", k)
	}
	ps := tr.Primaries(ctx, ks)
	require.Len(t, ps, len(ks))
	for i, p := range ps {
		require.NoError(t, p.Err, ks[i])
		assert.Equal(t, want[i], p.ID, ks[i])
	}
	assert.NotEqual(t, ps[0].ID, ps[2].ID)
}
