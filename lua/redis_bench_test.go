package lua

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/redistest"
)

// BenchmarkRedisPair measures what an uncontended Lock+Unlock pair costs
// Redis itself (issue 45): the lock and unlock scripts with the arguments
// a Mutex's first hold and its last release send, in pipelines of
// pairBatch pairs on one connection (full pipelining: Redis never waits
// for the client), next to the floor a lock of plain strings costs (SET NX
// PX and a compare-and-delete script). It reports Redis's CPU per pair
// (INFO cpu: used_cpu_user + used_cpu_sys, the whole server's), the
// commands Redis ran per pair (INFO commandstats: the EVALSHAs and the
// commands their scripts call), and what each half of the pair costs as
// commandstats counts it (usec_per_call: a script's EVALSHA, the commands
// it calls included), measured apart, on pairBatch keys at a time:
//
//	go test -run '^$' -bench RedisPair -count 3 ./lua/
func BenchmarkRedisPair(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	bg := context.Background()
	b.Run("redisync", func(b *testing.B) {
		const field = "6f0e6b1c-0d7e-4c0e-9a0b-1b2c3d4e5f60:57"
		lock, unlock := Lock.Script, Unlock.Script
		benchRedisPair(b, rdb, []*redis.Script{lock, unlock},
			func(p redis.Pipeliner, key string) { lock.EvalSha(bg, p, []string{key}, 30000, field, 0) },
			func(p redis.Pipeliner, key string) {
				unlock.EvalSha(bg, p, []string{key}, field, 1, 30000, "publish", "0", "redisson_lock__channel:{"+key+"}", "")
			})
	})
	b.Run("setnx", func(b *testing.B) {
		const token = "6f0e6b1c-0d7e-4c0e-9a0b-1b2c3d4e5f60"
		cad := redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)
		benchRedisPair(b, rdb, []*redis.Script{cad},
			func(p redis.Pipeliner, key string) { p.SetNX(bg, key, token, 30*time.Second) },
			func(p redis.Pipeliner, key string) { cad.EvalSha(bg, p, []string{key}, token) })
	})
}

// pairBatch is how many calls one pipeline carries.
const pairBatch = 500

// benchRedisPair runs b.N pairs of a lock and an unlock of one key in
// pipelines of pairBatch pairs, and reports what they cost Redis (see
// BenchmarkRedisPair); then, apart, pairBatch locks of as many keys and
// their unlocks, for the cost of each half.
func benchRedisPair(b *testing.B, rdb *redis.Client, scripts []*redis.Script, lock, unlock func(p redis.Pipeliner, key string)) {
	ctx := context.Background()
	for _, s := range scripts {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	p := rdb.Pipeline()
	exec := func() {
		cmds, err := p.Exec(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				b.Fatal(c, err)
			}
		}
	}
	const key = "bench:redis-pair"
	pairs := func(n int) {
		for n > 0 {
			k := min(n, pairBatch)
			for range k {
				lock(p, key)
				unlock(p, key)
			}
			exec()
			n -= k
		}
	}
	pairs(pairBatch) // warm: the scripts compiled, the buffers grown
	before := redisStats(b, rdb)
	b.ResetTimer()
	pairs(b.N)
	b.StopTimer()
	after := redisStats(b, rdb)
	n := float64(b.N)
	b.ReportMetric((after.cpu-before.cpu)/n, "redis-µs/pair")
	b.ReportMetric(float64(after.calls-before.calls)/n, "cmds/pair")

	// Each half alone: its commands' usec, as commandstats counts them.
	half := func(name string, f func(p redis.Pipeliner, key string)) {
		before := redisStats(b, rdb)
		for i := range pairBatch {
			f(p, "bench:redis-half:"+strconv.Itoa(i))
		}
		exec()
		after := redisStats(b, rdb)
		b.ReportMetric(after.usec(before)/pairBatch, name+"-µs/call")
	}
	half("lock", lock)
	half("unlock", unlock)
}

// redisStat is what INFO reports of a Redis server's work.
type redisStat struct {
	cpu   float64 // used_cpu_user + used_cpu_sys, in µs
	calls int64   // every command's calls but INFO's
	cmd   map[string]cmdStat
}

type cmdStat struct {
	calls int64
	usec  float64
}

// usec returns the usec of the commands run since before, INFO's but
// those a script calls (its EVAL or EVALSHA counts them): what the
// client's own commands cost.
func (s redisStat) usec(before redisStat) float64 {
	total := 0.0
	for name, c := range s.cmd {
		switch name {
		case "evalsha", "eval", "set", "get", "del":
			total += c.usec - before.cmd[name].usec
		}
	}
	return total
}

var (
	cpuLine = regexp.MustCompile(`(?m)^used_cpu_(user|sys):([0-9.]+)`)
	cmdLine = regexp.MustCompile(`(?m)^cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)`)
)

// redisStats reads INFO cpu and commandstats.
func redisStats(b *testing.B, rdb *redis.Client) redisStat {
	txt, err := rdb.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	s := redisStat{cmd: map[string]cmdStat{}}
	for _, m := range cpuLine.FindAllStringSubmatch(txt, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		s.cpu += v * 1e6
	}
	for _, m := range cmdLine.FindAllStringSubmatch(txt, -1) {
		calls, _ := strconv.ParseInt(m[2], 10, 64)
		usec, _ := strconv.ParseFloat(m[3], 64)
		s.cmd[m[1]] = cmdStat{calls, usec}
		if m[1] != "info" {
			s.calls += calls
		}
	}
	if len(s.cmd) == 0 {
		b.Fatal(fmt.Errorf("no commandstats in %q", txt))
	}
	return s
}
