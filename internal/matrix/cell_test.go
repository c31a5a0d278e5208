package matrix

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/faultproxy"
)

const (
	// lease is every Client's watchdog timeout: short, so that the pause
	// outlasts it and lost holds come free within a cell.
	lease = time.Second
	// strictLease is the watchdog timeout of the strict cells (a
	// resharding): while a lock's keys are split between two masters, no
	// script on them can run (TRYAGAIN), renewals included, and a hold
	// whose renewals are refused past its deadline is lost, rightly. The
	// keys are split for a few reshardSteps, longer on a loaded machine (a
	// 1s lease lost a hold so, once in several runs of the suite): the
	// strict cells' leases leave room for it.
	strictLease = 3 * time.Second
	// waiterTimeout bounds how long a FairMutex or RWMutex waiter whose
	// leave could not be sent stays queued.
	waiterTimeout = time.Second
	// ackTimeout is WithReplicaAck's: below ioTimeout, as New requires.
	ackTimeout = 300 * time.Millisecond
	// slack is how far past its deadline (or wait bound) a call may
	// return: the cleanup of a wait that ended (at most 200ms while Redis
	// does not answer) and the scheduler of a loaded machine under -race.
	slack = time.Second
	// restartWindow is how long after a restart that lost the data a
	// hold granted before it may still be live (told at its next
	// renewal, within the lease).
	restartWindow = lease + time.Second

	clients   = 3 // Clients per cell, each on its own pool
	perClient = 2 // contenders per Client

	warmup  = 400 * time.Millisecond // run before the fault
	settle  = lease + 700*time.Millisecond
	replyN  = 12                      // commands a reply fault hits at most
	replyOn = 1500 * time.Millisecond // how long a reply fault is armed
)

// hold is one grant, as the cell saw it.
type hold struct {
	who        string
	claims     []claim
	ctx        context.Context
	began, got time.Time // the call that took it began, returned
	token      int64
	tokened    bool
}

// window is one fault that lost Redis's data.
type window struct{ start, done time.Time }

// cellRun is the state of one cell's run.
type cellRun struct {
	t      *testing.T
	fail   func(msg string) // reports a violation
	c      cell
	name   string
	start  time.Time
	fenced bool
	ack    bool
	opts   cellOpts

	mu         sync.Mutex
	in         map[*hold]struct{} // holds whose contexts may be live
	all        []*hold            // every grant
	seen       map[string]bool    // overlaps already reported or excused
	losses     []window
	faultStart time.Time
	faultEnd   time.Time
	current    string // the fault under way
	counts     map[string]int
	violations int
	kinds      map[string]int // violations by format
	checks     int
	excused    int
	maxOver    time.Duration
}

func (r *cellRun) since(at time.Time) string { return fmt.Sprintf("+%.3fs", at.Sub(r.start).Seconds()) }

func (r *cellRun) count(what string) { r.add(what, 1) }

func (r *cellRun) add(what string, n int) {
	r.mu.Lock()
	r.counts[what] += n
	r.mu.Unlock()
}

// violate fails the cell, saying which fault was under way. Five of each
// kind are told (the count is in the summary).
func (r *cellRun) violate(format string, args ...any) {
	r.mu.Lock()
	r.violations++
	r.kinds[format]++
	n, cur := r.kinds[format], r.current
	r.mu.Unlock()
	if n > 5 {
		return
	}
	if cur == "" {
		cur = "none"
	}
	r.fail(fmt.Sprintf("VIOLATION at %s (fault under way: %s): %s", r.since(time.Now()), cur, fmt.Sprintf(format, args...)))
}

func (r *cellRun) desc(h *hold) string {
	return fmt.Sprintf("%s (call began %s, granted by %s)", h.who, r.since(h.began), r.since(h.got))
}

// lostCovers reports whether an overlap seen at now between h and live may
// be the documented loss of a fault that lost Redis's data: seen within
// restartWindow of its end, with one of the holds granted (its call
// returned) before that end. A hold granted after it was granted by the
// Redis that has no memory of the old holds; it must not overlap with
// another hold granted after it either.
func (r *cellRun) lostCovers(now time.Time, h *hold, live []*hold) bool {
	for _, w := range r.losses {
		done := w.done
		if done.IsZero() {
			done = now
		}
		if now.Before(w.start) || now.After(done.Add(restartWindow)) {
			continue
		}
		if h.got.Before(done) || slices.ContainsFunc(live, func(o *hold) bool { return o.got.Before(done) }) {
			return true
		}
	}
	return false
}

