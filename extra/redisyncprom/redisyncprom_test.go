package redisyncprom_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncprom"
	"github.com/redisync-go/redisync/internal/redistest"
)

func client(t *testing.T, srv *redistest.Server, opts ...redisync.Option) *redisync.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisync.New(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// gathered is what a registry gathered: each family by name.
type gathered map[string]*dto.MetricFamily

func gather(t *testing.T, reg *prometheus.Registry) gathered {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := gathered{}
	for _, f := range fams {
		g[f.GetName()] = f
	}
	return g
}

// metric returns the metric of family name whose labels are labels (pairs
// of name and value), or nil.
func (g gathered) metric(name string, labels ...string) *dto.Metric {
	f := g[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return m
	}
	return nil
}

// count is a counter's value, a gauge's value or a histogram's sample
// count (0 when the metric is missing).
func (g gathered) count(name string, labels ...string) float64 {
	m := g.metric(name, labels...)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

// sum is a histogram's sum.
func (g gathered) sum(name string, labels ...string) float64 {
	if m := g.metric(name, labels...); m != nil && m.Histogram != nil {
		return m.Histogram.GetSampleSum()
	}
	return 0
}

// The Collector counts waits, holds and their outcomes, lost leases,
// renewal rounds and lost subscription connections of a Client on a real
// redis-server, in a registry gathered by the test; no metric has the
// lock's name as a label.
func TestCollector(t *testing.T) {
	srv := redistest.Start(t)
	col := redisyncprom.NewCollector(redisyncprom.WithConstLabels(prometheus.Labels{"deployment": "test"}))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	c := client(t, srv, redisync.WithObserver(col.Observer()), redisync.WithWatchdogTimeout(300*time.Millisecond))
	other := client(t, srv)
	ctx := context.Background()

	// A hold of 100ms after a wait of 100ms.
	held, err := other.Mutex("prom:lock").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = other.Mutex("prom:lock").Unlock(held) })
	m := c.Mutex("prom:lock")
	lctx, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := gather(t, reg)
	if n := g.count("redisync_holds", "kind", string(redisync.KindMutex), "deployment", "test"); n != 1 {
		t.Errorf("redisync_holds{kind=mutex} = %v while held, want 1", n)
	}
	time.Sleep(250 * time.Millisecond) // rounds every 100ms
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}

	// A TryLock not acquired, and a wait whose deadline passes.
	held, err = other.Mutex("prom:lock").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx); err == nil {
		t.Fatal("TryLock acquired a held Mutex")
	}
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := m.Lock(dctx); err == nil {
		t.Fatal("Lock acquired a held Mutex")
	}

	// A waiter whose subscription connection is killed: lost, restored.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	got := make(chan error, 1)
	go func() {
		h, err := m.Lock(wctx)
		if err == nil {
			err = m.Unlock(h)
		}
		got <- err
	}()
	admin := srv.Client(t)
	waitFor(t, "the waiter subscribed", func() bool {
		n, err := admin.PubSubNumSub(ctx, "redisson_lock__channel:{prom:lock}").Result()
		return err == nil && n["redisson_lock__channel:{prom:lock}"] == 1
	})
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the subscription restored", func() bool {
		return gather(t, reg).count("redisync_subscription_downtime_seconds") == 1
	})
	if err := other.Mutex("prom:lock").Unlock(held); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// A Semaphore hold whose keys are deleted: lost at the next renewal.
	sctx, err := c.Semaphore("prom:sem", redisync.WithPermits(1)).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	<-sctx.Done()
	waitFor(t, "the lost lease counted", func() bool {
		return gather(t, reg).count("redisync_leases_lost_total", "kind", string(redisync.KindSemaphore)) == 1
	})

	g = gather(t, reg)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"redisync_wait_duration_seconds", []string{"kind", string(redisync.KindMutex), "outcome", "acquired"}, 2},
		{"redisync_wait_duration_seconds", []string{"kind", string(redisync.KindMutex), "outcome", "not_acquired"}, 1},
		{"redisync_wait_duration_seconds", []string{"kind", string(redisync.KindMutex), "outcome", "deadline_exceeded"}, 1},
		{"redisync_wait_duration_seconds", []string{"kind", string(redisync.KindSemaphore), "outcome", "acquired"}, 1},
		{"redisync_hold_duration_seconds", []string{"kind", string(redisync.KindMutex), "outcome", "released"}, 2},
		{"redisync_hold_duration_seconds", []string{"kind", string(redisync.KindSemaphore), "outcome", "lost"}, 1},
		{"redisync_holds", []string{"kind", string(redisync.KindMutex)}, 0},
		{"redisync_holds", []string{"kind", string(redisync.KindSemaphore)}, 0},
		{"redisync_leases_lost_total", []string{"kind", string(redisync.KindSemaphore)}, 1},
		{"redisync_subscription_losses_total", nil, 1},
		{"redisync_subscription_downtime_seconds", nil, 1},
	} {
		if got := g.count(tc.name, tc.labels...); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
	}
	if s := g.sum("redisync_wait_duration_seconds", "kind", string(redisync.KindMutex), "outcome", "deadline_exceeded"); s < 0.045 {
		t.Errorf("the wait whose deadline passed took %vs, its deadline was 50ms", s)
	}
	if s := g.sum("redisync_hold_duration_seconds", "kind", string(redisync.KindMutex), "outcome", "released"); s < 0.24 {
		t.Errorf("the holds took %vs in all, the first alone 250ms", s)
	}
	if n := g.count("redisync_renewal_rounds_total"); n < 2 {
		t.Errorf("redisync_renewal_rounds_total = %v after 250ms held with rounds every 100ms", n)
	}
	if n := g.count("redisync_renewal_round_trips_total"); n < g.count("redisync_renewal_rounds_total") {
		t.Errorf("fewer round trips (%v) than rounds", n)
	}
	if n := g.count("redisync_renewal_failures_total", "reason", "lost"); n != 1 {
		t.Errorf("redisync_renewal_failures_total{reason=lost} = %v, want 1 (the Semaphore's)", n)
	}
	for name, f := range g {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "name" || lp.GetValue() == "prom:lock" || lp.GetValue() == "prom:sem" {
					t.Errorf("%s has the lock's name as a label: %v", name, m.GetLabel())
				}
			}
		}
	}
}

