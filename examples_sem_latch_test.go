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

	sem := c.Semaphore("jobs")
	if _, err := sem.TrySetPermits(ctx, 2); err != nil { // first process to start sets it
		panic(err)
	}

	var running, peak atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, err := sem.Acquire(ctx, 1) // waits for a permit
			if err != nil {
				panic(err)
			}
			defer sem.Release(hctx, 1)
			// Work under hctx: it is cancelled if the permit's lease is lost.
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			running.Add(-1)
		}()
	}
	wg.Wait()
	free, _ := sem.Available(ctx)
	fmt.Println("never more than 2 at once:", peak.Load() <= 2, "- free again:", free)
	// Output: never more than 2 at once: true - free again: 2
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