// check checks, with r.mu held, that h may hold what it holds now: for
// each resource it claims, the units held by live holds (its own
// included) are within the capacity. The others' contexts are read before
// h's own: if h's is live after, both were live when the others' were
// read, which is when both held. A hold whose context is done is not
// checked: it no longer holds.
func (r *cellRun) check(h *hold, what string) {
	now := time.Now()
	type over struct {
		cl   claim
		live []*hold
	}
	var overs []over
	for _, cl := range h.claims {
		var live []*hold
		units := cl.units
		for o := range r.in {
			if o == h {
				continue
			}
			for _, oc := range o.claims {
				if oc.resource == cl.resource && o.ctx.Err() == nil {
					live = append(live, o)
					units += oc.units
				}
			}
		}
		if units > cl.capacity {
			overs = append(overs, over{cl, live})
		}
	}
	if h.ctx.Err() != nil {
		return
	}
	r.checks++
	for _, o := range overs {
		key := o.cl.resource + "|" + h.who
		for _, l := range o.live {
			key += "|" + l.who
		}
		if r.seen[key] {
			continue
		}
		r.seen[key] = true
		var others []string
		for _, l := range o.live {
			others = append(others, r.desc(l))
		}
		if r.lostCovers(now, h, o.live) {
			r.excused++
			r.t.Logf("excused (Redis lost its data) at %s on %s: %s with %s", r.since(now), o.cl.resource, r.desc(h), strings.Join(others, "; "))
			continue
		}
		r.mu.Unlock()
		r.violate("exclusion broken on %s (%s): %s holds %d of %d units while these live holds take the rest: %s",
			o.cl.resource, what, r.desc(h), o.cl.units, o.cl.capacity, strings.Join(others, "; "))
		r.mu.Lock()
	}
}

func (r *cellRun) enter(h *hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.check(h, "on acquisition")
	r.in[h] = struct{}{}
	r.all = append(r.all, h)
}

func (r *cellRun) audit(h *hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.check(h, "during the hold")
}

func (r *cellRun) exit(h *hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.in, h)
}

// transient lists Redis replies that a call must ride out, not return:
// they say "not now", and the deployment answers again shortly.
var transient = []string{"LOADING", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK ", "NOSCRIPT"}

// unreachable lists errors of a Redis that does not answer (paused,
// restarting, its connections killed): a call may return them.
var unreachable = []string{"EOF", "connection refused", "connection reset", "broken pipe", "i/o timeout",
	"use of closed network connection", "pool timeout", "injected fault"}

// classify sorts an error from an acquisition (wait: it was a waiting
// call; try: a wait-bounded one) and says whether the call may return it.
func (r *cellRun) classify(err error, try bool) (string, bool) {
	s := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "context ended", true
	case errors.Is(err, redisync.ErrNotAcquired):
		return "not acquired", try
	case errors.Is(err, redisync.ErrNotReplicated):
		return "not replicated", r.ack
	case errors.Is(err, redisync.ErrInvalid), errors.Is(err, redisync.ErrClosed), errors.Is(err, redisync.ErrNotHeld):
		return "refused: " + s, false
	}
	for _, k := range transient {
		if strings.Contains(s, k) {
			return "transient reply " + strings.TrimSpace(k), false
		}
	}
	for _, k := range unreachable {
		if strings.Contains(s, k) {
			// A fault that leaves every node reachable (strict) excuses
			// none of these.
			return "unreachable: " + k, !r.opts.strict
		}
	}
	return "other: " + s, false
}

// worker is one contender's loop: acquire (a Lock bounded by its context,
// or a TryLockFor), hold for a while checking the hold, release.
func (r *cellRun) worker(who string, ct contender, rng *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		r.iterate(who, ct, rng)
	}
}

