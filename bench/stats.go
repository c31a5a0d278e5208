package main

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// redisStats is what Redis itself reports: commands executed (INFO
// commandstats, which also counts the commands a script runs inside) and its
// CPU time (INFO cpu, sys + user, all threads).
type redisStats struct {
	calls map[string]int64
	cpu   time.Duration
}

func (a redisStats) sub(b redisStats) redisStats {
	d := redisStats{calls: map[string]int64{}, cpu: a.cpu - b.cpu}
	for k, v := range a.calls {
		if n := v - b.calls[k]; n != 0 {
			d.calls[k] = n
		}
	}
	return d
}

func (a *redisStats) add(b redisStats) {
	if a.calls == nil {
		a.calls = map[string]int64{}
	}
	for k, v := range b.calls {
		a.calls[k] += v
	}
	a.cpu += b.cpu
}

// commands is the number of commands Redis executed, not counting the INFO
// calls of the harness itself.
func (a redisStats) commands() int64 {
	var n int64
	for k, v := range a.calls {
		if k == "info" {
			continue
		}
		n += v
	}
	return n
}

func readRedisStats(ctx context.Context, admin *redis.Client) (redisStats, error) {
	txt, err := admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return redisStats{}, err
	}
	s := redisStats{calls: map[string]int64{}}
	var sys, user float64
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "cmdstat_"):
			name, rest, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			for _, kv := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(kv, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					s.calls[name] = n
				}
			}
		case strings.HasPrefix(line, "used_cpu_sys:"):
			sys, _ = strconv.ParseFloat(strings.TrimPrefix(line, "used_cpu_sys:"), 64)
		case strings.HasPrefix(line, "used_cpu_user:"):
			user, _ = strconv.ParseFloat(strings.TrimPrefix(line, "used_cpu_user:"), 64)
		}
	}
	s.cpu = time.Duration((sys + user) * float64(time.Second))
	return s, nil
}

// counter counts the requests a client sends: one per command and one per
// pipeline (a pipeline is written at once and its replies read at once: one
// round trip), plus the commands inside pipelines.
type counter struct {
	reqs, cmds, pipes atomic.Int64
	onPipe            func(n int, start, end time.Time) // optional, for the watchdog test
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.reqs.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.reqs.Add(1)
		c.pipes.Add(1)
		c.cmds.Add(int64(len(cmds)))
		start := time.Now()
		err := next(ctx, cmds)
		if f := c.onPipe; f != nil {
			f(len(cmds), start, time.Now())
		}
		return err
	}
}

// rueCounter wraps a rueidis client to count the commands it is asked to send
// (rueidis pipelines concurrent requests on one connection by itself, so a
// request is not always a round trip of its own).
type rueCounter struct {
	rueidis.Client
	c *counter
}

func (r *rueCounter) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r.c.reqs.Add(1)
	r.c.cmds.Add(1)
	return r.Client.Do(ctx, cmd)
}

func (r *rueCounter) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	r.c.reqs.Add(1)
	r.c.cmds.Add(int64(len(multi)))
	return r.Client.DoMulti(ctx, multi...)
}

func (r *rueCounter) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	r.c.reqs.Add(1)
	r.c.cmds.Add(1)
	return r.Client.DoCache(ctx, cmd, ttl)
}

// durations holds latency samples.
type durations []time.Duration

func (d durations) sorted() durations {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// pct returns the p-th percentile (0..100) of sorted samples (nearest rank).
func (d durations) pct(p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(d)))) - 1
	i = max(0, min(i, len(d)-1))
	return d[i]
}

// jain is Jain's fairness index of xs: 1 when all equal, 1/n when one takes all.
func jain(xs []int64) float64 {
	var s, s2 float64
	for _, x := range xs {
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	if s2 == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * s2)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < 0:
		return "-" + fmtDur(-d)
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64) + " µs"
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 2, 64) + " ms"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
	}
}

func fmtRate(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	default:
		return strconv.FormatFloat(r, 'f', 2, 64)
	}
}

func fmtF(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }

func goVersion() string { return runtime.Version() }
func goMaxProcs() int   { return runtime.GOMAXPROCS(0) }
