package redisync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync"
)

// A lock that stays held: Holders says which Client holds it (the ID each
// process logs at start, see Client.ID), how many times, and how much of
// its lease is left.
func ExampleMutex_Holders() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	m := c.Mutex("orders:42")
	lctx, _ := m.Lock(ctx)
	lctx, _ = m.Lock(lctx) // re-entered
	defer m.Unlock(lctx)

	hs, _ := m.Holders(ctx)
	for _, h := range hs {
		fmt.Println("held by this process:", h.ClientID == c.ID())
		fmt.Println("re-entries:", h.Count)
		fmt.Println("lease left within 30s:", h.Lease > 0 && h.Lease <= redisync.DefaultWatchdogTimeout)
	}
	// Output:
	// held by this process: true
	// re-entries: 2
	// lease left within 30s: true
}

// A MultiLock reads as one lock: locked while any of its names is held,
// and ForceUnlock frees them all.
func ExampleMultiLock_ForceUnlock() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	transfer := c.MultiLock([]string{"account:1", "account:2"})
	lctx, _ := transfer.Lock(ctx)
	n, _ := transfer.HoldCount(lctx)
	ttl, _ := transfer.TTL(ctx)
	fmt.Println("holds:", n, "- lease left within 30s:", ttl > 0 && ttl <= 30*time.Second)

	freed, _ := transfer.ForceUnlock(ctx)
	locked, _ := transfer.IsLocked(ctx)
	fmt.Println("freed:", freed, "- locked:", locked, "- the hold's context:", lctx.Err())
	// Output:
	// holds: 1 - lease left within 30s: true
	// freed: true - locked: false - the hold's context: context canceled
}

// A MultiLock's Holders says who holds each of its names: here a Mutex of
// another process holds one of them, so the MultiLock waits.
func ExampleMultiLock_Holders() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	lctx, _ := c.Mutex("account:2").Lock(ctx) // another part of the program
	defer c.Mutex("account:2").Unlock(lctx)

	transfer := c.MultiLock([]string{"account:1", "account:2"})
	byName, _ := transfer.Holders(ctx)
	for _, name := range transfer.Names() {
		fmt.Printf("%s: %d holder(s)\n", name, len(byName[name]))
	}
	// Output:
	// account:1: 0 holder(s)
	// account:2: 1 holder(s)
}