func (r *cellRun) iterate(who string, ct contender, rng *rand.Rand) {
	bg := context.Background()
	var (
		parent context.Context
		cancel context.CancelFunc
		bound  time.Time
		op     string
		hctx   context.Context
		err    error
	)
	began := time.Now()
	x := rng.IntN(10)
	switch {
	case x < 7 || ct.tryFor == nil:
		op = "acquire"
		parent, cancel = context.WithTimeout(bg, 200*time.Millisecond+time.Duration(rng.Int64N(int64(time.Second))))
		bound, _ = parent.Deadline()
		hctx, err = ct.acquire(parent)
	default:
		op = "tryFor"
		parent, cancel = context.WithTimeout(bg, 10*time.Second)
		wait := 100*time.Millisecond + time.Duration(rng.Int64N(int64(700*time.Millisecond)))
		bound = began.Add(wait)
		hctx, err = ct.tryFor(parent, wait)
	}
	defer cancel()
	ret := time.Now()
	if over := ret.Sub(bound); over > 0 {
		r.mu.Lock()
		r.maxOver = max(r.maxOver, over)
		r.mu.Unlock()
		if over > slack {
			r.violate("a wait did not end with its context: %s %s began %s, bound %s, returned %s (%v late), err %v",
				who, op, r.since(began), r.since(bound), r.since(ret), over.Round(time.Millisecond), err)
		}
	}
	if err != nil {
		class, ok := r.classify(err, op == "tryFor")
		r.count(op + " error: " + class)
		if !ok {
			r.violate("%s %s (began %s) returned %v", who, op, r.since(began), err)
		}
		time.Sleep(time.Duration(5+rng.IntN(20)) * time.Millisecond)
		return
	}
	r.count("granted")
	h := &hold{who: fmt.Sprintf("%s #%d", who, rng.Uint32()), claims: ct.claims, ctx: hctx, began: began, got: ret}
	if ct.token != nil { // with WithFencing; an Election's term always
		h.token, h.tokened = ct.token(hctx)
		if r.fenced && !h.tokened {
			r.violate("%s: a hold taken WithFencing has no token", r.desc(h))
		}
	}
	r.enter(h)
	defer r.exit(h)
	if r.opts.reenter && ct.reenter != nil && rng.IntN(3) == 0 {
		r.reenterOnce(h, ct, rng)
	}

	// Now and then, keep the hold until the context it was taken with
	// ends: the hold must end with it (and Unlock then returns nil).
	untilEnd := op == "acquire" && rng.IntN(8) == 0
	end := ret.Add(time.Duration(5+rng.IntN(55)) * time.Millisecond)
	if untilEnd {
		end = bound.Add(slack)
	}
	for time.Now().Before(end) {
		t := time.NewTimer(time.Duration(2+rng.IntN(10)) * time.Millisecond)
		select {
		case <-hctx.Done():
			t.Stop()
			end = time.Time{}
		case <-t.C:
			r.audit(h)
		}
	}
	if untilEnd && hctx.Err() == nil {
		r.violate("%s: the hold's context is live %v after the context it was taken with ended", r.desc(h), slack)
	}
	if errors.Is(context.Cause(hctx), redisync.ErrLeaseLost) {
		r.count("leases lost")
		if r.opts.strict {
			r.violate("%s: the hold was lost (%v), in a fault that loses nothing", r.desc(h), context.Cause(hctx))
		}
	}
	r.release(h, ct)
}

// reenterOnce re-enters h's hold through ct, keeps the re-entry a moment
// and leaves it: the re-entry succeeds or fails as an acquisition may (or
// with ErrNotHeld once the hold has ended), and leaving it succeeds as a
// release must.
func (r *cellRun) reenterOnce(h *hold, ct contender, rng *rand.Rand) {
	began := time.Now()
	rctx, err := ct.reenter(h.ctx)
	if err != nil {
		class, ok := r.classify(err, false)
		if !ok && errors.Is(err, redisync.ErrNotHeld) && h.ctx.Err() != nil {
			class, ok = "the hold ended", true
		}
		r.count("re-entry error: " + class)
		if !ok {
			r.violate("%s: its re-entry (began %s) returned %v", r.desc(h), r.since(began), err)
		}
		return
	}
	r.count("re-entered")
	time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
	r.audit(h)
	if err := ct.release(rctx); err != nil {
		class, _ := r.classify(err, false)
		r.count("re-entry release error: " + class)
		if r.opts.strict || strings.HasPrefix(class, "refused") || strings.HasPrefix(class, "other") {
			if !errors.Is(err, redisync.ErrNotHeld) || h.ctx.Err() == nil || r.opts.strict {
				r.violate("%s: leaving its re-entry returned %v", r.desc(h), err)
			}
		}
	}
}

// release releases h's hold: after it returned, whatever it returned, the
// hold's context must be done (its last release ended it).
func (r *cellRun) release(h *hold, ct contender) {
	ended := h.ctx.Err() != nil // with the context it was taken with, or lost
	err := ct.release(h.ctx)
	switch {
	case err == nil:
		r.count("released")
	case r.opts.strict:
		r.violate("%s: release returned %v (the fault loses nothing)", r.desc(h), err)
	case errors.Is(err, redisync.ErrNotHeld) && errors.Is(err, redisync.ErrLeaseLost):
		r.count("release: lease lost")
	case errors.Is(err, redisync.ErrNotHeld) && !ended:
		r.violate("%s: its release says it did not hold, while its context was live: %v", r.desc(h), err)
	default:
		class, _ := r.classify(err, false)
		if strings.HasPrefix(class, "refused") || strings.HasPrefix(class, "other") {
			r.violate("%s: release returned %v", r.desc(h), err)
		}
		r.count("release error: " + class)
	}
	if h.ctx.Err() == nil {
		r.violate("%s: the hold's context is live after its release returned (%v)", r.desc(h), err)
	}
}

