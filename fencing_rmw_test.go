package redisync_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/redistest"
)

// Issue 33 (9): the README's fencing pattern, which fenced only the write,
// lost updates in a read-modify-write. A deterministic interleaving on a
// real server: holder A reads the balance; A's hold ends (forced here; a
// lease that ran out while A stalled does the same); B takes the lock and
// reads the same balance; A writes its deposit, then B writes its own.
// With the write alone fenced, A's write comes before any of B's and is
// accepted, and B's, from the same read, overwrites it: both were
// accepted, one deposit is lost. With the read fenced too (the token
// checked and recorded on every access, guardedRead and guardedWrite of
// ExampleWithFencing), B's read records its token, A's write is refused
// (A learns its deposit did not happen), and no accepted write is lost.
func TestFencedReadModifyWrite(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	for _, readFenced := range []bool{false, true} {
		key := "account:" + strconv.FormatBool(readFenced)
		require.NoError(t, rdb.HSet(ctx, key, "value", 100, "token", 0).Err())
		procA, err := redisync.New(rdb)
		require.NoError(t, err)
		defer procA.Close()
		procB, err := redisync.New(rdb)
		require.NoError(t, err)
		defer procB.Close()
		read := func(token int64) int64 {
			if !readFenced {
				v, err := rdb.HGet(ctx, key, "value").Int64()
				require.NoError(t, err)
				return v
			}
			v, ok, err := fencedRead(ctx, rdb, key, token)
			require.NoError(t, err)
			require.True(t, ok, "a fenced read refused")
			return v
		}
		write := func(token, v int64) bool {
			ok, err := fencedWrite(ctx, rdb, key, token, v)
			require.NoError(t, err)
			return ok
		}

		a := procA.Mutex("lock:"+key, redisync.WithFencing())
		actx, err := a.Lock(ctx)
		require.NoError(t, err)
		tokenA, _ := a.Token(actx)
		balanceA := read(tokenA)

		b := procB.Mutex("lock:"+key, redisync.WithFencing())
		forced, err := b.ForceUnlock(ctx) // A's hold ends while A is between its read and its write
		require.NoError(t, err)
		require.True(t, forced)
		bctx, err := b.Lock(ctx)
		require.NoError(t, err)
		tokenB, _ := b.Token(bctx)
		require.Greater(t, tokenB, tokenA)
		balanceB := read(tokenB)

		okA := write(tokenA, balanceA+10)
		okB := write(tokenB, balanceB+20)
		require.NoError(t, b.Unlock(bctx))
		final, err := rdb.HGet(ctx, key, "value").Int64()
		require.NoError(t, err)
		accepted := int64(100)
		if okA {
			accepted += 10
		}
		if okB {
			accepted += 20
		}
		if !readFenced {
			// The old pattern: both writes accepted, A's deposit lost.
			assert.True(t, okA && okB, "the write-only pattern accepted A: %v, B: %v", okA, okB)
			assert.Equal(t, int64(120), final)
			assert.NotEqual(t, accepted, final, "the write-only pattern lost no update")
			continue
		}
		assert.False(t, okA, "the stale holder's write was accepted after its successor's fenced read")
		assert.True(t, okB, "the holder's write was refused")
		assert.Equal(t, accepted, final, "an accepted write was lost with the read fenced")
	}
}
