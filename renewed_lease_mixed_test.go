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
