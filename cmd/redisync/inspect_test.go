package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/redistest"
)

// TestInspectPrimitives builds real state with the library on a real
// redis-server and checks what inspect says of each name.
func TestInspectPrimitives(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	c1, c2 := newClient(t, srv), newClient(t, srv)
	id1, id2 := c1.ID(), c2.ID()

	// Waiters block until their context ends: end them before the clients
	// close (cleanups run last in, first out).
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wait := func(lock func(context.Context) (context.Context, error)) {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = lock(wctx) }()
	}
	registered := func(name, token string, n int64) {
		t.Helper()
		key := keys.Companion(name, token)
		for deadline := time.Now().Add(5 * time.Second); rdb.ZCard(ctx, key).Val() != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never had %d entries", key, n)
			}
		}
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// A Mutex held twice by one owner.
	m := c1.Mutex("orders:42")
	h, err := m.Lock(ctx)
	must(nil, err)
	must(m.Lock(h))

	// A FairMutex held, with a waiter of another client queued.
	f := c1.FairMutex("jobs")
	must(f.Lock(ctx))
	wait(c2.FairMutex("jobs").Lock)
	registered("jobs", "fair-queue", 1)

	// An RWMutex read by two owners, a writer waiting, and a reader
	// waiting behind the writer.
	must(c1.RWMutex("cfg").RLock(ctx))
	must(c2.RWMutex("cfg").RLock(ctx))
	wait(c2.RWMutex("cfg").Lock)
	registered("cfg", "rw-writers", 1)
	wait(c1.RWMutex("cfg").RLock)
	registered("cfg", "rw-waiting", 1)

	// An RWMutex write-held twice.
	w := c2.RWMutex("cfgw")
	h, err = w.Lock(ctx)
	must(nil, err)
	must(w.Lock(h))

	// A semaphore of 3 with one permit held; one never set; one whose main
	// key was deleted while a permit was held.
	pool := c1.Semaphore("pool")
	must(nil, pool.SetPermits(ctx, 3))
	must(pool.Acquire(ctx, 1))
	never := c2.Semaphore("never")
	if _, err := never.TryAcquire(ctx, 1); err == nil {
		t.Fatal("acquired a permit of a semaphore never set")
	}
	orphan := c2.Semaphore("orphan")
	must(nil, orphan.SetPermits(ctx, 5))
	must(orphan.Acquire(ctx, 2))
	must(nil, rdb.Del(ctx, "orphan").Err())

	// A fenced Mutex taken twice (held now, its second token); a fenced RWMutex
	// write-locked once and freed (only its counter is left).
	must(c1.Mutex("fenced", redisync.WithFencing()).Lock(ctx))
	must(c2.Mutex("fenced", redisync.WithFencing()).ForceUnlock(ctx))
	must(c2.Mutex("fenced", redisync.WithFencing()).Lock(ctx))
	fw := c1.RWMutex("fencedfree", redisync.WithFencing())
	h, err = fw.Lock(ctx)
	must(nil, err)
	must(nil, fw.Unlock(h))

	// An election led by c1, and one that nobody leads any more.
	must(c1.Election("leader").Campaign(ctx, "10.0.0.1:80"))
	lh, err := c2.Election("led").Campaign(ctx, "x")
	must(nil, err)
	must(nil, c2.Election("led").Resign(lh))

	// A latch counting down from 3, counted down once.
	latch := c1.CountDownLatch("start")
	must(latch.TrySetCount(ctx, 3))
	must(nil, latch.CountDown(ctx))
	// A latch whose count was deleted by hand: its round key is left.
	must(c1.CountDownLatch("leftround").TrySetCount(ctx, 1))
	rdb.Del(ctx, "leftround")

	// Leftovers written by hand, with a deadline in the past: a FairMutex
	// queue without its lock, and a read hold that expired.
	now, err := rdb.Time(ctx).Result()
	must(nil, err)
	past := float64(now.Add(-2 * time.Second).UnixMilli())
	ghost := "00000000-0000-4000-8000-000000000001:7"
	rdb.ZAdd(ctx, keys.Companion("stale", "fair-queue"), redis.Z{Score: 1, Member: ghost})
	rdb.ZAdd(ctx, keys.Companion("stale", "fair-timeouts"), redis.Z{Score: past, Member: ghost})
	rdb.HSet(ctx, "expired", "mode", "read", "r:"+ghost, 1)
	rdb.ZAdd(ctx, keys.Companion("expired", "rw-readers"), redis.Z{Score: past, Member: ghost})

	// Keys that are not redisync's.
	rdb.Set(ctx, "str", "hello", 0)
	rdb.RPush(ctx, "lst", "a")
	rdb.HSet(ctx, "h", "field", "v")
	rdb.Set(ctx, keys.Companion("weird", "fair-queue"), "x", 0)

	names := []string{"orders:42", "jobs", "cfg", "cfgw", "pool", "never", "orphan", "start",
		"stale", "expired", "str", "lst", "h", "weird", "gone", "fenced", "fencedfree", "leader", "led", "leftround"}
	var out bytes.Buffer
	if err := run(ctx, []string{"inspect", "-redis", srv.Addr()}, &out); err == nil {
		t.Error("inspect without names: want an error")
	}
	if err := run(ctx, append([]string{"inspect", "-redis", srv.Addr()}, names...), &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	blocks := split(t, out.String(), names)

	lease := `lease \d+\.\ds left`
	owner := func(id string) string { return regexp.QuoteMeta(id) + `:\d+` }
	parts := func(id string) string { return `\(client ` + regexp.QuoteMeta(id) + `, owner \d+\)` }
	for name, want := range map[string][]string{
		"orders:42": {`^orders:42: lock \(Mutex or FairMutex\), held, ` + lease + `\n`,
			`\n  holder ` + owner(id1) + `  holds 2  ` + parts(id1) + `\n`},
		"jobs": {`^jobs: fair lock, held, ` + lease + `; 1 waiting\n`,
			`\n  holder ` + owner(id1) + `  holds 1  ` + parts(id1) + `\n`,
			`\n  waiter 1: ` + owner(id2) + `  deadline in \d+\.\ds  ` + parts(id2) + `\n`},
		"cfg": {`^cfg: rw lock, read-locked by 2 readers; 1 writer waiting; 1 reader waiting\n`,
			`\n  reader ` + owner(id1) + `  holds 1, ` + lease + `  ` + parts(id1) + `\n`,
			`\n  reader ` + owner(id2) + `  holds 1, ` + lease,
			`\n  writer waiting ` + owner(id2) + `  deadline in \d+\.\ds`,
			`\n  reader waiting ` + owner(id1) + `  deadline in \d+\.\ds`},
		"cfgw":      {`^cfgw: rw lock, write-locked, ` + lease + `\n  writer ` + owner(id2) + `  holds 2  ` + parts(id2) + `\n$`},
		"pool":      {`^pool: semaphore, 2 of 3 permits available \(1 held\)\n  holder ` + owner(id1) + `  holds 1, ` + lease + `  ` + parts(id1) + `\n$`},
		"never":     {`^never: free \(no keys\)\n$`},
		"orphan":    {`^orphan: semaphore, permits not set \(2 held\)\n  holder ` + owner(id2) + `  holds 2, ` + lease},
		"start":     {`^start: latch, counting, 2 left\n  round \{start\}:latch-round:start: ` + owner(id1) + `\n$`},
		"leftround": {`^leftround: latch, open \(its round key was left behind\)\n  round \{leftround\}:latch-round:leftround: ` + owner(id1) + `\n$`},
		"stale": {`^stale: fair lock, free; 0 waiting \(and 1 expired\)\n`,
			`\n  waiter 1: ` + regexp.QuoteMeta(ghost) + `  deadline passed \d+\.\ds ago \(expired, not live\)`},
		"expired": {`^expired: rw lock, free \(its read holds expired, not yet purged\)\n`,
			`\n  reader ` + regexp.QuoteMeta(ghost) + `  holds 1, lease ended \d+\.\ds ago \(expired, not live\)`},
		"str":   {`^str: a string, not a redisync primitive\n$`},
		"lst":   {`^lst: a list, not a redisync primitive\n$`},
		"h":     {`^h: a hash, not a redisync primitive\n$`},
		"weird": {`^weird: free \(no redisync keys\)\n  \{weird\}:fair-queue:weird: a string, not a redisync key\n$`},
		"gone":  {`^gone: free \(no keys\)\n$`},
		"fenced": {`^fenced: lock \(Mutex or FairMutex\), held, ` + lease + `\n  holder ` + owner(id2) + `  holds 1  ` + parts(id2) + `\n`,
			`\n  fencing counter \{fenced\}:fence:fenced: \d{16,} \(the last token given\)\n$`},
		"fencedfree": {`^fencedfree: free \(a fenced lock: its fencing counter stays\)\n  fencing counter \{fencedfree\}:fence:fencedfree: \d{16,} \(the last token given\)\n$`},
		"leader": {`^leader: election, led by "10.0.0.1:80" \(term \d{16,}\), ` + lease + `\n  leader ` + owner(id1) + `  value "10.0.0.1:80", term \d{16,}  ` + parts(id1) + `\n`,
			`\n  term counter \{leader\}:elect-term:leader: \d{16,} \(the last term given\)\n$`},
		"led": {`^led: election, nobody leads \(its term counter stays\)\n  term counter \{led\}:elect-term:led: \d{16,} \(the last term given\)\n$`},
	} {
		for _, re := range want {
			if !regexp.MustCompile(re).MatchString(blocks[name]) {
				t.Errorf("%s: no match for %s in:\n%s", name, re, blocks[name])
			}
		}
	}
	if strings.Count(blocks["cfg"], "\n  reader waiting") != 1 || strings.Count(blocks["cfg"], "\n  reader ") != 3 {
		t.Errorf("cfg: want two read holds and one waiting reader:\n%s", blocks["cfg"])
	}
}

