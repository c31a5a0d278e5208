package redisync

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
	"github.com/redisync-go/redisync/lua"
)

// A release written whole whose reply is lost with its connection (issue
// 44): the engine never writes it again (it may have run): the Unlock
// returns an error wrapping transport.ErrNoReply, not a loss that a second
// run would find. The one write ran: the lock is free. (go-redis used to
// write it again, and a write counter told that second run's GoneAt, or
// its NOSCRIPT on a server that forgot its scripts meanwhile, from a loss.)
func TestReleaseLostReplyIsWrittenOnce(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: srv.Addr()})
	c := newClient(t, rdb)
	admin := srv.Client(t)
	m := c.Mutex("lost-reply-once")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	onName := func(args []string) bool {
		return (args[0] == "evalsha" || args[0] == "eval") && len(args) > 3 && args[3] == m.Name()
	}
	first := h.OnWrite(faultproxy.WriteRule{Times: 1, Args: func(args []string) bool {
		return onName(args) && args[1] == lua.Unlock.Hash()
	}, Action: faultproxy.CloseAfterWrite()})
	again := h.OnWrite(faultproxy.WriteRule{Args: func(args []string) bool {
		return onName(args) && args[1] == lua.Unlock.Hash() // the release, not the give-back that follows it
	}})
	require.NoError(t, lua.Unlock.Load(bg, admin).Err()) // a NOSCRIPT reply would be lost, not run
	err = m.Unlock(hctx)
	require.ErrorIs(t, err, transport.ErrNoReply, "a release whose reply was lost")
	assert.NotErrorIs(t, err, ErrLeaseLost)
	assert.Equal(t, 1, first.Fired(), "the write's reply lost")
	assert.Zero(t, again.Fired(), "the release written again")
	// The release may still be on its way to Redis when its caller is
	// told that its connection closed.
	eventually(t, time.Second, "the lock free", func() bool { return admin.Exists(bg, m.Name()).Val() == 0 })
}

// A release whose write fails before any byte reaches Redis (its
// connection drops under it) is sent again, within the release's bound,
// on another connection, and what that write finds is the answer: the
// Unlock succeeds, the lock is free, the release ran once.
func TestReleaseNeverWrittenIsSentAgain(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	rdb, h := faultRDB(t, &redis.Options{Addr: srv.Addr()})
	c := newClient(t, rdb)
	admin := srv.Client(t)
	m := c.Mutex("never-written")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	onRelease := func(args []string) bool {
		return len(args) > 3 && args[1] == lua.Unlock.Hash() && args[3] == m.Name()
	}
	dropped := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Args: onRelease, Action: faultproxy.FailWrite()})
	sent := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Args: onRelease})
	start := time.Now()
	require.NoError(t, m.Unlock(hctx), "a release never written, then sent again")
	assert.Less(t, time.Since(start), holds.ReleaseTimeout)
	assert.Equal(t, 1, dropped.Fired(), "the first write dropped")
	assert.Equal(t, 1, sent.Fired(), "written once, on another connection")
	n, err := admin.Exists(bg, m.Name()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lock is free")
}

// A release that Redis refuses while loading its data (LOADING), after
// the hold was lost with Redis's data (DEBUG RELOAD of a dump without it,
// as a restart from an older dump would): the refused writes are
// forgotten, the one that runs finds the hold gone, and the Unlock
// reports the loss. (The engine retries LOADING itself, within the
// release's bound; go-redis's MaxRetries does not apply to it.)
func TestReleaseDuringLoadingAfterALossReportsIt(t *testing.T) {
	srv := redistest.Start(t, append(redistest.SlowLoading(200*time.Microsecond), "--enable-debug-command", "local")...)
	bg := context.Background()
	admin := srv.Client(t)
	p := admin.Pipeline()
	for i := range 10000 { // about 2s of LOADING
		p.Set(bg, "loading:"+strconv.Itoa(i), "x", 0)
	}
	_, err := p.Exec(bg)
	require.NoError(t, err)
	require.NoError(t, admin.Save(bg).Err())

	rdb, h := faultRDB(t, &redis.Options{Addr: srv.Addr()})
	c := newClient(t, rdb)
	m := c.Mutex("loading-lost")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)

	reloaded := make(chan error, 1)
	go func() { reloaded <- srv.Client(t).Do(bg, "debug", "reload", "nosave").Err() }()
	probe := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer probe.Close()
	require.Eventually(t, func() bool {
		err := probe.Ping(bg).Err()
		return err != nil && strings.HasPrefix(err.Error(), "LOADING")
	}, 10*time.Second, time.Millisecond, "the server answers LOADING")
	attempts := h.OnCommand(faultproxy.CommandRule{Args: func(args []any) bool {
		return len(args) > 3 && args[1] == lua.Unlock.Hash() && args[3] == m.Name()
	}})
	require.ErrorIs(t, m.Unlock(hctx), ErrLeaseLost)
	require.NoError(t, <-reloaded)
	assert.Greater(t, attempts.Fired(), 1, "the release refused (LOADING), then sent again")
}
