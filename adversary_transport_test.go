package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// Adversarial tests of the transport's lanes (laneStall) and of the
// undo that WithReplicaAck waits for (undoNow).

// A cohort handoff is the receiver's acquisition: when the replicas do
// not acknowledge it, the receiver's Lock fails with ErrNotReplicated, and
// ErrNotReplicated promises the acquisition was undone in Redis before the
// call returns. The give-back is slowed so that an undo that is not waited
// for is still to come when the check looks.
func TestAdvReplicaAckHandoffUndoneBeforeReturn(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	replica := ackReplica(t, e)
	const timeout = 200 * time.Millisecond
	rdb, hook := faultRDB(t, &redis.Options{Addr: e.addr, DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second})
	c := newClient(t, rdb, WithReplicaAck(1, timeout))
	m := c.Mutex("adv-ack-handoff")
	bg := context.Background()
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	w := idleWaiter(t, bg, c, m)

	replica.Pause()
	t.Cleanup(replica.Resume)
	for _, s := range []*lua.Script{lua.Drop, lua.Unlock} {
		hook.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(s.Script), Action: faultproxy.DelayBefore(500 * time.Millisecond)})
	}
	require.NoError(t, m.Unlock(hctx))
	var got faultLockResult
	select {
	case got = <-w:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never returned")
	}
	require.ErrorIs(t, got.err, ErrNotReplicated)
	n, err := e.rdb(t).Exists(bg, "adv-ack-handoff").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the unacknowledged handoff was undone before the receiver's Lock returned")
}