// TestInspectSeveralKinds checks a name that holds keys of more than one
// primitive: each is reported.
func TestInspectSeveralKinds(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	c := newClient(t, srv)
	if err := c.Semaphore("x").SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	now, _ := rdb.Time(ctx).Result()
	f := c.ID() + ":1"
	rdb.ZAdd(ctx, keys.Companion("x", "rw-writers"), redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: f})
	var out bytes.Buffer
	if err := run(ctx, []string{"inspect", "-redis", srv.Addr(), "x"}, &out); err != nil {
		t.Fatal(err)
	}
	want := "x: semaphore, 1 of 1 permit available (0 held)\n" +
		"  also: rw lock, free; 1 writer waiting\n" +
		"  writer waiting " + f + "  deadline in "
	if !strings.HasPrefix(out.String(), want) {
		t.Fatalf("want prefix\n%s\ngot\n%s", want, out.String())
	}
}

// split cuts inspect's output into one block per name, in order, checking
// that each starts with its name.
func split(t *testing.T, out string, names []string) map[string]string {
	t.Helper()
	blocks := map[string]string{}
	i := -1
	for _, l := range strings.SplitAfter(out, "\n") {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, " ") {
			i++
			if i >= len(names) || !strings.HasPrefix(l, names[i]+": ") {
				t.Fatalf("block %d starts with %q, want name %v:\n%s", i, l, names, out)
			}
		}
		if i < 0 {
			t.Fatalf("output starts indented:\n%s", out)
		}
		blocks[names[i]] += l
	}
	if i != len(names)-1 {
		t.Fatalf("%d blocks for %d names:\n%s", i+1, len(names), out)
	}
	return blocks
}

