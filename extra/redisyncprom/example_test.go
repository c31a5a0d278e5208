package redisyncprom_test

import (
	"context"
	"fmt"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/extra/redisyncprom"
)

// Register a Collector and give its Observer to the Client; a service
// serves the registry with promhttp.
func ExampleNewCollector() {
	mr, err := miniredis.Run() // an embedded Redis, for the example
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	col := redisyncprom.NewCollector()
	reg := prometheus.NewRegistry() // or prometheus.MustRegister(col)
	reg.MustRegister(col)

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := redisync.New(rdb, redisync.WithObserver(col.Observer()))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	m := c.Mutex("lock:orders:42")
	lctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	if _, err := m.TryLock(context.Background()); err == nil { // another owner
		panic("acquired twice")
	}
	if err := m.Unlock(lctx); err != nil {
		panic(err)
	}

	fams, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil && len(m.GetLabel()) > 0 {
				fmt.Printf("%s{%s} count %d\n", f.GetName(), labels(m.GetLabel()), h.GetSampleCount())
			}
		}
	}
	// Output:
	// redisync_hold_duration_seconds{kind=mutex,outcome=released} count 1
	// redisync_wait_duration_seconds{kind=mutex,outcome=acquired} count 1
	// redisync_wait_duration_seconds{kind=mutex,outcome=not_acquired} count 1
}

func labels(ls []*dto.LabelPair) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s
}
