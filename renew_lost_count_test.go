package redisync

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Issue 43: RenewalEvent.Lost counts the holds a round found gone in Redis
// while they were live, not those released (by their Unlock) while the
// round's pipeline was in flight: 32 goroutines lock and unlock their own
// Mutex as fast as they can under a 300ms watchdog (a round every 100ms,
// each renewing holds that are being released), and nothing is lost, so
// the rounds count no loss. On a machine busy enough for a lease to be
// really lost, each loss a round counts must be one the Observer was told
// (LeaseLost): the rounds never count more. Before, such a run counted
// tens of losses with none told.
func TestRenewalLostCountsOnlyHoldsLost(t *testing.T) {
	e := realEnv(t)
	var rounds, renewed, roundLost, told atomic.Int64
	c := e.client(t, WithWatchdogTimeout(300*time.Millisecond), WithObserver(&Observer{
		Renewed: func(r RenewalEvent) {
			rounds.Add(1)
			renewed.Add(int64(r.Holds))
			roundLost.Add(int64(r.Lost))
		},
		LeaseLost: func(context.Context, HoldEvent) { told.Add(1) },
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var unlockErrs atomic.Int64
	var cycles atomic.Int64
	for i := range 32 {
		m := c.Mutex(fmt.Sprintf("renew-lost-count:%d", i))
		wg.Go(func() {
			for ctx.Err() == nil {
				lctx, err := m.Lock(ctx)
				if err != nil {
					continue
				}
				if err := m.Unlock(lctx); err != nil {
					unlockErrs.Add(1)
				}
				cycles.Add(1)
			}
		})
	}
	// Until 20 rounds have renewed holds (a round renews only the holds
	// due: about one in three has one; 7s on a quiet machine), or 30s.
	deadline := time.Now().Add(30 * time.Second)
	for rounds.Load() < 20 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	t.Logf("%d rounds renewed %d holds (%d lock-unlock cycles); the rounds counted %d lost, the Observer was told %d, %d unlocks failed",
		rounds.Load(), renewed.Load(), cycles.Load(), roundLost.Load(), told.Load(), unlockErrs.Load())
	if rounds.Load() < 5 {
		t.Fatalf("only %d rounds renewed holds: the test says nothing", rounds.Load())
	}
	if roundLost.Load() > told.Load() {
		t.Errorf("the rounds counted %d holds lost; %d were (the Observer's LeaseLost)", roundLost.Load(), told.Load())
	}
}
