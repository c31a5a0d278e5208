package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/lua"
)

// A MultiLock re-entry whose bound ends while its script's reply is late
// leaves the hold at once: its scripts set absolute counts, so nothing is
// given back, and the Unlock that follows releases the hold without
// waiting for the late reply. (Found in review: once the re-entries of
// all primitives shared one path, a MultiLock whose names share a slot,
// every MultiLock on a single node, waited for the reply the way a
// Mutex's re-entry does, and its Unlock failed after 5s, "busy".)
func TestMultiLockAbandonedReentryDoesNotHoldUpUnlock(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.MultiLock.Load(bg, rdb).Err())
	names := []string{"ml:abandon:a", "ml:abandon:b"}
	m := c.MultiLock(names)
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	late := holdReplies(t) // until after the Unlock: past any bound of it
	held := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.MultiLock.Script), Times: 1,
		Action: faultproxy.HoldReply(late.ch)})
	_, err = m.TryLockFor(hctx, 200*time.Millisecond)
	require.Error(t, err, "the re-entry's bound ended before its reply")
	require.Equal(t, 1, held.Fired(), "the re-entry's reply held back")

	late.whileHeld(t, "Unlock waited for the abandoned re-entry's reply", func() { err = m.Unlock(hctx) })
	require.NoError(t, err)
	n, err := e.rdb(t).Exists(bg, names...).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the MultiLock's names are free when its Unlock returns")
}

// Unlock of a hold that ended with its context returns nil at once, also
// when an earlier call through the hold keeps the hold's lock for a while
// (a re-entry whose bound ended before its 1s-late reply): the hold was the
// caller's until its context ended, and the give-back that end started
// frees the lock in Redis once that reply has come, not at the lease's end.
// (An earlier review found such an Unlock answering nil while Redis still
// had the lock, and it was made to wait for the give-back; a review of
// releases under a request's deadline found it then waited 5s on a silent
// link. The nil of an ended hold's Unlock says it was the caller's until
// its context ended; Redis frees it behind the calls still on their way.)
func TestUnlockOfEndedHoldFreesTheLockBeforeNil(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: e.addr})
	c := newClient(t, rdb)
	require.NoError(t, lua.Lock.Load(bg, rdb).Err())
	const name = "ended:frees"
	m := c.Mutex(name)
	parent, cancel := context.WithCancel(bg)
	defer cancel()
	hctx, err := m.Lock(parent)
	require.NoError(t, err)

	late := holdReplies(t)
	held := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(lua.Lock.Script), Times: 1,
		Action: faultproxy.HoldReply(late.ch)})
	_, err = m.TryLockFor(hctx, 100*time.Millisecond)
	require.Error(t, err, "the re-entry's bound ended before its reply")
	require.Equal(t, 1, held.Fired(), "the re-entry's reply held back")
	cancel() // the hold ends with its context

	late.whileHeld(t, "nil at once, not behind the late reply", func() { err = m.Unlock(hctx) })
	require.NoError(t, err, "a hold that ended with its context")
	late.free() // the late reply comes: the give-back frees the lock behind it
	other := e.client(t).Mutex(name)
	octx, err := other.TryLockFor(bg, 5*time.Second)
	require.NoError(t, err, "freed behind the late reply, long before the lease's end")
	require.NoError(t, other.Unlock(octx))
}