// Two Collectors register side by side with their own const labels.
func TestTwoCollectors(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(redisyncprom.NewCollector(redisyncprom.WithConstLabels(prometheus.Labels{"redis": "a"})))
	if err := reg.Register(redisyncprom.NewCollector(redisyncprom.WithConstLabels(prometheus.Labels{"redis": "b"}))); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(redisyncprom.NewCollector(redisyncprom.WithConstLabels(prometheus.Labels{"redis": "b"}))); err == nil {
		t.Fatal("a duplicate Collector was registered")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The histograms' buckets are the options' (copies of them: the caller's
// slices may change afterwards), and the defaults otherwise.
func TestBucketOptions(t *testing.T) {
	mr := miniredis.RunT(t)
	wait, hold, round, down := []float64{.1, 1}, []float64{.2, 2}, []float64{.3, 3}, []float64{.4, 4}
	col := redisyncprom.NewCollector(redisyncprom.WithWaitBuckets(wait), redisyncprom.WithHoldBuckets(hold),
		redisyncprom.WithRoundBuckets(round), redisyncprom.WithDowntimeBuckets(down))
	wait[0], hold[0], round[0], down[0] = 9, 9, 9, 9
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col, redisyncprom.NewCollector(redisyncprom.WithNamespace("defaults")))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := redisync.New(rdb, redisync.WithObserver(col.Observer()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m := c.Mutex("prom:buckets")
	lctx, err := m.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(lctx); err != nil {
		t.Fatal(err)
	}
	g := gather(t, reg)
	for name, want := range map[string][]float64{
		"redisync_wait_duration_seconds":          {.1, 1},
		"redisync_hold_duration_seconds":          {.2, 2},
		"redisync_renewal_round_duration_seconds": {.3, 3},
		"redisync_subscription_downtime_seconds":  {.4, 4},
		"defaults_renewal_round_duration_seconds": {.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		"defaults_subscription_downtime_seconds":  {.01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
	} {
		m := g.metric(name)
		if m == nil {
			t.Errorf("no %s", name)
			continue
		}
		var got []float64
		for _, b := range m.GetHistogram().GetBucket() {
			got = append(got, b.GetUpperBound())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's buckets are %v, want %v", name, got, want)
		}
	}
}
