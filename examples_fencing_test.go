package redisync_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// guardedWrite is the protected resource's half of fencing: it writes a
// value with the token of the writer's hold, and refuses a token lower
// than the highest that has written (an equal one is the same hold
// writing again). A SQL table does the same with
// "UPDATE ... SET value = ?, token = ? WHERE id = ? AND token <= ?".
var guardedWrite = redis.NewScript(`
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then
  return 0
end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1`)

// A holder stalls past its lease (a GC pause, a stopped VM), another takes
// the lock and writes, and the first one's late write is refused by the
// resource, because its token is lower.
func ExampleWithFencing() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	// Two processes, A and B.
	procA, err := redisync.New(rdb)
	if err != nil {
		panic(err)
	}
	defer procA.Close()
	procB, err := redisync.New(rdb)
	if err != nil {
		panic(err)
	}
	defer procB.Close()

	write := func(who string, token int64) {
		ok, err := guardedWrite.Run(ctx, rdb, []string{"account:7"}, token, "written by "+who).Bool()
		if err != nil {
			panic(err)
		}
		if ok {
			fmt.Printf("%s writes with its token: accepted\n", who)
		} else {
			fmt.Printf("%s writes with its token: rejected\n", who)
		}
	}

	a := procA.Mutex("lock:account:7", redisync.WithFencing(), redisync.WithLease(10*time.Second))
	actx, err := a.Lock(ctx)
	if err != nil {
		panic(err)
	}
	tokenA, _ := a.Token(actx)
	fmt.Println("A holds the lock")
	write("A", tokenA)

	// A stalls, and its lease runs out in Redis (here, Redis's clock is
	// moved on).
	mr.FastForward(11 * time.Second)

	b := procB.Mutex("lock:account:7", redisync.WithFencing())
	bctx, err := b.Lock(ctx)
	if err != nil {
		panic(err)
	}
	tokenB, _ := b.Token(bctx)
	fmt.Println("B holds the lock, with a higher token:", tokenB > tokenA)
	write("B", tokenB)

	// A resumes in code already past its last check, and writes.
	write("A", tokenA)
	_ = b.Unlock(bctx)

	v, _ := rdb.HGet(ctx, "account:7", "value").Result()
	fmt.Println("the account was", v)
	// Output:
	// A holds the lock
	// A writes with its token: accepted
	// B holds the lock, with a higher token: true
	// B writes with its token: accepted
	// A writes with its token: rejected
	// the account was written by B
}
