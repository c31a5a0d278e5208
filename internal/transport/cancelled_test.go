package transport

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// Under contention (the writer yields while calls are in flight: gather),
// callers whose contexts end at once (a deadline, or a cancel) while their
// calls are queued or being written: a call whose Reply says it was not
// sent (ErrNotSent) never ran in Redis.
func TestNotSentNeverRunsUnderGather(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	var mu sync.Mutex
	var notSent []string
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Go(func() {
			for i := range 300 {
				key := "rev:" + strconv.Itoa(g) + ":" + strconv.Itoa(i)
				var ctx context.Context
				var cancel context.CancelFunc
				switch i % 3 {
				case 0:
					ctx, cancel = context.WithTimeout(bg, time.Duration(rand.IntN(300))*time.Microsecond)
				case 1:
					ctx, cancel = context.WithCancel(bg)
					go func() { time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond); cancel() }()
				default:
					ctx, cancel = context.WithTimeout(bg, time.Second)
				}
				r := tr.Do(ctx, Call{Keys: []string{key}, Args: []any{"set", key, "1"}}, nil)
				cancel()
				if err := r.Err(); err != nil && errors.Is(err, ErrNotSent) && !r.Gone {
					mu.Lock()
					notSent = append(notSent, key)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	require.NotEmpty(t, notSent, "some calls left before they were written")
	ran := 0
	for _, k := range notSent {
		if n, err := rdb.Exists(bg, k).Result(); err == nil && n == 1 {
			ran++
			if ran < 5 {
				t.Logf("%s: not sent, yet it ran", k)
			}
		}
	}
	assert.Zero(t, ran, "of %d calls said not sent, %d ran", len(notSent), ran)
}

// A Do whose context was cancelled (no deadline) before it is called, on
// an idle connection (the call alone on it: roundTrip), is never written:
// its caller left before it was written.
func TestCancelledBeforeDoNeverWritten(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	// Warm: a connection is open and idle.
	require.NoError(t, tr.Do(bg, Call{Keys: []string{"rev:warm"}, Args: []any{"set", "rev:warm", "1"}}, nil).Err())
	ran := 0
	const n = 200
	for i := range n {
		key := "rev:cancelled:" + strconv.Itoa(i)
		ctx, cancel := context.WithCancel(bg)
		cancel()
		r := tr.Do(ctx, Call{Keys: []string{key}, Args: []any{"set", key, "1"}}, nil)
		if i == 0 {
			t.Logf("reply: gone=%v err=%v", r.Gone, r.Err())
		}
		if rdb.Exists(bg, key).Val() == 1 {
			ran++
		}
	}
	assert.Zero(t, ran, "of %d calls whose context had ended before Do, %d ran", n, ran)
}

// The same behind other calls (the connection busy: the call is queued,
// and its caller may have the writing role): a call whose context, one
// with a deadline still ahead, was cancelled before Do is never written.
func TestCancelledBeforeDoQueuedNeverWritten(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	tr := newT(t, rdb, Options{})
	bg := context.Background()
	stop := make(chan struct{})
	var load sync.WaitGroup
	for g := range 8 {
		load.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := "rev:load:" + strconv.Itoa(g)
				_ = tr.Do(bg, Call{Keys: []string{k}, Args: []any{"incr", k}}, nil)
			}
		})
	}
	ran := 0
	const n = 400
	for i := range n {
		key := "rev:qcancelled:" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(bg, time.Second)
		cancel()
		_ = tr.Do(ctx, Call{Keys: []string{key}, Args: []any{"set", key, "1"}}, nil)
	}
	close(stop)
	load.Wait()
	for i := range n {
		if rdb.Exists(bg, "rev:qcancelled:"+strconv.Itoa(i)).Val() == 1 {
			ran++
		}
	}
	assert.Zero(t, ran, "of %d calls whose context had ended before Do, %d ran", n, ran)
}
