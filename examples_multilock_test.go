package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redisync-go/redisync"
)

// A transfer between two accounts holds both accounts' locks, taken as
// one: transfers in both directions at once never deadlock, and a Mutex
// of either account (or a Redisson RLock) excludes them.
func ExampleMultiLock() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	balance := map[string]int{"alice": 100, "bob": 100} // stands for a database

	transfer := func(from, to string, amount int) error {
		m := c.MultiLock([]string{"lock:account:" + from, "lock:account:" + to})
		return m.Do(ctx, func(lctx context.Context) error { // both, or neither
			// Here lctx is live exactly while both locks are held: pass
			// it to the database calls.
			balance[from] -= amount
			balance[to] += amount
			return nil
		})
	}

	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				transfer("alice", "bob", 3)
			} else {
				transfer("bob", "alice", 1)
			}
		}()
	}
	wg.Wait()
	fmt.Println("alice:", balance["alice"], "bob:", balance["bob"])

	// While a MultiLock holds the accounts, a Mutex of one of them waits.
	m := c.MultiLock([]string{"lock:account:alice", "lock:account:bob"})
	lctx, _ := m.Lock(ctx)
	_, err := c.Mutex("lock:account:bob").TryLock(ctx)
	fmt.Println("a Mutex of bob's account:", errors.Is(err, redisync.ErrNotAcquired))
	m.Unlock(lctx)
	// Output:
	// alice: 80 bob: 120
	// a Mutex of bob's account: true
}

// A fenced transfer: each account's row keeps the highest token that has
// accessed it, and refuses lower ones on every access a decision depends
// on, reads included (fencing the writes alone loses updates: see
// WithFencing). The MultiLock's token for each account comes from the
// counter a fenced Mutex of that account uses, so a stale holder is
// refused whichever kind it held the account with.
func ExampleMultiLock_Token() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	rows := map[string]int64{} // account -> highest token seen: stands for a database
	access := func(account string, token int64) bool {
		if token < rows[account] {
			return false // a stale holder
		}
		rows[account] = token // recorded on a read too
		return true
	}

	accounts := []string{"lock:account:alice", "lock:account:bob"}
	m := c.MultiLock(accounts, redisync.WithFencing())
	lctx, _ := m.Lock(ctx)
	for _, a := range accounts {
		token, _ := m.Token(lctx, a)
		fmt.Println("transfer reads", a, access(a, token))
	}
	for _, a := range accounts { // the new balances, from what it read
		token, _ := m.Token(lctx, a)
		fmt.Println("transfer writes", a, access(a, token))
	}
	stale, _ := m.Token(lctx, "lock:account:bob")
	m.Unlock(lctx)

	// A later holder of bob's account alone, through a Mutex: its read
	// records its token before any write of the transfer's comes late.
	b := c.Mutex("lock:account:bob", redisync.WithFencing())
	bctx, _ := b.Lock(ctx)
	token, _ := b.Token(bctx)
	fmt.Println("a later Mutex holder reads bob:", access("lock:account:bob", token))
	fmt.Println("the transfer's stale write to bob:", access("lock:account:bob", stale))
	fmt.Println("the later holder writes bob:", access("lock:account:bob", token))
	b.Unlock(bctx)
	// Output:
	// transfer reads lock:account:alice true
	// transfer reads lock:account:bob true
	// transfer writes lock:account:alice true
	// transfer writes lock:account:bob true
	// a later Mutex holder reads bob: true
	// the transfer's stale write to bob: false
	// the later holder writes bob: true
}