// newClient returns a redisync Client on its own connections, as another
// process would have, closed when the test ends.
func newClient(t *testing.T, srv *redistest.Server) *redisync.Client {
	c, err := redisync.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestInspectCluster builds the state of every primitive on a real
// three-master Redis Cluster, with names spread over the masters, and checks
// what inspect says of each name, given the cluster's nodes (-cluster) or
// one node to detect it from (-redis).
func TestInspectCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	newClusterClient := func() *redisync.Client {
		c, err := redisync.New(cl.Client(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c1, c2 := newClusterClient(), newClusterClient()
	id1, id2 := c1.ID(), c2.ID()

	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wait := func(lock func(context.Context) (context.Context, error)) {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = lock(wctx) }()
	}
	registered := func(name, token string, n int64) {
		t.Helper()
		key := keys.Companion(name, token)
		for deadline := time.Now().Add(5 * time.Second); cc.ZCard(ctx, key).Val() != n; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never had %d entries", key, n)
			}
		}
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	m := c1.Mutex("orders:42")
	h, err := m.Lock(ctx)
	must(nil, err)
	must(m.Lock(h))
	must(c1.FairMutex("jobs").Lock(ctx))
	wait(c2.FairMutex("jobs").Lock)
	registered("jobs", "fair-queue", 1)
	must(c1.RWMutex("cfg").RLock(ctx))
	must(c2.RWMutex("cfg").RLock(ctx))
	wait(c2.RWMutex("cfg").Lock)
	registered("cfg", "rw-writers", 1)
	pool := c1.Semaphore("pool")
	must(nil, pool.SetPermits(ctx, 3))
	must(pool.Acquire(ctx, 1))
	latch := c2.CountDownLatch("start")
	must(latch.TrySetCount(ctx, 3))
	must(nil, latch.CountDown(ctx))
	must(c2.Mutex("{acct}:7", redisync.WithFencing()).Lock(ctx))

	names := []string{"orders:42", "jobs", "cfg", "pool", "start", "{acct}:7", "gone"}
	where := map[string]string{}
	masters := map[string]bool{}
	for _, name := range names {
		node, err := cc.MasterForKey(ctx, name)
		must(nil, err)
		slot, err := cc.ClusterKeySlot(ctx, name).Result()
		must(nil, err)
		where[name] = fmt.Sprintf("\n  cluster slot %d, on master %s\n", slot, node.Options().Addr)
		masters[node.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("the names are on %d masters, want all 3: %v", len(masters), where)
	}

	lease := `lease \d+\.\ds left`
	owner := func(id string) string { return regexp.QuoteMeta(id) + `:\d+` }
	want := map[string][]string{
		"orders:42": {`^orders:42: lock \(Mutex or FairMutex\), held, ` + lease + `\n`,
			`\n  holder ` + owner(id1) + `  holds 2  `},
		"jobs": {`^jobs: fair lock, held, ` + lease + `; 1 waiting\n`,
			`\n  holder ` + owner(id1) + `  holds 1  `,
			`\n  waiter 1: ` + owner(id2) + `  deadline in \d+\.\ds  `},
		"cfg": {`^cfg: rw lock, read-locked by 2 readers; 1 writer waiting\n`,
			`\n  reader ` + owner(id1) + `  holds 1, ` + lease,
			`\n  writer waiting ` + owner(id2) + `  deadline in \d+\.\ds`},
		"pool":  {`^pool: semaphore, 2 of 3 permits available \(1 held\)\n  holder ` + owner(id1) + `  holds 1, ` + lease},
		"start": {`^start: latch, counting, 2 left\n  round \{start\}:latch-round:start: [^\n]+\n  cluster slot`},
		"{acct}:7": {`^\{acct\}:7: lock \(Mutex or FairMutex\), held, ` + lease + `\n  holder ` + owner(id2) + `  holds 1  `,
			`\n  fencing counter \{acct\}:fence:\{acct\}:7: \d{16,} \(the last token given\)\n`},
		"gone": {`^gone: free \(no keys\)\n  cluster slot`},
	}
	for _, args := range [][]string{
		{"-cluster", strings.Join(cl.Addrs(), ",")},
		{"-cluster", cl.Addrs()[2]},
		{"-redis", cl.Addrs()[1]}, // detected: a cluster node
	} {
		var out bytes.Buffer
		if err := run(ctx, append(append([]string{"inspect"}, args...), names...), &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		t.Logf("%v:\n%s", args, out.String())
		blocks := split(t, out.String(), names)
		for _, name := range names {
			for _, re := range append(want[name], regexp.QuoteMeta(where[name])+`$`) {
				if !regexp.MustCompile(re).MatchString(blocks[name]) {
					t.Errorf("%v: %s: no match for %s in:\n%s", args, name, re, blocks[name])
				}
			}
		}
	}

	// -redis and -cluster together, or a -cluster without a node: refused.
	var out bytes.Buffer
	for _, bad := range [][]string{
		{"inspect", "-redis", cl.Addrs()[0], "-cluster", cl.Addrs()[1], "x"},
		{"inspect", "-cluster", ",", "x"},
	} {
		if err := run(ctx, bad, &out); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}