// checkTokens checks, for every resource whose holds have tokens (fenced,
// or an Election's terms), that a hold granted to a call that began after
// another hold was granted got a greater token, across faults that lost
// the data too (tokens are never below the server's clock, see
// WithFencing).
func (r *cellRun) checkTokens() {
	byRes := map[string][]*hold{}
	for _, h := range r.all {
		if h.tokened {
			byRes[h.claims[0].resource] = append(byRes[h.claims[0].resource], h)
		}
	}
	for res, hs := range byRes {
		sort.Slice(hs, func(i, j int) bool { return hs[i].got.Before(hs[j].got) })
		for j, b := range hs {
			for _, a := range hs[:j] {
				if !a.got.Before(b.began) || b.token > a.token {
					continue
				}
				r.violate("fencing on %s: %s got token %d, not above the %d of %s granted before it began",
					res, r.desc(b), b.token, a.token, r.desc(a))
			}
		}
	}
}

// cellOpts are the variants of a cell's run.
type cellOpts struct {
	// shared: other cells run on fx at the same time, each on a lock of
	// its own slot: fx is made ready before, and what is left in Redis is
	// looked for among the keys named after this cell's lock.
	shared bool
	// strict: the fault loses nothing and leaves every node reachable (a
	// resharding): no hold may be lost, no call may fail on the network,
	// and every release must succeed.
	strict bool
	// reenter: a holder re-enters its hold now and then, and leaves the
	// re-entry, while it holds it.
	reenter bool
}

// cellName is the name of the lock a cell hammers.
func cellName(c cell) string { return "mx:" + strings.NewReplacer("/", ":").Replace(c.String()) }

// runCell runs one cell on fx: contenders on three Clients hammer one lock
// of primitive p while the fault hits it, then the cell checks what is
// left. Violations go to fail.
func runCell(t *testing.T, fx fixture, c cell, p *primitive, fail func(msg string)) {
	runCellWith(t, fx, c, p, fail, cellOpts{})
}

