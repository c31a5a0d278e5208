package main

import (
	"context"
	"crypto/fips140"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// The red-packet scenario: many servers share one budget in Redis, and each
// hands out random amounts from it until it is spent. Reading the remainder,
// deciding and writing it back is a critical section across processes.
const (
	budgetKey = "demo:red-packet:remaining"
	paidKey   = "demo:red-packet:paid"
	lockName  = "demo:red-packet:lock"
)

func demo(ctx context.Context, out io.Writer, addr string, servers int, budget int64) error {
	if servers < 1 || budget < 1 {
		return fmt.Errorf("servers and budget must be positive")
	}
	where := "a real Redis at " + addr
	if addr == "" {
		if fips140.Enforced() {
			// miniredis computes the SHA-1 of every script it runs (Go
			// would panic); a real Redis hashes on the server.
			return errors.New("the embedded Redis (miniredis) cannot run under GODEBUG=fips140=only: use -redis host:port")
		}
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		addr, where = mr.Addr(), "an embedded Redis (miniredis)"
	}
	fmt.Fprintf(out, "red-packet demo on %s: %d servers share a budget of %s\n\n", where, servers, cents(budget))

	noLock, err := hand(ctx, addr, servers, budget, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "without a lock:      paid %s of %s (%s)\n", cents(noLock.paid), cents(budget), verdict(noLock.paid, budget))
	locked, err := hand(ctx, addr, servers, budget, true)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "with redisync.Mutex: paid %s of %s (%s) in %d packets, %v\n",
		cents(locked.paid), cents(budget), verdict(locked.paid, budget), locked.packets, locked.took.Round(time.Millisecond))
	if locked.paid != budget {
		return errors.New("the locked run did not pay exactly the budget")
	}
	return nil
}

type result struct {
	paid    int64
	packets int
	took    time.Duration
}

// hand runs the servers until the budget is spent and returns what Redis
// recorded as paid.
func hand(ctx context.Context, addr string, servers int, budget int64, lock bool) (result, error) {
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.Del(ctx, budgetKey, paidKey, lockName).Err(); err != nil {
		return result{}, err
	}
	if err := admin.Set(ctx, budgetKey, budget, 0).Err(); err != nil {
		return result{}, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	packets := 0
	for i := 0; i < servers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := server(ctx, addr, budget, lock)
			mu.Lock()
			defer mu.Unlock()
			packets += n
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	paid, err := admin.Get(ctx, paidKey).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return result{}, err
	}
	admin.Del(ctx, budgetKey, paidKey)
	return result{paid: paid, packets: packets, took: time.Since(start)}, nil
}

// server is one process: its own Redis connections and its own redisync
// Client. It hands out packets until the budget is spent.
func server(ctx context.Context, addr string, budget int64, lock bool) (packets int, err error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := redisync.New(rdb)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	m := c.Mutex(lockName)
	maxPacket := max(budget/50, 1)
	for {
		hctx := ctx
		if lock {
			if hctx, err = m.Lock(ctx); err != nil {
				return packets, err
			}
		}
		spent, err := packet(hctx, rdb, maxPacket)
		if lock {
			if uerr := m.Unlock(hctx); uerr != nil && err == nil {
				err = uerr
			}
		}
		if err != nil || spent {
			return packets, err
		}
		packets++
	}
}

// packet is the critical section: read the remainder, pick an amount (the
// last packet takes what is left), and write both back. It reports whether
// the budget was already spent.
func packet(ctx context.Context, rdb *redis.Client, maxPacket int64) (spent bool, err error) {
	left, err := rdb.Get(ctx, budgetKey).Int64()
	if err != nil {
		return false, err
	}
	if left <= 0 {
		return true, nil
	}
	amount := min(1+rand.Int64N(maxPacket), left)
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // the work of a real payment
	if err := rdb.Set(ctx, budgetKey, left-amount, 0).Err(); err != nil {
		return false, err
	}
	return false, rdb.IncrBy(ctx, paidKey, amount).Err()
}

func verdict(paid, budget int64) string {
	switch {
	case paid > budget:
		return fmt.Sprintf("OVERSPENT by %s", cents(paid-budget))
	case paid < budget:
		return fmt.Sprintf("short by %s", cents(budget-paid))
	default:
		return "exactly the budget"
	}
}

func cents(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	return fmt.Sprintf("%s%d.%02d", sign, n/100, n%100)
}
