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
		lctx, err := m.Lock(ctx) // both, or neither
		if err != nil {
			return err
		}
		defer m.Unlock(lctx)
		// Here lctx is live exactly while both locks are held: pass it
		// to the database calls.
		balance[from] -= amount
		balance[to] += amount
		return nil
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
