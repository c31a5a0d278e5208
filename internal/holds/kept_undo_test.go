package holds

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

// An undo that reached no server is kept until the lease of the attempt
// it gives back would have ended (lease.Deadline from its sending), and
// sent again until Redis answers: one whose lease has ended already is
// not kept; one whose lease stands runs once the server is back.
func TestUndoKeptUntilItsLeaseEnds(t *testing.T) {
	srv := redistest.Start(t)
	p := faultproxy.New(t, srv.Addr())
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnvOn(t, rdb)
	direct := srv.Client(t)
	l := newLock("undo:kept", 30*time.Second)
	require.NoError(t, direct.HSet(bg, l.key, "u:1", 1).Err())
	require.NoError(t, direct.PExpire(bg, l.key, l.spec.Lease).Err())
	p.Refuse(t, true)

	e.m.Undo(time.Now().Add(-l.spec.Lease), l.spec.Lease, l.drop("u:1")) // its lease ended: Redis freed it
	e.m.Undo(time.Now(), l.spec.Lease, l.drop("u:1"))
	require.Eventually(t, func() bool { return e.m.Kept() == 1 }, 2*ReleaseTimeout, 10*time.Millisecond, "the undo in time kept, the other not")
	time.Sleep(300 * time.Millisecond) // sent again, refused, meanwhile
	require.Equal(t, 1, e.m.Kept())
	require.EqualValues(t, 1, direct.Exists(bg, l.key).Val(), "not run while refused")

	p.Refuse(t, false)
	require.Eventually(t, func() bool { return e.m.Kept() == 0 }, 2*time.Second, 10*time.Millisecond, "answered once the server is back")
	require.Zero(t, direct.Exists(bg, l.key).Val(), "the undo ran")
}
