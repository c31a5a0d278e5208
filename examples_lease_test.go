package redisync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync"
)

// One Client, two leases, both renewed by its watchdog: a transfer's
// locks get a 2s lease (a crashed holder frees them within 2s), while a
// long report keeps the Client's default 30s lease (WithWatchdogTimeout).
func ExampleWithRenewedLease() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()

	transfer := c.MultiLock([]string{"account:1", "account:2"}, redisync.WithRenewedLease(2*time.Second))
	tctx, _ := transfer.Lock(ctx)
	defer transfer.Unlock(tctx)
	report := c.Mutex("report:nightly")
	rctx, _ := report.Lock(ctx)
	defer report.Unlock(rctx)

	short, _ := c.Mutex("account:1").TTL(ctx)
	long, _ := report.TTL(ctx)
	fmt.Println("the transfer's lease:", short)
	fmt.Println("the report's lease:", long)
	// Output:
	// the transfer's lease: 2s
	// the report's lease: 30s
}

// Options are typed per primitive: an option that applies to several
// locks (WithLease is a LockOption: every lock) is an option of each, and
// a list of options for one constructor is a slice of its type. An option
// that does not apply does not compile: c.Mutex("x",
// redisync.WithPermits(3)) is a compile error.
func ExampleLockOption() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()

	lease := redisync.WithLease(time.Minute) // a LockOption
	m := c.Mutex("report:daily", lease)
	s := c.Semaphore("exports", lease, redisync.WithPermits(2))

	queue := []redisync.FairOption{lease, redisync.WithFencing(), redisync.WithWaiterTimeout(2 * time.Second)}
	f := c.FairMutex("queue:payments", queue...)

	mctx, _ := m.Lock(ctx)
	sctx, _ := s.Acquire(ctx, 1)
	fctx, _ := f.Lock(ctx)
	token, fenced := f.Token(fctx)
	ttl, _ := m.TTL(ctx)
	fmt.Println("fixed lease:", ttl, "- fenced:", fenced && token > 0)
	f.Unlock(fctx)
	s.Release(sctx, 1)
	m.Unlock(mctx)
	// Output:
	// fixed lease: 1m0s - fenced: true
}
