package redisync

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Benchmarks run against a private real redis-server:
//
//	go test -run '^$' -bench Mutex -benchtime 3s .

func BenchmarkMutexUncontended(b *testing.B) {
	srv := realServer(b)
	c := newClient(b, newRDB(b, srv))
	m := c.Mutex("bench:uncontended")
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"ctx=background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"ctx=timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Minute)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := tc.ctx()
				hctx, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := m.Unlock(hctx); err != nil {
					b.Fatal(err)
				}
				cancel()
			}
		})
	}
}

func BenchmarkMutexContended(b *testing.B) {
	for _, goroutines := range []int{8, 64} {
		b.Run(fmt.Sprintf("goroutines=%d/clients=4", goroutines), func(b *testing.B) {
			srv := realServer(b)
			clients := make([]*Client, 4)
			var scripts atomic.Int64
			for i := range clients {
				rdb := newRDB(b, srv)
				gate(rdb, countHook{n: &scripts})
				clients[i] = newClient(b, rdb)
			}
			cpu0 := redisCPU(b, srv)
			var next atomic.Int64
			var handoffs atomic.Int64
			var last atomic.Int64 // id of the goroutine that held last
			counter := 0
			perG := make([]int, goroutines) // acquisitions per goroutine
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					m := clients[g%len(clients)].Mutex("bench:contended")
					for next.Add(1) <= int64(b.N) {
						ctx, err := m.Lock(context.Background())
						if err != nil {
							b.Error(err)
							return
						}
						counter++
						perG[g]++
						if last.Swap(int64(g)) != int64(g) {
							handoffs.Add(1)
						}
						if err := m.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				}(g)
			}
			wg.Wait()
			elapsed := time.Since(start)
			if counter != b.N {
				b.Fatalf("mutual exclusion broken: counter %d, acquisitions %d", counter, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
			b.ReportMetric(float64(handoffs.Load())/elapsed.Seconds(), "handoffs/s")
			b.ReportMetric(float64(scripts.Load())/float64(b.N), "scripts/acq")
			b.ReportMetric(jainIndex(perG), "jain")
			b.ReportMetric(float64((redisCPU(b, srv)-cpu0).Microseconds())/float64(max(handoffs.Load(), 1)), "redis-cpu-µs/handoff")
		})
	}
}

// BenchmarkMutexHandoff measures the time from an Unlock returning to the
// waiting goroutine (another client) holding the lock.
func BenchmarkMutexHandoff(b *testing.B) {
	srv := realServer(b)
	holder := newClient(b, newRDB(b, srv)).Mutex("bench:handoff")
	waiter := newClient(b, newRDB(b, srv)).Mutex("bench:handoff")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		hctx, err := holder.Lock(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		waiting, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			close(waiting)
			ctx, err := waiter.Lock(context.Background())
			got <- time.Now()
			if err == nil {
				waiter.Unlock(ctx)
			}
		}()
		<-waiting
		time.Sleep(2 * time.Millisecond) // let it subscribe and wait
		if err := holder.Unlock(hctx); err != nil {
			b.Fatal(err)
		}
		released := time.Now()
		lat = append(lat, (<-got).Sub(released))
		<-done
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

func realServer(b *testing.B) string {
	b.Helper()
	return redistestStart(b)
}

// redisCPU returns the CPU time (user + sys) the server has used so far.
func redisCPU(b *testing.B, addr string) time.Duration {
	rdb := newRDB(b, addr)
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// The hold's context looks at the hold's local deadline on every Err, Done
// and Value (issue 19): what that costs, next to a plain cancelCtx's Err.
//
//	go test -run '^$' -bench HoldContext .
func BenchmarkHoldContext(b *testing.B) {
	mr := miniredis.RunT(b)
	c := newClient(b, newRDB(b, mr.Addr()))
	hctx, err := c.Mutex("bench:holdctx").Lock(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	plain, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("Err", func(b *testing.B) {
		for b.Loop() {
			if hctx.Err() != nil {
				b.Fatal("lost")
			}
		}
	})
	b.Run("Done", func(b *testing.B) {
		for b.Loop() {
			_ = hctx.Done()
		}
	})
	b.Run("plain cancelCtx Err", func(b *testing.B) {
		for b.Loop() {
			if plain.Err() != nil {
				b.Fatal("cancelled")
			}
		}
	})
}
