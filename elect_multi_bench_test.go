package redisync

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// Benchmarks of the Election and the MultiLock against a private real
// redis-server (a Cluster for the MultiLock across slots):
//
//	go test -run '^$' -bench 'Election|MultiLock' -benchtime 3s .

// A MultiLock of n names, taken and released uncontended: one script each
// way on a single node, whatever n.
func BenchmarkMultiLockUncontended(b *testing.B) {
	srv := realServer(b)
	c := newClient(b, newRDB(b, srv))
	for _, n := range []int{1, 2, 8} {
		var names []string
		for i := range n {
			names = append(names, "bench:multi:"+strconv.Itoa(i))
		}
		m := c.MultiLock(names)
		b.Run("names="+strconv.Itoa(n), func(b *testing.B) {
			for b.Loop() {
				hctx, err := m.Lock(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(hctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Campaign and Resign, uncontended; and how long an observer on another
// Client takes to hear of a new leader.
func BenchmarkElection(b *testing.B) {
	srv := realServer(b)
	c := newClient(b, newRDB(b, srv))
	e := c.Election("bench:elect")
	b.Run("campaign+resign", func(b *testing.B) {
		for b.Loop() {
			lctx, err := e.Campaign(context.Background(), "me")
			if err != nil {
				b.Fatal(err)
			}
			if err := e.Resign(lctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("observed", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := newClient(b, newRDB(b, srv)).Election("bench:elect").Observe(ctx)
		<-ch // the state when it started
		var total time.Duration
		for b.Loop() {
			start := time.Now()
			lctx, err := e.Campaign(context.Background(), "me")
			if err != nil {
				b.Fatal(err)
			}
			for l := range ch {
				if l.Term > 0 {
					break
				}
			}
			total += time.Since(start)
			if err := e.Resign(lctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs-to-observer/op")
	})
}
