package transport

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// A burst of callers on a stalled Redis (4,000 at once, each leaving after
// 50ms): at most a window of calls per connection is written, whatever the
// burst; the others leave unsent; a new call leaves with its context; and
// once Redis answers again, what was written is answered and nothing is
// left in flight.
func TestRoomBoundsABurstOnAStall(t *testing.T) {
	srv := redistest.Start(t)
	tr := newT(t, srv.Client(t), Options{})
	bg := context.Background()
	var wg sync.WaitGroup
	for i := range 8 { // both shared connections dialled
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, tr.Do(bg, lockCall("room:warm"+strconv.Itoa(i)), nil).Err())
		}()
	}
	wg.Wait()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heap0 := ms.HeapAlloc
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	const burst = 4000
	var mu sync.Mutex
	counts := map[string]int{}
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			r := tr.Do(ctx, lockCall("room:"+strconv.Itoa(i)), nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Gone:
				counts["gone"]++
			case r.Err() != nil:
				counts["not sent"]++
			default:
				counts["answered"]++
			}
		}()
	}
	wg.Wait()
	t.Logf("a burst of %d on a stalled Redis: %v; in flight %d", burst, counts, tr.load())
	assert.LessOrEqual(t, tr.load(), nodeConns*window, "in flight: at most a window per connection")
	// (A caller may leave while its call is in a write its deadline cuts
	// before any byte of it left: told gone, its give-back then told it
	// was not sent: 64 was once exceeded by 170 in a full run, a write's
	// batch cut at its deadline.)
	assert.LessOrEqual(t, counts["gone"], nodeConns*window+256)
	assert.Positive(t, counts["not sent"])
	runtime.GC()
	runtime.ReadMemStats(&ms)
	t.Logf("heap: %d KiB more", (int64(ms.HeapAlloc)-int64(heap0))>>10)
	assert.Less(t, int64(ms.HeapAlloc)-int64(heap0), int64(16<<20))

	lag := watchLag(t)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	start := time.Now()
	r := tr.Do(ctx, lockCall("room:new"), nil)
	took := time.Since(start)
	cancel()
	require.Error(t, r.Err())
	assert.Less(t, took, 300*time.Millisecond+lag.Slack(), "a new call leaves with its context (the machine's worst delay: %v)", lag.Worst())

	srv.Resume()
	resumed = true
	waitFor(t, 10*time.Second, "nothing in flight", func() bool { return tr.load() == 0 })
	locked(t, tr.Do(bg, lockCall("room:after"), nil))
}
