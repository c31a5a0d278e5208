package redisync

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeCounter counts the batches a Client sends each cluster node, by the
// master of their first key (a batch goes to one node): a hook for
// WithHooks.
type pipeCounter struct {
	cc    *redis.ClusterClient
	mu    sync.Mutex
	pipes map[string]int // by node address
	cmds  map[string]int
}

func (p *pipeCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		addr := "?"
		if a := cmds[0].Args(); len(a) > 3 {
			if key, ok := a[3].(string); ok {
				if n, err := p.cc.MasterForKey(ctx, key); err == nil {
					addr = n.Options().Addr
				}
			}
		}
		p.mu.Lock()
		p.pipes[addr]++
		p.cmds[addr] += len(cmds)
		p.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (p *pipeCounter) take() (pipes, cmds map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pipes, cmds = p.pipes, p.cmds
	p.pipes, p.cmds = map[string]int{}, map[string]int{}
	return pipes, cmds
}

// TestClusterRenewalPipelinesPerNode: renewing 10,000 held locks spread
// over a 3-master cluster costs each node at most 5 pipelines per tick
// (batches of 2,000 renewals, each split by node): a few round trips per
// node, not one per lock. The rounds it waits for take as long as the
// machine makes them (10,000 renewals under the race detector beside busy
// loops: seconds): its waits are bounded by what the rounds took, not by a
// fixed time, and a hold lost (the machine could not carry them) is said
// as such.
func TestClusterRenewalPipelinesPerNode(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 locks")
	}
	cl := sharedCluster(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 64})
	t.Cleanup(func() { _ = cc.Close() })
	pc := &pipeCounter{cc: cc, pipes: map[string]int{}, cmds: map[string]int{}}
	var rounds atomic.Int64
	var holdsSeen, lost, slowest atomic.Int64
	// Renewed every 2s. With a 3s lease (renewed every 1s) 13 holds were
	// lost beside busy loops and other test jobs when rounds took up to
	// 1.9s: a hold granted as a round began waits for the next round,
	// and its renewal can be in that round's last batch, past the
	// lease's 2.7s deadline. The pipelines per round do not depend on it.
	const lease = 6 * time.Second
	c := newClient(t, cc, WithHooks(pc), WithWatchdogTimeout(lease), WithObserver(&Observer{Renewed: func(r RenewalEvent) {
		rounds.Add(1)
		holdsSeen.Store(int64(r.Holds))
		lost.Add(int64(r.Lost))
		if int64(r.Took) > slowest.Load() {
			slowest.Store(int64(r.Took))
		}
	}}))
	// untilRounds waits for cond, checked as rounds report: at most two
	// cadences and two of the slowest rounds seen so far (a round under
	// way when the wait starts ends, the next one starts a third of the
	// lease after it began, or at once when it took longer, and reports
	// when its holds have answered).
	untilRounds := func(what string, cond func() bool) {
		t.Helper()
		start := time.Now()
		for !cond() {
			if n := lost.Load(); n > 0 {
				t.Fatalf("%d holds lost waiting for %s: the machine could not carry them (slowest round %v), the test shows nothing",
					n, what, time.Duration(slowest.Load()).Round(time.Millisecond))
			}
			bound := 2*lease + 2*time.Duration(slowest.Load())
			if waited := time.Since(start); waited > bound {
				t.Fatalf("timed out after %v waiting for %s (bound: two cadences and two of the slowest round, %v)",
					waited.Round(time.Millisecond), what, time.Duration(slowest.Load()).Round(time.Millisecond))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	const n = 10000
	bg := context.Background()
	var wg sync.WaitGroup
	var failed atomic.Int64
	next := atomic.Int64{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n {
					return
				}
				if _, err := c.Mutex("renew:" + strconv.Itoa(int(i))).Lock(bg); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.Zero(t, failed.Load())

	// Count over whole rounds that renewed all 10,000.
	untilRounds("a round of all holds", func() bool { return holdsSeen.Load() == n })
	t.Logf("slowest round so far: %v", time.Duration(slowest.Load()).Round(time.Millisecond))
	r0 := rounds.Load()
	pc.take()
	untilRounds("two more rounds", func() bool { return rounds.Load() >= r0+2 })
	time.Sleep(500 * time.Millisecond) // let the second round's pipelines finish counting
	ticks := rounds.Load() - r0
	pipes, cmds := pc.take()
	require.Len(t, pipes, 3, "every master renews its share")
	total := 0
	for _, c := range cmds {
		total += c
	}
	assert.GreaterOrEqual(t, total, n*int(ticks), "every hold renewed every tick")
	// The ticks counted are whole rounds; on a loaded machine the next one
	// may start (rounds run back to back when one takes longer than the
	// cadence) before the count is taken: count a node's pipelines per
	// round's worth of renewals the window saw, allowing one partial batch.
	worth := float64(total) / n
	for addr, p := range pipes {
		perTick := float64(p) / worth
		t.Logf("%s: %d pipelines, %d commands over %d ticks, %.2f rounds' worth (%.1f pipelines per round)", addr, p, cmds[addr], ticks, worth, perTick)
		assert.LessOrEqual(t, perTick, 5.0+1.0/worth, "%s: pipelines per tick", addr)
	}
}
