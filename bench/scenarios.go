package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redisync-go/redisync"
)

type env struct {
	addr   string
	addrs  []string        // a Cluster's nodes (the cluster rows), or nil
	admin  *redis.Client   // not counted; reads INFO and CLIENT LIST
	admins []*redis.Client // a Cluster's nodes': their stats are summed
	link   *link           // clients' connections go through its proxies; nil: loopback
	warm   time.Duration
	rounds int
}

// nameSeq numbers lock names over the whole process: every pass of
// -latency and every env share the one Redis server.
var nameSeq atomic.Int64

// name returns a lock name never used before in this run, so nothing a
// previous run left behind (a lease, a queue) can interfere.
func (e *env) name(kind string) string {
	return "bench:" + kind + ":" + strconv.FormatInt(nameSeq.Add(1), 10)
}

func (e *env) stats() redisStats {
	admins := e.admins
	if admins == nil {
		admins = []*redis.Client{e.admin}
	}
	var sum redisStats
	for _, a := range admins {
		s, err := readRedisStats(context.Background(), a)
		if err != nil {
			panic(fmt.Sprintf("INFO: %v", err))
		}
		sum.add(s)
	}
	return sum
}

func itoa(i int) string { return strconv.Itoa(i) }

// ---------------------------------------------------------------------------
// Load: G goroutines over C clients, on one lock or one lock each.

type loadCfg struct {
	goroutines, clients int
	hold                time.Duration
	sameLock            bool
}

// loadRes accumulates the rounds of one library under one loadCfg.
type loadRes struct {
	acq, handoffs, errs, unlockErrs, overlaps, overtakes int64
	clientChanges                                        int64 // holder changes between clients
	longestRun                                           int64 // most acquisitions in a row within one client
	counterBad                                           int64 // rounds where the non-atomic counter != acquisitions
	elapsed                                              time.Duration
	waits, pairs                                         durations
	minPerG, maxPerG                                     int64
	jainMin                                              float64
	starvedRounds                                        int
	reqs                                                 int64
	rs                                                   redisStats
	rounds                                               int
}

// overtakeTolerance: an acquisition "overtakes" when another goroutine had
// called Lock more than this much earlier and was still waiting.
const overtakeTolerance = 5 * time.Millisecond

func (e *env) load(l lib, cfg loadCfg, d time.Duration, acc *loadRes) error {
	cnt := &counter{}
	in, err := l.new(instOpts{addr: e.addr, addrs: e.addrs, n: cfg.clients, cnt: cnt, link: e.link})
	if err != nil {
		return err
	}
	defer in.close()
	var warm loadRes
	e.loadPhase(in, cfg, e.name("warm"), e.warm, &warm) // dial, load scripts, subscribe
	rs0, req0 := e.stats(), cnt.reqs.Load()
	e.loadPhase(in, cfg, e.name("load"), d, acc)
	acc.rs.add(e.stats().sub(rs0))
	acc.reqs += cnt.reqs.Load() - req0
	return nil
}

