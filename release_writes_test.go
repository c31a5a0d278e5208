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
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/lua"
)

// The write counter of a release (issue 33, break 2): the last Unlock runs
// in Redis, its reply is lost with its connection, and go-redis writes it
// again onto a server whose script cache is now empty (a failover to a
// replica that had the unlock, a restart that kept its data): NOSCRIPT,
// and the transport sends it whole. That run finds the hold gone, which
// its own first write released: the Unlock succeeds. Only the write that
// NOSCRIPT refused is forgotten, not the one that ran. On every path.
func TestNoScriptAfterALostReplyIsNoLoss(t *testing.T) {
	for _, path := range []string{"full-duplex", "lanes"} {
		t.Run(path, func(t *testing.T) {
			srv := redistest.Start(t)
			bg := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = rdb.Close() })
			h := faultproxy.NewHook()
			if path == "lanes" {
				gate(rdb, h)
			} else {
				rdb.AddHook(h)
			}
			c := newClient(t, rdb)
			admin := srv.Client(t)
			require.NoError(t, lua.Unlock.Load(bg, admin).Err())
			m := c.Mutex("noscript-resent")
			hctx, err := m.Lock(bg)
			require.NoError(t, err)

			unlock := func(args []string) bool {
				return len(args) > 3 && args[1] == lua.Unlock.Hash() && args[3] == m.Name()
			}
			first := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Args: unlock, Action: faultproxy.CloseAfterWrite()})
			flushed := h.OnWrite(faultproxy.WriteRule{Name: "evalsha", Times: 1, Args: func(args []string) bool {
				// go-redis's second write: the server forgot its scripts.
				return unlock(args) && admin.ScriptFlush(bg).Err() == nil
			}})
			require.NoError(t, m.Unlock(hctx), "a released hold reported lost")
			assert.Equal(t, 1, first.Fired(), "the first write's reply lost")
			assert.Equal(t, 1, flushed.Fired(), "go-redis wrote it again")
			n, err := admin.Exists(bg, m.Name()).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "the lock is free")
		})
	}
}

// A release that Redis refuses while loading its data (LOADING), after
// the hold was lost with Redis's data (DEBUG RELOAD of a dump without it,
// as a restart from an older dump would): the refused writes are
// forgotten, the one that runs finds the hold gone, and the Unlock
// reports the loss. (go-redis does not retry LOADING itself here,
// MaxRetries < 0: the refusals it retries itself it does not tell, and
// their writes stay counted; see transport.Writes.) On every path.
func TestReleaseDuringLoadingAfterALossReportsIt(t *testing.T) {
	for _, path := range []string{"full-duplex", "lanes"} {
		t.Run(path, func(t *testing.T) {
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

			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			if path == "lanes" {
				gate(rdb, faultproxy.NewHook())
			}
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
			require.ErrorIs(t, m.Unlock(hctx), ErrLeaseLost)
			require.NoError(t, <-reloaded)
		})
	}
}
