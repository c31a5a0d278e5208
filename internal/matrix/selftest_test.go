package matrix

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/faultproxy"
)

// broken returns a primitive whose contenders break the promises on
// purpose, each its own way, so that TestMatrixChecksCanFail can show that
// every check of a cell fails when its promise is broken. leak is a Client
// the cell does not close.
func broken(leak *redisync.Client) *primitive {
	return &primitive{
		name: "Broken", fencing: true,
		contender: func(c *redisync.Client, name string, i int, opts []redisync.FencingOption) contender {
			switch i {
			case 0, 1:
				// Two locks, one resource: both hold it at once.
				m := c.Mutex(fmt.Sprintf("%s:split%d", name, i), optsOf[redisync.MutexOption](opts)...)
				return contender{acquire: m.Lock, release: m.Unlock, claims: exclusive(name + ":split")}
			case 2:
				// Takes the lock for good (through a Client that outlives the
				// cell), releases nothing and says it did.
				m := leak.Mutex(name, optsOf[redisync.MutexOption](opts)...)
				var once atomic.Bool
				return contender{
					acquire: func(ctx context.Context) (context.Context, error) {
						if once.Swap(true) {
							<-ctx.Done() // it holds already
							return nil, ctx.Err()
						}
						return m.Lock(context.WithoutCancel(ctx))
					},
					release: func(context.Context) error { return nil },
					claims:  exclusive(name),
				}
			case 3:
				// The same token every time.
				m := c.Mutex(name+":token", optsOf[redisync.MutexOption](opts)...)
				return contender{acquire: m.Lock, release: m.Unlock, claims: exclusive(name + ":token"),
					token: func(context.Context) (int64, bool) { return 7, true }}
			case 4:
				// Waits past its context.
				return contender{
					acquire: func(ctx context.Context) (context.Context, error) {
						d, _ := ctx.Deadline()
						time.Sleep(time.Until(d) + slack + 200*time.Millisecond)
						return nil, ctx.Err()
					},
					claims: exclusive(name + ":deaf"),
				}
			default:
				// Gives up on a transient reply.
				return contender{
					acquire: func(context.Context) (context.Context, error) {
						time.Sleep(50 * time.Millisecond)
						return nil, fmt.Errorf("LOADING Redis is loading the dataset in memory")
					},
					claims: exclusive(name + ":loading"),
				}
			}
		},
		residue: fenceOnly,
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			return notLocked(c.Mutex(name).IsLocked(ctx))
		},
	}
}

// TestMatrixChecksCanFail runs a cell of the broken primitive and checks
// that each of the cell's checks reports its broken promise.
func TestMatrixChecksCanFail(t *testing.T) {
	if testing.Short() {
		t.Skip("the combination matrix is skipped in -short mode")
	}
	t.Parallel()
	fx := startNode(t)
	leak, err := redisync.New(fx.rdb(t, faultproxy.NewHook()), redisync.WithWatchdogTimeout(lease))
	if err != nil {
		t.Fatal(err)
	}
	defer leak.Close()
	var mu sync.Mutex
	var got []string
	runCell(t, fx, cell{"Broken", optFencing, topoSingle, faultFlush}, broken(leak), func(msg string) {
		mu.Lock()
		got = append(got, msg)
		mu.Unlock()
	})
	all := strings.Join(got, "\n")
	for _, want := range []string{
		"exclusion broken on mx:Broken:fencing:single:script-flush:split",
		"the hold's context is live after its release returned",
		"left in Redis right after the run: mx:Broken:fencing:single:script-flush (hash map[",
		"still locked",
		"fencing on mx:Broken:fencing:single:script-flush:token",
		"a wait did not end with its context",
		"returned LOADING",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no violation %q reported; got:\n%s", want, all)
		}
	}
}

// TestMatrixExcusesAreNarrow checks the two exceptions a cell makes for a
// fault that lost Redis's data, so that they cannot hide a broken promise:
// an overlap is excused only near the loss and only with a hold granted
// before it ended. (Tokens get no exception: they survive a loss.)
func TestMatrixExcusesAreNarrow(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var got []string
	r := &cellRun{start: t0, kinds: map[string]int{}, fail: func(msg string) { got = append(got, msg) },
		losses: []window{{start: at(1000), done: at(1200)}}}
	mk := func(began, granted int, token int64) *hold {
		return &hold{who: fmt.Sprint("h", granted), began: at(began), got: at(granted), token: token, tokened: true,
			claims: []claim{{"x", 1, 1}}}
	}
	stale, fresh, fresh2 := mk(0, 900, 0), mk(1100, 1300, 0), mk(1250, 1400, 0)
	for _, tc := range []struct {
		what string
		now  int
		h    *hold
		live []*hold
		want bool
	}{
		{"a hold granted before the loss ended, seen soon after", 1500, fresh, []*hold{stale}, true},
		{"the same seen long after", 1200 + int(restartWindow/time.Millisecond) + 100, fresh, []*hold{stale}, false},
		{"two holds granted after the loss ended", 1500, fresh2, []*hold{fresh}, false},
		{"an overlap before the loss began", 950, stale, []*hold{mk(0, 940, 0)}, false},
	} {
		if c := r.lostCovers(at(tc.now), tc.h, tc.live); c != tc.want {
			t.Errorf("%s: excused %v, want %v", tc.what, c, tc.want)
		}
	}

	// Tokens: 5 then 3 for holds granted one after the other is broken,
	// and so is 7 before the loss then 1 after it: tokens survive a loss.
	r.all = []*hold{mk(0, 100, 5), mk(200, 300, 3), mk(400, 900, 7), mk(1300, 1400, 1)}
	r.checkTokens()
	if len(got) == 0 || !strings.Contains(got[0], "got token 3, not above the 5") {
		t.Errorf("a token that did not grow was not reported: %q", got)
	}
	if !slices.ContainsFunc(got, func(msg string) bool { return strings.Contains(msg, "token 1,") }) {
		t.Errorf("a token that did not grow across the loss was not reported: %q", got)
	}
}
