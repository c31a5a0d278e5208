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

// exampleClient returns a Client on an embedded Redis, for the examples.
func exampleClient() (*redisync.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	c, err := redisync.New(rdb)
	if err != nil {
		panic(err)
	}
	return c, func() { c.Close(); rdb.Close(); mr.Close() }
}

func Example() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	c, err := redisync.New(rdb)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	m := c.Mutex("orders:42")
	lctx, err := m.Lock(context.Background())
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	defer m.Unlock(lctx)
	// ... work under the lock, using lctx: it ends if the lock is lost.
}

func ExampleMutex_Lock() {
	c, done := exampleClient()
	defer done()

	m := c.Mutex("orders:42")
	ctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	defer m.Unlock(ctx)

	locked, _ := m.IsLocked(ctx)
	fmt.Println("locked:", locked)
	// Output: locked: true
}

// Passing the hold's context down lets nested code take the same lock again.
func ExampleMutex_Lock_reentry() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("cache:rebuild")

	inner := func(ctx context.Context) {
		ctx, err := m.Lock(ctx) // re-enters: same owner
		if err != nil {
			panic(err)
		}
		defer m.Unlock(ctx)
		n, _ := m.HoldCount(ctx)
		fmt.Println("holds inside:", n)
	}

	ctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	inner(ctx)
	n, _ := m.HoldCount(ctx)
	fmt.Println("holds after:", n)
	m.Unlock(ctx)
	// Output:
	// holds inside: 2
	// holds after: 1
}

func ExampleMutex_TryLock() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("report:daily")

	ctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	defer m.Unlock(ctx)

	// Another request (a context without the owner) does not wait.
	if _, err := m.TryLock(context.Background()); errors.Is(err, redisync.ErrNotAcquired) {
		fmt.Println("someone else is building the report")
	}
	// Output: someone else is building the report
}

// A wait ends when its context ends, and returns the context's error.
func ExampleMutex_Lock_timeout() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("slow")
	held, _ := m.Lock(context.Background())
	defer m.Unlock(held)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := m.Lock(ctx)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}

// The hold's context ends with cause ErrLeaseLost when the lock is lost, so
// work done under it stops.
func ExampleErrLeaseLost() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("job", redisync.WithLease(100*time.Millisecond))

	ctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	select {
	case <-ctx.Done():
		fmt.Println(errors.Is(context.Cause(ctx), redisync.ErrLeaseLost))
	case <-time.After(time.Second):
		fmt.Println("still working")
	}
	// Output: true
}

// Inside a hold, WithOwner makes a caller contend for the lock as another
// owner would, instead of re-entering it.
func ExampleWithOwner() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("batch")

	lctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	_, err = m.TryLock(lctx) // the same hold: re-enters
	fmt.Println("re-entry:", err)
	m.Unlock(lctx)

	_, err = m.TryLock(redisync.WithOwner(lctx)) // a new owner: contends
	fmt.Println("new owner:", errors.Is(err, redisync.ErrNotAcquired))
	m.Unlock(lctx)
	// Output:
	// re-entry: <nil>
	// new owner: true
}

// Goroutines handed a hold's context share that hold, and only that one:
// on every other lock they exclude each other.
func ExampleMutex_Lock_goroutines() {
	c, done := exampleClient()
	defer done()
	leader, shared := c.Mutex("leader"), c.Mutex("shared")

	lctx, err := leader.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	defer leader.Unlock(lctx)

	var wg sync.WaitGroup
	var inside, most atomic.Int32
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, err := shared.Lock(lctx) // no hold of "shared" in lctx: a fresh owner
			if err != nil {
				panic(err)
			}
			for n := inside.Add(1); ; {
				if m := most.Load(); n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
			inside.Add(-1)
			shared.Unlock(sctx)
		}()
	}
	wg.Wait()
	fmt.Println("most inside at once:", most.Load())
	// Output: most inside at once: 1
}
