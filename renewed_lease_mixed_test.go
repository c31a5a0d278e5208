package redisync

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Issue 33 (10): a short WithRenewedLease lock waited behind the other
// locks' renewals. 10,000 holds of a 3 s lease and one of 200 ms in one
// Client: the rounds that renewed the 10,000 (hundreds of milliseconds on
// a busy machine, their pipelines sent one after another) held up the
// short lease's rounds, due every 67 ms, and it was lost (2 runs in 5).
// Each cadence's rounds now go on beside the others'. The test takes
// 3,000 holds of the long lease (their rounds take about 300 ms under the
// race detector on a busy 2-core machine: the short lease was lost 3 runs
// in 3 before); REDISYNC_MIXED_HOLDS sets another number.
func TestShortRenewedLeaseBesideManyLongOnes(t *testing.T) {
	n := 3000
	if s := os.Getenv("REDISYNC_MIXED_HOLDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	e := realEnv(t)
	c := e.client(t, WithWatchdogTimeout(3*time.Second))
	bg := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Int64
	var next atomic.Int64
	long := make([]context.Context, n)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				lctx, err := c.Mutex(fmt.Sprintf("mixed:%d", i)).Lock(bg)
				if err != nil {
					failed.Add(1)
				}
				long[i-1] = lctx
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "locks not taken")
	short, err := c.Mutex("mixed:short", WithRenewedLease(200*time.Millisecond)).Lock(bg)
	require.NoError(t, err)
	start := time.Now()
	select {
	case <-short.Done():
		t.Fatalf("the 200 ms renewed lease was lost %v after it was taken, beside %d holds of a 3 s lease: %v",
			time.Since(start).Round(time.Millisecond), n, context.Cause(short))
	case <-time.After(4 * time.Second): // four rounds of the 3 s lease
	}
	lost := 0
	for _, lctx := range long {
		if lctx.Err() != nil {
			lost++
		}
	}
	require.Zero(t, lost, "holds of the 3 s lease lost: the machine could not carry them, the test shows nothing")
}

// slowBigPipes holds up every pipeline of more than 100 commands by d
// before sending it: a big round of renewals that Redis answers late (a
// busy server, a slow link).
type slowBigPipes struct {
	d    time.Duration
	slow *atomic.Int64 // the pipelines held up
}

func (slowBigPipes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (slowBigPipes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s slowBigPipes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 100 {
			s.slow.Add(1)
			time.Sleep(s.d)
		}
		return next(ctx, cmds)
	}
}

// A round that renews a short lease's hold with those of a longer lease
// (those due within the slack join the shortest's round) sent them all in
// one pipeline when they fit in one: the short lease's renewal was answered
// when the 1,000 others were, and its hold was lost when they took longer
// than its lease allows (here 300 ms of a 200 ms lease; on a busy machine,
// the time 2,000 renewals take). A round of several cadences now renews
// each in pipelines of its own, the shortest lease's first.
func TestShortRenewedLeaseNotInALongLeasesPipeline(t *testing.T) {
	e := realEnv(t)
	rdb := e.rdb(t)
	var slow atomic.Int64
	c := newClient(t, rdb, WithHooks(slowBigPipes{300 * time.Millisecond, &slow}), WithWatchdogTimeout(3*time.Second))
	bg := context.Background()
	const n = 1000
	var wg sync.WaitGroup
	var failed, next atomic.Int64
	long := make([]context.Context, n)
	for range 16 { // pipelines of at most 16 locks: none held up
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= n; i = next.Add(1) {
				lctx, err := c.Mutex(fmt.Sprintf("onepipe:%d", i)).Lock(bg)
				if err != nil {
					failed.Add(1)
				}
				long[i-1] = lctx
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "locks not taken")
	short, err := c.Mutex("onepipe:short", WithRenewedLease(200*time.Millisecond)).Lock(bg)
	require.NoError(t, err)
	start := time.Now()
	select {
	case <-short.Done():
		t.Fatalf("the 200 ms renewed lease was lost %v after it was taken, beside %d holds of a 3 s lease whose pipelines answer in 300 ms: %v",
			time.Since(start).Round(time.Millisecond), n, context.Cause(short))
	case <-time.After(4 * time.Second): // four rounds of the 3 s lease: the short lease's rounds join some
	}
	for _, lctx := range long {
		require.NoError(t, context.Cause(lctx), "a hold of the 3 s lease lost")
	}
	require.Positive(t, slow.Load(), "no pipeline of the 3 s lease's renewals held up")
}