// runCellWith is runCell with the variants opts.
func runCellWith(t *testing.T, fx fixture, c cell, p *primitive, fail func(msg string), opts cellOpts) {
	if !opts.shared {
		fx.ready(t)
	}
	bg := context.Background()
	r := &cellRun{
		t: t, fail: fail, c: c, start: time.Now(), name: cellName(c), opts: opts,
		fenced: c[fOpt] == optFencing, ack: c[fOpt] == optAck,
		in: map[*hold]struct{}{}, seen: map[string]bool{}, counts: map[string]int{}, kinds: map[string]int{},
	}
	h := faultproxy.NewHook()
	wdt := lease
	if opts.strict {
		wdt = strictLease
	}
	// h on the Clients' own calls (the engine's: WithHooks), and on their
	// redis clients (fixture.rdb) for what stays on go-redis.
	copts := append(fx.options(c[fTopo]), redisync.WithWatchdogTimeout(wdt), redisync.WithHooks(h))
	if r.ack {
		copts = append(copts, redisync.WithReplicaAck(1, ackTimeout))
	}
	var lockOpts []redisync.FencingOption
	if r.fenced {
		lockOpts = append(lockOpts, redisync.WithFencing())
	}
	newClient := func() *redisync.Client {
		rc, err := redisync.New(fx.rdb(t, h), copts...)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return rc
	}
	admin := newClient()
	defer admin.Close()
	if p.setup != nil {
		if err := p.setup(bg, admin, r.name); err != nil {
			t.Fatalf("setup: %v", err)
		}
	}

	var cs []*redisync.Client
	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop) })
	var wg sync.WaitGroup
	// A cell that ends early (a fault that failed t) stops its
	// contenders and waits for them: none reports on a finished test.
	defer func() {
		halt()
		wg.Wait()
	}()
	seed := uint64(time.Now().UnixNano())
	for i := range clients {
		rc := newClient()
		cs = append(cs, rc)
		for j := range perClient {
			n := i*perClient + j
			ct := p.contender(rc, r.name, n, lockOpts)
			rng := rand.New(rand.NewPCG(seed, uint64(n)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(fmt.Sprintf("client%d/contender%d", i, n), ct, rng, stop)
			}()
		}
	}

	time.Sleep(warmup)
	r.mu.Lock()
	r.faultStart, r.current = time.Now(), c[fFault]
	r.mu.Unlock()
	lost := r.inject(fx, h)
	r.mu.Lock()
	r.faultEnd, r.current = time.Now(), ""
	if lost {
		r.losses[len(r.losses)-1].done = r.faultEnd
	}
	r.mu.Unlock()
	if lost && p.setup != nil {
		if err := p.setup(bg, admin, r.name); err != nil {
			t.Errorf("setup again after the data was lost: %v", err)
		}
	}
	time.Sleep(settle)

	halt()
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 4<<20)
		t.Fatalf("contenders still running 30s after being told to stop:\n%s", buf[:runtime.Stack(buf, true)])
	}
	for _, rc := range cs {
		if err := rc.Close(); err != nil {
			r.violate("Close: %v", err)
		}
	}

	// Nothing left behind, right after the run: no hold, no waiter, no
	// permit in use; only what stays by design.
	allowed := p.residue(r.name, r.fenced)
	var left []string
	for _, k := range fx.keys(t) {
		if !slices.Contains(allowed, k) && (!opts.shared || strings.Contains(k, r.name)) {
			left = append(left, k)
		}
	}
	if len(left) > 0 {
		sort.Strings(left)
		r.violate("left in Redis right after the run: %s", describeKeys(bg, fx.rdb(t, faultproxy.NewHook()), left))
	}
	if err := p.idle(bg, admin, r.name); err != nil {
		r.violate("right after the run, %s %s: %v", p.name, r.name, err)
	}
	r.checkTokens()

	// The lock was usable after the fault.
	after := 0
	for _, h := range r.all {
		if h.began.After(r.faultEnd) {
			after++
		}
	}
	if after == 0 {
		r.violate("no hold was granted to a call that began after the fault ended (%s)", r.since(r.faultEnd))
	}

	var counts []string
	for k, v := range r.counts {
		counts = append(counts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(counts)
	t.Logf("%s: fault %s to %s; %d grants (%d after the fault), %d checks, %d excused, %d violations; latest return past a bound %v; %s",
		c, r.since(r.faultStart), r.since(r.faultEnd), len(r.all), after, r.checks, r.excused, r.violations,
		r.maxOver.Round(time.Millisecond), strings.Join(counts, ", "))
}

// inject runs the cell's fault and reports whether Redis lost its data.
func (r *cellRun) inject(fx fixture, h *faultproxy.Hook) bool {
	touches := func(args []any) bool {
		for _, a := range args {
			if s, ok := a.(string); ok && strings.Contains(s, r.name) {
				return true
			}
		}
		return false
	}
	switch kind := r.c[fFault]; kind {
	case faultDelayed:
		rule := h.OnCommand(faultproxy.CommandRule{Args: touches, Times: replyN, Action: faultproxy.DelayReply(lease / 2)})
		time.Sleep(replyOn)
		rule.Remove()
		r.add("replies delayed", rule.Fired())
		if rule.Fired() == 0 {
			r.violate("no reply delayed: the fault injected nothing")
		}
	case faultLostReply:
		rule := h.OnCommand(faultproxy.CommandRule{Args: touches, Times: replyN, Action: faultproxy.LoseReply()})
		time.Sleep(replyOn)
		rule.Remove()
		r.add("replies lost", rule.Fired())
		if rule.Fired() == 0 {
			r.violate("no reply lost: the fault injected nothing")
		}
	case faultRestart:
		r.mu.Lock()
		r.losses = append(r.losses, window{start: time.Now()})
		r.mu.Unlock()
		return fx.fault(r.t, kind, r.name)
	default:
		return fx.fault(r.t, kind, r.name)
	}
	return false
}

// describeKeys says what each key is, holds, and how long it lives.
func describeKeys(ctx context.Context, rdb redis.UniversalClient, ks []string) string {
	var out []string
	for _, k := range ks {
		typ, _ := rdb.Type(ctx, k).Result()
		ttl, _ := rdb.PTTL(ctx, k).Result()
		var v any
		switch typ {
		case "hash":
			v, _ = rdb.HGetAll(ctx, k).Result()
		case "zset":
			v, _ = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "string":
			v, _ = rdb.Get(ctx, k).Result()
		}
		out = append(out, fmt.Sprintf("%s (%s %v, ttl %v)", k, typ, v, ttl))
	}
	return strings.Join(out, "; ")
}
