package migration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/redistest"
)

// docs/migrating-from-redislock.md: a deployment that runs redislock and
// redisync on one key does not share the lock; each side's call fails with
// WRONGTYPE, and redisync's error matches ErrWrongType. On a real
// redis-server, with the redislock version this module requires.
func TestRedislockAndRedisyncOnOneKey(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisync.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	locker := redislock.New(rdb)

	// redislock first: redisync's Lock on its string.
	lock, err := locker.Obtain(ctx, "mixed:a", 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Mutex("mixed:a").TryLockFor(ctx, time.Second)
	if !errors.Is(err, redisync.ErrWrongType) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("redisync on redislock's key: %v, want an error matching ErrWrongType", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Errorf("redislock's lock was disturbed: %v", err)
	}

	// redisync first: redislock's Obtain on its hash.
	lctx, err := c.Mutex("mixed:b").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = locker.Obtain(ctx, "mixed:b", 30*time.Second, nil)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("redislock on redisync's key: %v, want WRONGTYPE", err)
	}
	if err := c.Mutex("mixed:b").Unlock(lctx); err != nil {
		t.Errorf("redisync's lock was disturbed: %v", err)
	}
}
