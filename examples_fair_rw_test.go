package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// fairRWExample returns an embedded Redis and a function that makes Clients
// on it, each on its own connection pool like a separate process; done closes
// them all.
func fairRWExample() (newClient func() *redisync.Client, done func()) {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	var closers []func()
	newClient = func() *redisync.Client {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		c, err := redisync.New(rdb)
		if err != nil {
			panic(err)
		}
		closers = append(closers, func() { _ = c.Close(); _ = rdb.Close() })
		return c
	}
	return newClient, func() {
		for _, f := range closers {
			f()
		}
		mr.Close()
	}
}

// Three processes queue for a fair lock while a fourth holds it: they get it
// in the order they asked, whichever wakes first.
func ExampleFairMutex() {
	newClient, done := fairRWExample()
	defer done()
	ctx := context.Background()

	holder := newClient().FairMutex("report:daily")
	hctx, err := holder.Lock(ctx)
	if err != nil {
		panic(err)
	}

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for _, who := range []string{"first", "second", "third"} {
		f := newClient().FairMutex("report:daily")
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, err := f.Lock(ctx) // joins the queue in Redis
			if err != nil {
				panic(err)
			}
			defer f.Unlock(lctx)
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
		}()
		time.Sleep(100 * time.Millisecond) // let it arrive before the next one
	}

	if err := holder.Unlock(hctx); err != nil { // hands the lock to "first"
		panic(err)
	}
	wg.Wait()
	fmt.Println(order)
	// Output: [first second third]
}

// A waiter whose context ends leaves the queue at once and gets the
// context's error; WithWaiterTimeout bounds how long a waiter that crashed
// can hold the queue up.
func ExampleFairMutex_Lock_timeout() {
	newClient, done := fairRWExample()
	defer done()
	ctx := context.Background()

	a := newClient().FairMutex("invoice:7")
	actx, err := a.Lock(ctx)
	if err != nil {
		panic(err)
	}
	defer a.Unlock(actx)

	b := newClient().FairMutex("invoice:7", redisync.WithWaiterTimeout(3*time.Second))
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = b.Lock(wctx)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))

	_, err = b.TryLock(ctx)
	fmt.Println(errors.Is(err, redisync.ErrNotAcquired))
	// Output:
	// true
	// true
}

// Readers share the lock; a writer excludes them.
func ExampleRWMutex() {
	newClient, done := fairRWExample()
	defer done()
	ctx := context.Background()
	rw := newClient().RWMutex("config")
	other := newClient().RWMutex("config") // another process

	r1, err := rw.RLock(ctx)
	if err != nil {
		panic(err)
	}
	r2, err := other.RLock(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("holders:", len(fairRWMust(rw.Holders(ctx))))
	_, err = rw.TryLock(ctx)
	fmt.Println("write while read:", errors.Is(err, redisync.ErrNotAcquired))
	_ = rw.RUnlock(r1)
	_ = other.RUnlock(r2)

	w, err := other.Lock(ctx)
	if err != nil {
		panic(err)
	}
	_, err = rw.TryRLock(ctx)
	fmt.Println("read while write:", errors.Is(err, redisync.ErrNotAcquired))
	_ = other.Unlock(w)
	fmt.Println("locked:", fairRWMust(rw.IsLocked(ctx)))
	// Output:
	// holders: 2
	// write while read: true
	// read while write: true
	// locked: false
}

// A writer may take the read lock under its write hold and keep it after
// Unlock (a downgrade); its read context stays valid.
func ExampleRWMutex_downgrade() {
	newClient, done := fairRWExample()
	defer done()
	ctx := context.Background()
	rw := newClient().RWMutex("catalog")

	wctx, err := rw.Lock(ctx)
	if err != nil {
		panic(err)
	}
	// ... update the catalog under wctx ...
	rctx, err := rw.RLock(wctx) // downgrade: same owner
	if err != nil {
		panic(err)
	}
	if err := rw.Unlock(wctx); err != nil {
		panic(err)
	}
	fmt.Println("write context ended:", wctx.Err() != nil)
	fmt.Println("read context live:", rctx.Err() == nil)
	for _, h := range fairRWMust(rw.Holders(ctx)) {
		fmt.Println("holder: write", h.Write, "count", h.Count)
	}

	// Others may read now, but not write.
	other := newClient().RWMutex("catalog")
	_, err = other.TryLock(ctx)
	fmt.Println("other writer:", errors.Is(err, redisync.ErrNotAcquired))
	if err := rw.RUnlock(rctx); err != nil {
		panic(err)
	}
	fmt.Println("locked:", fairRWMust(rw.IsLocked(ctx)))
	// Output:
	// write context ended: true
	// read context live: true
	// holder: write false count 1
	// other writer: true
	// locked: false
}

func fairRWMust[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
