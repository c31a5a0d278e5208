package redisyncprom_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncprom"
	"github.com/redisync-go/redisync/internal/redistest"
)

// Issue 43: a release that finds its hold lost in Redis (a restart without
// persistence, a forced unlock, a deleted key) returns ErrLeaseLost, and
// the Collector counts it as a lost lease (redisync_leases_lost_total, a
// hold of outcome lost), not as released: on a Mutex, a FairMutex, both
// sides of an RWMutex, a Semaphore and a MultiLock. The watchdog's lease
// (30s) is renewed every 10s: no renewal finds the loss first.
func TestCollectorCountsLossFoundByRelease(t *testing.T) {
	srv := redistest.Start(t)
	col := redisyncprom.NewCollector()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	c := client(t, srv, redisync.WithObserver(col.Observer()))
	admin := srv.Client(t)
	ctx := context.Background()
	rw := c.RWMutex("prom:rw")
	sem := c.Semaphore("prom:sem", redisync.WithPermits(2))
	ml := c.MultiLock([]string{"prom:ml:a", "prom:ml:b"})
	for _, tc := range []struct {
		kind    redisync.Kind
		acquire func(context.Context) (context.Context, error)
		release func(context.Context) error
	}{
		{redisync.KindMutex, c.Mutex("prom:m").Lock, c.Mutex("prom:m").Unlock},
		{redisync.KindFairMutex, c.FairMutex("prom:f").Lock, c.FairMutex("prom:f").Unlock},
		{redisync.KindRWWrite, rw.Lock, rw.Unlock},
		{redisync.KindRWRead, rw.RLock, rw.RUnlock},
		{redisync.KindSemaphore,
			func(ctx context.Context) (context.Context, error) { return sem.Acquire(ctx, 1) },
			func(ctx context.Context) error { return sem.Release(ctx, 1) }},
		{redisync.KindMultiLock, ml.Lock, ml.Unlock},
	} {
		kind := string(tc.kind)
		hctx, err := tc.acquire(ctx)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := admin.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := tc.release(hctx); !errors.Is(err, redisync.ErrLeaseLost) {
			t.Fatalf("%s: the release of a hold Redis lost returned %v, want ErrLeaseLost", kind, err)
		}
		g := gather(t, reg)
		for _, m := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"redisync_leases_lost_total", []string{"kind", kind}, 1},
			{"redisync_hold_duration_seconds", []string{"kind", kind, "outcome", string(redisync.OutcomeLost)}, 1},
			{"redisync_hold_duration_seconds", []string{"kind", kind, "outcome", string(redisync.OutcomeReleased)}, 0},
			{"redisync_holds", []string{"kind", kind}, 0},
		} {
			if got := g.count(m.name, m.labels...); got != m.want {
				t.Errorf("%s: after a release that returned ErrLeaseLost, %s%v = %v, want %v", kind, m.name, m.labels, got, m.want)
			}
		}
	}
}
