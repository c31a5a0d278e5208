package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// semLatchExampleClient returns a Client on an embedded Redis, and a function that
// closes both.
func semLatchExampleClient() (*redisync.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	c, err := redisync.New(rdb)
	if err != nil {
		panic(err)
	}
	return c, func() { _ = c.Close(); _ = rdb.Close(); mr.Close() }
}

// At most two jobs run at once, across every process sharing the semaphore.
func ExampleSemaphore() {
	c, done := semLatchExampleClient()
	defer done()
	ctx := context.Background()

	// Every process states the total on its handle: the first acquisition
	// sets it, and sets it again if Redis loses it (see WithPermits).
	sem := c.Semaphore("jobs", redisync.WithPermits(2))

	var running, peak atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := sem.Do(ctx, 1, func(hctx context.Context) error { // waits for a permit
				// Work under hctx: it is cancelled if the permit's lease is lost.
				n := running.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				running.Add(-1)
				return nil
			})
			if err != nil {
				panic(err)
			}
		}()
	}
	wg.Wait()
	free, _ := sem.Available(ctx)
	fmt.Println("never more than 2 at once:", peak.Load() <= 2, "- free again:", free)
	// Output: never more than 2 at once: true - free again: 2
}

// Redis restarts without its data: the semaphore's total is lost with it.
// A handle that states the total creates it again at its next acquisition,
// where a total set once with TrySetPermits would be gone and every
// Acquire would wait.
func ExampleWithPermits() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := redisync.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx := context.Background()

	sem := c.Semaphore("heavy-jobs", redisync.WithPermits(3))
	hctx, err := sem.Acquire(ctx, 1) // no SetPermits first
	if err != nil {
		panic(err)
	}
	free, _ := sem.Available(ctx)
	fmt.Println("free:", free)
	_ = sem.Release(hctx, 1)

	mr.FlushAll() // Redis lost its data, the total with it

	hctx, err = sem.Acquire(ctx, 2)
	if err != nil {
		panic(err)
	}
	total, _ := rdb.HGet(ctx, "heavy-jobs", "permits").Result()
	free, _ = sem.Available(ctx)
	fmt.Println("total:", total, "- free:", free)
	_ = sem.Release(hctx, 2)
	// Output:
	// free: 2
	// total: 3 - free: 1
}

// One owner may hold several permits and give them back in parts.
func ExampleSemaphore_Release() {
	c, done := semLatchExampleClient()
	defer done()
	ctx := context.Background()

	sem := c.Semaphore("pool")
	_ = sem.SetPermits(ctx, 5)
	hctx, err := sem.Acquire(ctx, 3)
	if err != nil {
		panic(err)
	}
	free, _ := sem.Available(ctx)
	fmt.Println("free:", free)

	_ = sem.Release(hctx, 2)
	free, _ = sem.Available(ctx)
	fmt.Println("free:", free, "- still held:", hctx.Err() == nil)

	err = sem.Release(hctx, 2) // holds only 1
	fmt.Println(errors.Is(err, redisync.ErrNotHeld))

	_ = sem.Release(hctx, 1)
	free, _ = sem.Available(ctx)
	fmt.Println("free:", free, "- still held:", hctx.Err() == nil)
	// Output:
	// free: 2
	// free: 4 - still held: true
	// true
	// free: 5 - still held: false
}

// TryAcquire never waits.
func ExampleSemaphore_TryAcquire() {
	c, done := semLatchExampleClient()
	defer done()
	ctx := context.Background()

	sem := c.Semaphore("slots")
	_ = sem.SetPermits(ctx, 1)
	hctx, _ := sem.TryAcquire(ctx, 1)
	_, err := sem.TryAcquire(ctx, 1) // another owner
	fmt.Println(errors.Is(err, redisync.ErrNotAcquired))
	_ = sem.Release(hctx, 1)
	// Output: true
}

// Wait until three workers, possibly in other processes, are done.
func ExampleCountDownLatch() {
	c, done := semLatchExampleClient()
	defer done()
	ctx := context.Background()

	latch := c.CountDownLatch("batch-7")
	if _, err := latch.TrySetCount(ctx, 3); err != nil {
		panic(err)
	}
	for i := range 3 {
		go func() {
			_ = i // ... work ...
			_ = latch.CountDown(ctx)
		}()
	}
	if err := latch.Wait(ctx); err != nil { // bounded by ctx
		panic(err)
	}
	n, _ := latch.Count(ctx)
	fmt.Println("all done, count", n)
	// Output: all done, count 0
}
