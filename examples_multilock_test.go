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

// A fenced transfer: each account's row keeps the highest token that wrote
// it and refuses lower ones. The MultiLock's token for each account comes
// from the counter a fenced Mutex of that account uses, so a stale holder
// is refused whichever kind it held the account with.
func ExampleMultiLock_Token() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	rows := map[string]int64{} // account -> highest token seen: stands for a database
	write := func(account string, token int64) bool {
		if token < rows[account] {
			return false // a stale holder
		}
		rows[account] = token
		return true
	}

	accounts := []string{"lock:account:alice", "lock:account:bob"}
	m := c.MultiLock(accounts, redisync.WithFencing())
	lctx, _ := m.Lock(ctx)
	for _, a := range accounts {
		token, _ := m.Token(lctx, a)
		fmt.Println("transfer writes", a, write(a, token))
	}
	stale, _ := m.Token(lctx, "lock:account:bob")
	m.Unlock(lctx)

	// A later holder of bob's account alone, through a Mutex.
	b := c.Mutex("lock:account:bob", redisync.WithFencing())
	bctx, _ := b.Lock(ctx)
	token, _ := b.Token(bctx)
	fmt.Println("a later Mutex holder writes bob:", write("lock:account:bob", token))
	b.Unlock(bctx)
	fmt.Println("the transfer's stale write to bob:", write("lock:account:bob", stale))
	// Output:
	// transfer writes lock:account:alice true
	// transfer writes lock:account:bob true
	// a later Mutex holder writes bob: true
	// the transfer's stale write to bob: false
}