func (e *env) loadPhase(in inst, cfg loadCfg, name string, d time.Duration, acc *loadRes) {
	G := cfg.goroutines
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg                                    sync.WaitGroup
		start                                 = make(chan struct{})
		perG                                  = make([]int64, G)
		waits                                 = make([]durations, G)
		pairs                                 = make([]durations, G)
		since                                 = make([]atomic.Int64, G)
		inside                                atomic.Int32
		errs, unlockErrs, overlaps, overtakes atomic.Int64
		counter                               int64 // deliberately not atomic: guarded by the lock under test
		handoffs                              int64 // likewise
		last                                  = -1
		clientChanges, run, longestRun        int64 // likewise
		lastClient                            = -1
	)
	for g := range G {
		lockName := name
		if !cfg.sameLock {
			lockName = name + ":" + itoa(g)
		}
		lk := in.locker(g%cfg.clients, lockName)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for ctx.Err() == nil {
				t := time.Now()
				since[g].Store(t.UnixNano())
				var err error
				for {
					if err = lk.lock(ctx); err == nil || ctx.Err() != nil {
						break
					}
					errs.Add(1) // a peer gave up (tries, TTL): a user would retry
				}
				if err != nil {
					since[g].Store(0)
					return
				}
				w := time.Since(t)
				since[g].Store(0)
				if cfg.sameLock {
					if !inside.CompareAndSwap(0, 1) {
						overlaps.Add(1)
					}
					if last != g {
						handoffs++
						last = g
					}
					if c := g % cfg.clients; c != lastClient {
						clientChanges++
						lastClient, run = c, 0
					}
					run++
					longestRun = max(longestRun, run)
					limit := t.UnixNano() - int64(overtakeTolerance)
					for j := range since {
						if s := since[j].Load(); s != 0 && s < limit {
							overtakes.Add(1)
							break
						}
					}
				}
				v := counter
				if cfg.hold > 0 {
					time.Sleep(cfg.hold)
				}
				counter = v + 1
				if cfg.sameLock {
					inside.Store(0)
				}
				if err := lk.unlock(); err != nil {
					unlockErrs.Add(1)
				}
				pairs[g] = append(pairs[g], time.Since(t)-cfg.hold)
				waits[g] = append(waits[g], w)
				perG[g]++
			}
		}()
	}
	t0 := time.Now()
	close(start)
	time.Sleep(d)
	cancel()
	wg.Wait()
	acc.elapsed += time.Since(t0)

	var total int64
	mn, mx := perG[0], perG[0]
	for g := range G {
		total += perG[g]
		mn, mx = min(mn, perG[g]), max(mx, perG[g])
		acc.waits = append(acc.waits, waits[g]...)
		acc.pairs = append(acc.pairs, pairs[g]...)
	}
	if acc.rounds == 0 || mn < acc.minPerG {
		acc.minPerG = mn
	}
	if acc.rounds == 0 || mx > acc.maxPerG {
		acc.maxPerG = mx
	}
	if j := jain(perG); acc.rounds == 0 || j < acc.jainMin {
		acc.jainMin = j
	}
	if mn == 0 {
		acc.starvedRounds++
	}
	acc.rounds++
	acc.acq += total
	if cfg.sameLock && counter != total {
		acc.counterBad++
	}
	acc.handoffs += handoffs
	acc.clientChanges += clientChanges
	acc.longestRun = max(acc.longestRun, longestRun)
	acc.errs += errs.Load()
	acc.unlockErrs += unlockErrs.Load()
	acc.overlaps += overlaps.Load()
	acc.overtakes += overtakes.Load()
}

// ---------------------------------------------------------------------------
// Yardstick: EVALSHA of a script that does nothing, on one connection.

func (e *env) yardstick(d time.Duration, acc *loadRes) error {
	cnt := &counter{}
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, PoolSize: 1, ClientName: "bench-yardstick", Dialer: e.link.goRedisDialer()})
	rdb.AddHook(cnt) // the same hook cost as the go-redis based libraries pay
	defer rdb.Close()
	ctx := context.Background()
	s := redis.NewScript("return 1")
	if err := s.Load(ctx, rdb).Err(); err != nil {
		return err
	}
	for end := time.Now().Add(e.warm); time.Now().Before(end); {
		_ = s.EvalSha(ctx, rdb, nil).Err()
	}
	rs0 := e.stats()
	t0 := time.Now()
	for end := t0.Add(d); time.Now().Before(end); {
		t := time.Now()
		if err := s.EvalSha(ctx, rdb, nil).Err(); err != nil {
			return err
		}
		acc.pairs = append(acc.pairs, time.Since(t))
		acc.acq++
	}
	acc.elapsed += time.Since(t0)
	acc.rs.add(e.stats().sub(rs0))
	acc.rounds++
	return nil
}

