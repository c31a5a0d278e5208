package matrix

import (
	"context"
	"fmt"
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
		contender: func(c *redisync.Client, name string, i int, opts []redisync.LockOption) contender {
			switch i {
			case 0, 1:
				// Two locks, one resource: both hold it at once.
				m := c.Mutex(fmt.Sprintf("%s:split%d", name, i), opts...)
				return contender{acquire: m.Lock, release: m.Unlock, claims: exclusive(name + ":split")}
			case 2:
				// Takes the lock for good (through a Client that outlives the
				// cell), releases nothing and says it did.
				m := leak.Mutex(name, opts...)
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
				m := c.Mutex(name+":token", opts...)
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
