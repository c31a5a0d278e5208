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
