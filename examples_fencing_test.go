package redisync_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// guardedRead and guardedWrite are the protected resource's half of
// fencing, for every access a decision depends on: each refuses a token
// lower than the highest that has accessed the account (an equal one is
// the same hold again) and records the token; the read then returns the
// value ({1, value}, or {0} when refused), the write sets it (1, or 0).
// Fencing the write alone would lose updates (see ExampleWithFencing).
// Tokens are compared as numbers: Lua holds them as doubles, exact up to
// 2^53, but tostring would print 14 digits only. A SQL table does the
// same with "UPDATE accounts SET token = ? WHERE id = ? AND token <= ?
// RETURNING balance" and "UPDATE accounts SET balance = ?, token = ?
// WHERE id = ? AND token <= ?".
var (
	guardedRead = redis.NewScript(`
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then
  return {0}
end
redis.call('hset', KEYS[1], 'token', ARGV[1])
return {1, redis.call('hget', KEYS[1], 'value') or '0'}`)
	guardedWrite = redis.NewScript(`
local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) < seen then
  return 0
end
redis.call('hset', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1`)
)

// fencedRead reads key's value through guardedRead with token; ok is
// false when the resource refused the token.
func fencedRead(ctx context.Context, rdb redis.Scripter, key string, token int64) (value int64, ok bool, err error) {
	r, err := guardedRead.Run(ctx, rdb, []string{key}, token).Slice()
	if err != nil || r[0].(int64) == 0 {
		return 0, false, err
	}
	value, err = strconv.ParseInt(r[1].(string), 10, 64)
	return value, err == nil, err
}

// fencedWrite writes key's value through guardedWrite with token; ok is
// false when the resource refused the token.
func fencedWrite(ctx context.Context, rdb redis.Scripter, key string, token, value int64) (bool, error) {
	return guardedWrite.Run(ctx, rdb, []string{key}, token, value).Bool()
}

// A read-modify-write, fenced: holder A reads the balance and stalls past
// its lease (a GC pause, a stopped VM); B takes the lock, reads the same
// balance (its read records its higher token) and adds its deposit; A
// resumes in code already past its last check and writes its own
// deposit, which the resource refuses. Had only the writes been fenced,
// A's write would have come before B's first one and been accepted, and
// B's write, from the same read, would have overwritten it: a lost
// update that both holders believe written.
func ExampleWithFencing() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	rdb.HSet(ctx, "account:7", "value", 100)

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

	read := func(who string, token int64) int64 {
		v, ok, err := fencedRead(ctx, rdb, "account:7", token)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s reads with its token: %v (accepted: %v)\n", who, v, ok)
		return v
	}
	write := func(who string, token, v int64) {
		ok, err := fencedWrite(ctx, rdb, "account:7", token, v)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s writes %d with its token (accepted: %v)\n", who, v, ok)
	}

	a := procA.Mutex("lock:account:7", redisync.WithFencing(), redisync.WithLease(10*time.Second))
	actx, err := a.Lock(ctx)
	if err != nil {
		panic(err)
	}
	tokenA, _ := a.Token(actx)
	balanceA := read("A", tokenA)

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
	balanceB := read("B", tokenB)

	// A resumes in code already past its last check, and writes.
	write("A", tokenA, balanceA+10)
	write("B", tokenB, balanceB+20)
	_ = b.Unlock(bctx)

	v, _ := rdb.HGet(ctx, "account:7", "value").Result()
	fmt.Println("the balance is", v)
	// Output:
	// A reads with its token: 100 (accepted: true)
	// B holds the lock, with a higher token: true
	// B reads with its token: 100 (accepted: true)
	// A writes 110 with its token (accepted: false)
	// B writes 120 with its token (accepted: true)
	// the balance is 120
}
