package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// Leader election: whoever holds the lock leads, for as long as the hold's
// context is live. When the lease is lost (here another process frees the
// lock by force), that context ends: the leader steps down and contends
// again. When the service shuts down (ctx ends), the hold ends with it and
// the lock is released for the next leader.
func ExampleMutex_Lock_leaderElection() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	// A short watchdog timeout, so that a lost lease is noticed within
	// 100ms (the default, 30s, notices it within 10s).
	c, _ := redisync.New(rdb, redisync.WithWatchdogTimeout(300*time.Millisecond))
	defer c.Close()

	ctx, shutdown := context.WithCancel(context.Background())
	elected := make(chan int)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		m := c.Mutex("scheduler:leader")
		for term := 1; ; term++ {
			lctx, err := m.Lock(ctx) // waits for leadership
			if err != nil {
				return // ctx ended: shutting down
			}
			fmt.Println("term", term, "leading")
			elected <- term
			<-lctx.Done() // lead, doing the work under lctx, until the hold ends
			fmt.Println("term", term, "stepped down:", context.Cause(lctx))
			m.Unlock(lctx)
		}
	}()

	<-elected
	// Another process (an operator's tool) takes the lock away.
	admin, _ := redisync.New(rdb)
	defer admin.Close()
	admin.Mutex("scheduler:leader").ForceUnlock(context.Background())
	<-elected // the leader noticed, stepped down and was elected again

	shutdown()
	<-stopped
	// Output:
	// term 1 leading
	// term 1 stepped down: redisync: lease lost
	// term 2 leading
	// term 2 stepped down: context canceled
}

// TryLockFor bounds the wait, never the hold: the hold it gets lasts until
// Unlock, or until the context it was given ends.
func ExampleMutex_TryLockFor() {
	c, done := exampleClient()
	defer done()
	m := c.Mutex("report:daily")

	held, _ := m.Lock(context.Background())
	// Another request: its error says "not acquired: the wait ran out", and
	// who holds the lock (this Client's ID) with the lease left.
	_, err := m.TryLockFor(context.Background(), 100*time.Millisecond)
	fmt.Println("not acquired:", errors.Is(err, redisync.ErrNotAcquired))
	m.Unlock(held)

	ctx, err := m.TryLockFor(context.Background(), 100*time.Millisecond)
	if err != nil {
		panic(err)
	}
	time.Sleep(200 * time.Millisecond) // longer than the wait bound
	locked, _ := m.IsLocked(ctx)
	fmt.Println("still held:", ctx.Err() == nil && locked)
	m.Unlock(ctx)
	// Output:
	// not acquired: true
	// still held: true
}

// An Observer counts holds for metrics: Acquired once per hold (not per
// re-entry), Released once when it ends, AcquireFailed once per call that
// got no hold. Each is given the context of the call that took the hold
// (or tried to): a tracer finds its span there.
func ExampleWithObserver() {
	var acquired, released, failed atomic.Int64
	obs := &redisync.Observer{
		Acquired: func(_ context.Context, e redisync.HoldEvent) { acquired.Add(1) },
		Released: func(_ context.Context, e redisync.HoldEvent) { released.Add(1) },
		AcquireFailed: func(_ context.Context, e redisync.HoldEvent) {
			failed.Add(1)
			fmt.Println("not acquired:", e.Name, errors.Is(e.Cause, redisync.ErrNotAcquired))
		},
	}
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := redisync.New(rdb, redisync.WithObserver(obs))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	m := c.Mutex("orders:42")
	for i := 0; i < 3; i++ {
		ctx, _ := m.Lock(context.Background())
		inner, _ := m.Lock(ctx) // a re-entry: the same hold
		m.Unlock(inner)
		m.Unlock(ctx)
	}
	held, _ := m.Lock(context.Background())
	if _, err := m.TryLock(context.Background()); err == nil { // another owner: fails
		panic("acquired twice")
	}
	m.Unlock(held)
	fmt.Println("acquired:", acquired.Load(), "released:", released.Load(), "failed:", failed.Load())
	// Output:
	// not acquired: orders:42 true
	// acquired: 4 released: 4 failed: 1
}