// pubsubFloor is the handoff of a design that wakes its waiter through a
// go-redis subscription, with nothing else: client A runs a script that
// PUBLISHes; client B's goroutine blocked in Receive gets the message and runs
// one EVALSHA. The sample is from A's script returning to B's EVALSHA
// returning: one message delivery plus one round trip, on go-redis.
func (e *env) pubsubFloor(d time.Duration, maxN int, acc *handoffRes) error {
	ctx := context.Background()
	a := redis.NewClient(&redis.Options{Addr: e.addr, ClientName: "bench-yardstick", Dialer: e.link.goRedisDialer()})
	defer a.Close()
	b := redis.NewClient(&redis.Options{Addr: e.addr, ClientName: "bench-yardstick", Dialer: e.link.goRedisDialer()})
	defer b.Close()
	a.AddHook(&counter{})
	b.AddHook(&counter{})
	pub := redis.NewScript("return redis.call('publish', KEYS[1], '0')")
	one := redis.NewScript("return 1")
	if err := pub.Load(ctx, a).Err(); err != nil {
		return err
	}
	if err := one.Load(ctx, b).Err(); err != nil {
		return err
	}
	channel := e.name("floor")
	ps := b.Subscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	got := make(chan time.Time, 1)
	go func() {
		for {
			if _, err := ps.ReceiveMessage(ctx); err != nil {
				close(got)
				return
			}
			_ = one.EvalSha(ctx, b, nil).Err()
			got <- time.Now()
		}
	}()
	// maxN is this call's (one round's) share: acc holds the earlier rounds' samples.
	for end, n0 := time.Now().Add(d), len(acc.samples); time.Now().Before(end) && len(acc.samples)-n0 < maxN; {
		time.Sleep(5*time.Millisecond + rand.N(20*time.Millisecond))
		if err := pub.EvalSha(ctx, a, []string{channel}).Err(); err != nil {
			return err
		}
		t0 := time.Now()
		select {
		case t1, ok := <-got:
			if !ok {
				return fmt.Errorf("subscription closed")
			}
			acc.samples = append(acc.samples, t1.Sub(t0))
		case <-time.After(5 * time.Second):
			return fmt.Errorf("message not received")
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Handoff: a holder (client 0) releases while one waiter (client 1) waits;
// the sample is the time from the release returning to the waiter holding.

type handoffRes struct {
	samples durations
	errs    int64
	failed  error      // a round that failed (a waiter never woken): the library's later rounds are skipped
	rs      redisStats // Redis's cost of the measured handoffs (both clients' calls), summed over e's nodes
}

func (e *env) handoff(l lib, d time.Duration, maxN int, acc *handoffRes) error {
	in, err := l.new(instOpts{addr: e.addr, addrs: e.addrs, n: 2, link: e.link})
	if err != nil {
		return err
	}
	defer in.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lockRetry := func(lk locker) error {
		for {
			err := lk.lock(ctx)
			if err == nil || ctx.Err() != nil {
				return err
			}
			acc.errs++
		}
	}
	// warm both clients up (connections, scripts)
	for i := range 2 {
		lk := in.locker(i, e.name("warm"))
		for range 3 {
			if err := lockRetry(lk); err != nil {
				return err
			}
			_ = lk.unlock()
		}
	}
	name := e.name("handoff")
	h, w := in.locker(0, name), in.locker(1, name)
	rs0 := e.stats()
	defer func() { acc.rs.add(e.stats().sub(rs0)) }()
	// maxN is this call's (one round's) share: acc holds the earlier rounds' samples.
	for end, n0 := time.Now().Add(d), len(acc.samples); time.Now().Before(end) && len(acc.samples)-n0 < maxN; {
		if err := lockRetry(h); err != nil {
			return err
		}
		got, done := make(chan time.Time, 1), make(chan error, 1)
		go func() {
			err := lockRetry(w)
			got <- time.Now()
			if err == nil {
				err = w.unlock()
			}
			done <- err
		}()
		// The waiter is waiting (subscribed, or between two polls) by now;
		// the random delay puts the release at a random phase of a poller.
		time.Sleep(5*time.Millisecond + rand.N(20*time.Millisecond))
		if err := h.unlock(); err != nil {
			return err
		}
		t0 := time.Now()
		select {
		case t1 := <-got:
			acc.samples = append(acc.samples, t1.Sub(t0))
		case <-time.After(20 * time.Second):
			return fmt.Errorf("waiter not woken after 20s")
		}
		if err := <-done; err != nil {
			return err
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Order: a holder holds; K waiters over 4 clients call Lock 5 ms apart;
// the holder releases; the grant order is compared with the arrival order.

type orderRes struct {
	rounds, inversions, maxInversions, perfect int
}

func (e *env) order(l lib, d time.Duration, acc *orderRes) error {
	const K, stagger = 8, 5 * time.Millisecond
	in, err := l.new(instOpts{addr: e.addr, n: 4, link: e.link})
	if err != nil {
		return err
	}
	defer in.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lockRetry := func(lk locker) error {
		for {
			err := lk.lock(ctx)
			if err == nil || ctx.Err() != nil {
				return err
			}
		}
	}
	for i := range 4 {
		lk := in.locker(i, e.name("warm"))
		if err := lockRetry(lk); err != nil {
			return err
		}
		_ = lk.unlock()
	}
	for end := time.Now().Add(d); acc.rounds == 0 || time.Now().Before(end); {
		name := e.name("order")
		h := in.locker(0, name)
		if err := lockRetry(h); err != nil {
			return err
		}
		grants := make(chan int, K)
		var wg sync.WaitGroup
		for k := range K {
			lk := in.locker(k%4, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if lockRetry(lk) != nil {
					return
				}
				grants <- k
				time.Sleep(200 * time.Microsecond)
				_ = lk.unlock()
			}()
			time.Sleep(stagger)
		}
		time.Sleep(2 * stagger)
		if err := h.unlock(); err != nil {
			return err
		}
		wg.Wait()
		close(grants)
		var got []int
		for k := range grants {
			got = append(got, k)
		}
		inv := 0
		for i := range got {
			for j := i + 1; j < len(got); j++ {
				if got[i] > got[j] {
					inv++
				}
			}
		}
		acc.rounds++
		acc.inversions += inv
		acc.maxInversions += K * (K - 1) / 2
		if inv == 0 {
			acc.perfect++
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Scale of the machinery.

type watchdogRes struct {
	lib                                    string
	locks, lost, ticks                     int
	window                                 time.Duration
	reqsPerSec                             float64
	reqsPerTick, pipesPerTick, cmdsPerTick float64
	tickTime                               time.Duration // wall time of one tick's round trips
	cpuPerSec                              time.Duration // Redis CPU per second of holding
	note                                   string
}

type pipeEvent struct {
	n          int
	start, end time.Time
}

// watchdogRedisync holds n locks in one Client with a 3s watchdog timeout
// (a tick every second) and counts the round trips of the ticks in a window.
func (e *env) watchdogRedisync(n int, window time.Duration) (watchdogRes, error) {
	res := watchdogRes{lib: "redisync Mutex", locks: n}
	cnt := &counter{}
	var mu sync.Mutex
	var events []pipeEvent
	recording := atomic.Bool{}
	cnt.onPipe = func(k int, s, t time.Time) {
		if recording.Load() {
			mu.Lock()
			events = append(events, pipeEvent{k, s, t})
			mu.Unlock()
		}
	}
	rdb := newGoRedis(e.addr, e.link, cnt, "bench-watchdog")
	defer rdb.Close()
	created := time.Now()
	// The renewals go on redisync's own connections: cnt counts them there.
	c, err := redisync.New(rdb, redisync.WithWatchdogTimeout(3*time.Second), redisync.WithHooks(cnt))
	if err != nil {
		return res, err
	}
	defer c.Close()
	prefix := e.name("wd")
	hctxs, err := parallelLock(n, 32, func(i int) (context.Context, error) {
		return c.Mutex(prefix + ":" + itoa(i)).Lock(context.Background())
	})
	if err != nil {
		return res, err
	}
	// Steady state: the window starts after the first tick, which also dials
	// a connection and loads the renewal script (EVALSHA, NOSCRIPT, EVAL).
	time.Sleep(time.Until(created.Add(1300 * time.Millisecond)))
	rs0, req0, cmd0 := e.stats(), cnt.reqs.Load(), cnt.cmds.Load()
	recording.Store(true)
	t0 := time.Now()
	time.Sleep(window)
	recording.Store(false)
	rs := e.stats().sub(rs0)
	res.window = time.Since(t0)
	reqs, cmds := cnt.reqs.Load()-req0, cnt.cmds.Load()-cmd0
	for _, h := range hctxs {
		if h.Err() != nil {
			res.lost++
		}
	}
	// group pipelines into ticks: a gap of 200ms starts a new tick
	mu.Lock()
	var tickStart, tickEnd time.Time
	var sum time.Duration
	for i, ev := range events {
		if i == 0 || ev.start.Sub(tickEnd) > 200*time.Millisecond {
			if i > 0 {
				sum += tickEnd.Sub(tickStart)
			}
			res.ticks++
			tickStart = ev.start
		}
		tickEnd = ev.end
	}
	if res.ticks > 0 {
		sum += tickEnd.Sub(tickStart)
		res.tickTime = sum / time.Duration(res.ticks)
		res.pipesPerTick = float64(len(events)) / float64(res.ticks)
		res.reqsPerTick = float64(reqs) / float64(res.ticks)
		res.cmdsPerTick = float64(cmds) / float64(res.ticks)
	}
	res.reqsPerSec = float64(reqs) / res.window.Seconds()
	res.cpuPerSec = time.Duration(float64(rs.cpu) / res.window.Seconds())
	mu.Unlock()
	return res, nil
}

// watchdogRueidislock holds n locks (KeyMajority 1) in one Locker with a 3s
// KeyValidity (extended every 1.5s, one script per lock) and counts requests
// in a window that starts after the first extension.
func (e *env) watchdogRueidislock(n int, window time.Duration, noloop bool) (watchdogRes, error) {
	res := watchdogRes{lib: "rueidislock (KeyMajority 1)", locks: n}
	if noloop {
		res.lib = "rueidislock (KeyMajority 1, NoLoopTracking)"
	}
	cnt := &counter{}
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{e.addr}, ClientName: "bench-watchdog", DialCtxFn: e.link.rueidisDial()},
		KeyMajority:    1,
		KeyValidity:    3 * time.Second,
		NoLoopTracking: noloop,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return c, err
			}
			return &rueCounter{Client: c, c: cnt}, nil
		},
	})
	if err != nil {
		return res, err
	}
	defer l.Close()
	prefix := e.name("wd")
	acquired := time.Now()
	var hctxs []context.Context
	done := make(chan struct{})
	go func() {
		defer close(done)
		hctxs, err = parallelLock(n, 8, func(i int) (context.Context, error) {
			ctx, _, err := l.WithContext(context.Background(), prefix+":"+itoa(i))
			return ctx, err
		})
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		// Seen with NoLoopTracking: an acquisition whose own attempt timed out
		// (TryNextAfter, 20 ms, under load) waits for an invalidation of a key
		// nobody else touches, which never comes. Close ends those waits.
		l.Close()
		<-done
		res.note = "**hung**: some WithContext calls on free keys never returned within 20 s (their own attempt timed out; they wait for an invalidation that never comes)"
		return res, nil
	}
	if err != nil {
		return res, err
	}
	time.Sleep(time.Until(acquired.Add(1700 * time.Millisecond))) // past the first extension
	rs0, req0 := e.stats(), cnt.reqs.Load()
	t0 := time.Now()
	time.Sleep(window)
	rs := e.stats().sub(rs0)
	res.window = time.Since(t0)
	reqs := cnt.reqs.Load() - req0
	for _, h := range hctxs {
		if h.Err() != nil {
			res.lost++
		}
	}
	period := 1500 * time.Millisecond
	res.ticks = int(res.window / period)
	res.reqsPerSec = float64(reqs) / res.window.Seconds()
	res.reqsPerTick = res.reqsPerSec * period.Seconds()
	res.cmdsPerTick = res.reqsPerTick
	res.cpuPerSec = time.Duration(float64(rs.cpu) / res.window.Seconds())
	if noloop {
		res.note = "one timer, goroutine and EXTEND script per lock per 1.5 s (rueidis pipelines concurrent requests on its one connection)"
	} else {
		res.note = "after its first extension each lock re-extends on its own invalidation (tracking without NOLOOP): a busy loop bounded by Redis's throughput"
	}
	return res, nil
}

func parallelLock(n, workers int, f func(i int) (context.Context, error)) ([]context.Context, error) {
	out := make([]context.Context, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ctx, err := f(i)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				out[i] = ctx
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, err
	}
	return out, nil
}

type pubsubRes struct {
	lib                             string
	waiters, conns, subConns, chans int
	wakeAll                         time.Duration // from releasing all to every waiter holding
	acquired                        int
	note                            string
}

// pubsubScale: client A holds n locks; client B ("bench-waiters") has one
// waiter on each; CLIENT LIST tells how many connections B uses, and how
// many of them are subscribed.
func (e *env) pubsubScale(l lib, n int) (pubsubRes, error) {
	res := pubsubRes{lib: l.name, waiters: n}
	holdIn, err := l.new(instOpts{addr: e.addr, n: 1, link: e.link})
	if err != nil {
		return res, err
	}
	defer holdIn.close()
	waitIn, err := l.new(instOpts{addr: e.addr, n: 1, name: "bench-waiters", link: e.link})
	if err != nil {
		return res, err
	}
	defer waitIn.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prefix := e.name("ps")
	holders := make([]locker, n)
	for i := range n {
		holders[i] = holdIn.locker(0, prefix+":"+itoa(i))
		if err := holders[i].lock(ctx); err != nil {
			return res, err
		}
	}
	var acquired atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		lk := waitIn.locker(0, prefix+":"+itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				err := lk.lock(ctx)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
			}
			acquired.Add(1)
			_ = lk.unlock()
		}()
	}
	// give every waiter time to make its first attempt and start waiting
	time.Sleep(2 * time.Second)
	list, err := e.admin.ClientList(ctx).Result()
	if err != nil {
		return res, err
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] != "bench-waiters" {
			continue
		}
		res.conns++
		sub, _ := strconv.Atoi(f["sub"])
		psub, _ := strconv.Atoi(f["psub"])
		ssub, _ := strconv.Atoi(f["ssub"])
		if sub+psub+ssub > 0 {
			res.subConns++
			res.chans += sub + psub + ssub
		}
	}
	t0 := time.Now()
	for _, h := range holders {
		_ = h.unlock()
	}
	doneCh := make(chan struct{})
	go func() { wg.Wait(); close(doneCh) }()
	select {
	case <-doneCh:
	case <-time.After(30 * time.Second):
	}
	res.wakeAll = time.Since(t0)
	res.acquired = int(acquired.Load())
	cancel()
	<-doneCh
	return res, nil
}
