package redisync_test

import (
	"context"
	"errors"
	"fmt"
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
	ctx, err := m.Lock(context.Background())
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	defer m.Unlock(ctx)
	// ... work under the lock, using ctx: it ends if the lock is lost.
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

// WithOwner makes one owner that several goroutines share on purpose.
func ExampleWithOwner() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("batch")

	job := redisync.WithOwner(context.Background())
	ctx, _ := m.Lock(job)
	helper := make(chan int)
	go func() {
		hctx, err := m.TryLock(ctx) // same owner: re-enters
		if err != nil {
			panic(err)
		}
		n, _ := m.HoldCount(hctx)
		m.Unlock(hctx)
		helper <- n
	}()
	fmt.Println("helper saw holds:", <-helper)
	m.Unlock(ctx)
	// Output: helper saw holds: 2
}
