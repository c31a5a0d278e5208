package redisync

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// Close of a Client that released a lock a moment ago, on a Redis that
// went silent (paused), returns at once: its healer's last round asks
// Redis nothing (a question through go-redis is not bounded by its
// context), leaves nothing running after Close, and logs nothing after
// it once Redis answers again. (An earlier last round asked INFO through
// go-redis: Close then took its whole 5s, and the round went on after
// it, into the drained transport.)
func TestCloseAsksNothingOfASilentRedis(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 8 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	base := redisyncGoroutines()
	logs := newRecHandler()
	c, err := New(rdb, WithLogger(slog.New(logs)))
	require.NoError(t, err)
	m := c.Mutex("closesilent")
	h, err := m.Lock(context.Background())
	require.NoError(t, err)
	require.NoError(t, m.Unlock(h)) // recorded: the healer runs, its first round HealEvery away

	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	require.NoError(t, c.Close())
	closed := time.Now()
	assert.Less(t, closed.Sub(start), time.Second, "Close waited on a silent Redis")
	assert.LessOrEqual(t, redisyncGoroutines(), base, "the library's goroutines left after Close: %v", libraryGoroutines())
	srv.Resume()
	time.Sleep(time.Second)
	for _, r := range logs.records() {
		if r.Time.After(closed) && r.Level >= slog.LevelWarn {
			t.Errorf("logged after Close returned: %s", r.Message)
		}
	}
}
