package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// cachedReport reads the report from the cache; on a miss, one caller
// rebuilds it under the lock while the others wait for that lock, and then
// find the cache filled. Its error says whether the lock was held
// throughout the rebuild.
func cachedReport(ctx context.Context, rdb *redis.Client, c *redisync.Client, rebuild func() string) (report string, err error) {
	const key = "cache:report"
	report, err = rdb.Get(ctx, key).Result()
	if !errors.Is(err, redis.Nil) {
		return report, err // a hit (or Redis failed)
	}
	m := c.Mutex("lock:" + key)
	lctx, err := m.Lock(ctx) // one rebuilds; the others wait here
	if err != nil {
		return "", err
	}
	defer func() {
		if uerr := m.Unlock(lctx); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	// Look again: whoever held the lock before may have filled the cache.
	report, err = rdb.Get(lctx, key).Result()
	if !errors.Is(err, redis.Nil) {
		return report, err
	}
	report = rebuild()
	// Write only while the lock is still this caller's (lctx is live).
	if err := lctx.Err(); err != nil {
		return "", context.Cause(lctx)
	}
	return report, rdb.Set(lctx, key, report, time.Minute).Err()
}

// The cache-stampede scenario: twenty requests in four processes find the
// cache empty at once; one of them rebuilds the report from the database,
// the others wait for it and then read the cache, so the database is
// queried once instead of twenty times.
func Example_cacheStampede() {
	mr, err := miniredis.Run() // the shared Redis
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	var queries atomic.Int32
	rebuild := func() string { // the expensive query
		queries.Add(1)
		time.Sleep(50 * time.Millisecond)
		return "42 orders"
	}

	var wg sync.WaitGroup
	var served atomic.Int32
	for range 4 { // four processes, each with its own clients
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		defer rdb.Close()
		c, err := redisync.New(rdb)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		for range 5 { // five requests in each
			wg.Add(1)
			go func() {
				defer wg.Done()
				report, err := cachedReport(context.Background(), rdb, c, rebuild)
				if err != nil {
					panic(err)
				}
				if report == "42 orders" {
					served.Add(1)
				}
			}()
		}
	}
	wg.Wait()
	fmt.Println("requests served:", served.Load())
	fmt.Println("database queries:", queries.Load())
	// Output:
	// requests served: 20
	// database queries: 1
}
