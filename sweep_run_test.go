package redisync

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/lua"
)

// How the abandonment sweep (sweep_abandon_test.go) runs one row in one
// mode.

// swMode is how a run holds the call's script up.
type swMode struct {
	name   string
	action func() faultproxy.Action // a hook rule on the call's script
	link   string                   // "silent" or "reset": the proxy
	lost   bool                     // lease-lost
}

var swModes = []swMode{
	{name: "late-reply", action: func() faultproxy.Action { return faultproxy.DelayReply(swDelay) }},
	{name: "late-send", action: func() faultproxy.Action { return faultproxy.DelayBefore(swDelay) }},
	{name: "silent", link: "silent"},
	{name: "reset", link: "reset"},
	{name: "lease-lost", action: func() faultproxy.Action { return faultproxy.DelayReply(swLostDelay) }, lost: true},
}

// swHold is a grant one of the clients got during a run.
type swHold struct {
	who     string
	owner   string // re-entries share their hold's
	b       bool   // B's
	ctx     context.Context
	release func() error // A's: how it is given up at the end
}

// swRun is one run: a row in a mode.
type swRun struct {
	t     *testing.T
	row   *swRow
	mode  swMode
	e     *testEnv
	a, b  *Client
	admin *redis.Client
	hook  *faultproxy.Hook
	proxy *faultproxy.Proxy
	opts  []anyOpt        // A's handles' options
	base  string          // Redis before the setup, but what stays by design
	main  context.Context // the hold the call goes through (or ends)
	bHold context.Context // B's hold in the setup (a call that waits first)

	rule     *faultproxy.Rule
	renewals *faultproxy.Rule // renewals held up while the fault lasts
	flight   *swFlight
	armedAt  time.Time
	healOnce sync.Once
	stopCut  chan struct{}

	callEnd    context.Context // done once the call's context is to end
	endCallNow context.CancelFunc
	cutAt      time.Time

	lag *lagWatch // the machine's scheduling delay through the run

	mu      sync.Mutex
	holds   []*swHold
	more    int // re-entries through main that other waits took
	ends    map[context.Context]time.Time
	bWins   []time.Time
	cancels []context.CancelFunc
	waits   sync.WaitGroup // the other waits
	mids    sync.WaitGroup // what mid started
}

func (r *swRun) mine() swOps  { return r.row.prim.mine(r.a, swName, r.opts) }
func (r *swRun) rival() swOps { return r.row.prim.rival(r.b, swName) }

func (r *swRun) slow() bool { return r.mode.link == "" }

// bg returns a context cancelled at the end of the run.
func (r *swRun) bg() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	r.mu.Lock()
	r.cancels = append(r.cancels, cancel)
	r.mu.Unlock()
	return ctx
}

// cut returns the call's context, from parent: it ends once the fault
// holds the call up, with endCall (in the lease-lost mode, it does not
// end).
func (r *swRun) cut(parent context.Context) context.Context {
	if r.mode.lost {
		return parent
	}
	ctx, cancel := context.WithCancel(parent)
	context.AfterFunc(r.callEnd, cancel)
	r.mu.Lock()
	r.cancels = append(r.cancels, cancel)
	r.mu.Unlock()
	return ctx
}

// endCall ends the call's context (even if the call has not made it yet:
// on a loaded machine its goroutine may start late).
func (r *swRun) endCall() {
	r.cutAt = time.Now()
	r.endCallNow()
}

// via is the context a call through the hold is made with: the hold's
// context; in the lease-lost mode, one that carries the hold but does not
// end with it (context.WithoutCancel), so that the call is still there
// when its reply comes after the hold was lost.
func (r *swRun) via() context.Context {
	if r.mode.lost {
		return context.WithoutCancel(r.main)
	}
	return r.main
}

// waitingA waits until a goroutine of A waits for the lock.
func (r *swRun) waitingA() {
	start := time.Now()
	for semWaiters(r.a) == 0 {
		if time.Since(start) > time.Second+r.lag.Slack() {
			r.t.Errorf("the call never waited (the machine's worst delay meanwhile: %v)", r.lag.Worst())
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// swMain is the owner of the hold a call goes through (or ends).
const swMain = "A:main"

// holdA takes the lock for A, as swMain, bound to a context live until
// the end of the run.
func (r *swRun) holdA(who string) context.Context {
	ops := r.mine()
	hctx, err := ops.lock(r.bg())
	require.NoError(r.t, err, who)
	r.granted(false, swMain, who, hctx, func() error { return ops.unlock(hctx) })
	return hctx
}

// reenterA re-enters the hold of hctx.
func (r *swRun) reenterA(who string, hctx context.Context) context.Context {
	ops := r.mine()
	rctx, err := ops.lock(hctx)
	require.NoError(r.t, err, who)
	r.granted(false, swMain, who, rctx, func() error { return ops.unlock(rctx) })
	return rctx
}

// ended returns how long after the fault was armed the hold of hctx, a
// grant of the run, ended.
func (r *swRun) ended(hctx context.Context) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ends[hctx].Sub(r.armedAt)
}

// watch notes when the hold of hctx ends.
func (r *swRun) watch(hctx context.Context) {
	context.AfterFunc(hctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ends[hctx] = time.Now()
	})
}

// callScript reports whether args run one of the call's scripts on the
// lock.
func (r *swRun) callScript(args []any) bool {
	for _, s := range r.row.scripts {
		if faultproxy.RunsScript(s.Script)(args) {
			return faultTouches(swName)(args)
		}
	}
	return false
}

// swRenewal reports whether args renew a hold of the lock.
func swRenewal(args []any) bool {
	for _, s := range []*lua.Script{lua.Renew, lua.RWRenewWrite, lua.RWRenewRead, lua.SemRenew, lua.MultiRenew, lua.ElectRenew} {
		if faultproxy.RunsScript(s.Script)(args) {
			return faultTouches(swName)(args)
		}
	}
	return false
}

// swFlight is a hook (WithHooks: around the engine's calls) that counts
// the calls and batches with one of the call's scripts that are on their
// way and were sent before the fault was armed: the fault cannot hold
// them up.
type swFlight struct {
	matches func(args []any) bool
	armed   atomic.Bool
	n       atomic.Int32
}

func (f *swFlight) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *swFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !f.armed.Load() && f.matches(cmd.Args()) {
			f.n.Add(1)
			defer f.n.Add(-1)
		}
		return next(ctx, cmd)
	}
}

func (f *swFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !f.armed.Load() && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return f.matches(c.Args()) }) {
			f.n.Add(1)
			defer f.n.Add(-1)
		}
		return next(ctx, cmds)
	}
}

// quiet waits until no attempt of the call the fault missed is on its way
// (with the script held up; a link fault holds everything up).
func (r *swRun) quiet() {
	if !r.slow() {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for r.flight.n.Load() > 0 {
		if time.Now().After(deadline) {
			r.t.Error("an attempt sent before the fault was armed is still on its way")
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// arm starts the fault.
func (r *swRun) arm() {
	r.armedAt = time.Now()
	switch r.mode.link {
	case "":
		r.rule = r.hook.OnCommand(faultproxy.CommandRule{Args: r.callScript, Times: 1, Action: r.mode.action()})
		r.flight.armed.Store(true) // after the rule: what comes later is held up
	case "silent":
		r.proxy.Blackhole(true)
	case "reset":
		// Nothing gets through, and every connection is cut within
		// 10ms: the link answers with resets, not with silence.
		r.proxy.Blackhole(true)
		r.proxy.CutAll()
		r.stopCut = make(chan struct{})
		go func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-r.stopCut:
					return
				case <-tick.C:
					r.proxy.CutAll()
				}
			}
		}()
	}
}

// heal ends a link fault.
func (r *swRun) heal() {
	r.healOnce.Do(func() {
		if r.stopCut != nil {
			close(r.stopCut)
		}
		if r.mode.link != "" {
			healProxy(r.proxy)
		}
	})
}

// hit returns a channel closed once the fault holds the call up (the rule
// fired, or the link is down), or the call returned.
func (r *swRun) hit(armed <-chan struct{}, returned <-chan struct{}) <-chan struct{} {
	hit := make(chan struct{})
	go func() {
		defer close(hit)
		select {
		case <-armed:
		case <-returned:
			return
		case <-time.After(2 * time.Second):
			r.t.Error("the fault was never armed")
			return
		}
		for r.slow() && r.rule.Fired() == 0 {
			select {
			case <-returned:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
		if !r.slow() {
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return hit
}

// waitGroup waits for wg at most d, reporting whether it ended.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// runSweep runs row in mode m.
func runSweep(t *testing.T, row *swRow, m swMode) {
	r := newSweepRun(t, row, m)
	defer r.cleanup()
	if row.setup != nil {
		row.setup(r)
	}
	r.abandon()
	retaken := r.afterCall()
	stopB := r.contend(retaken)
	defer stopB()
	r.faultEnds(retaken)
	r.giveUp()
	stopB()
	if row.cleanup != nil {
		row.cleanup(r)
	}
	r.nothingLeft()
}

// newSweepRun makes a run's Redis, clients and state before the setup.
func newSweepRun(t *testing.T, row *swRow, m swMode) *swRun {
	e := realEnv(t)
	p := newProxy(t, e.addr)
	r := &swRun{t: t, row: row, mode: m, e: e, hook: faultproxy.NewHook(), proxy: p, admin: e.rdb(t),
		ends: map[context.Context]time.Time{}, lag: watchLag(t)}
	r.flight = &swFlight{matches: r.callScript}
	r.callEnd, r.endCallNow = context.WithCancel(context.Background())
	t.Cleanup(r.endCallNow)
	rdbA := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = rdbA.Close() })
	gate(rdbA, r.flight) // outside the fault hook: it sees every attempt
	gate(rdbA, r.hook)
	r.a = newClient(t, rdbA, WithWatchdogTimeout(swLease))
	r.b = e.client(t, WithWatchdogTimeout(swLease))
	bg := context.Background()
	for _, s := range swScripts {
		require.NoError(t, s.Load(bg, r.admin).Err())
	}
	if row.prim.prepare != nil {
		require.NoError(t, row.prim.prepare(bg, r.a, swName))
	}
	// B's subscription connection, up before B waits: B is to hear the
	// first release the fault makes.
	w, err := r.b.ps.Subscribe("sweep:warm-up", notify.WakeAll)
	require.NoError(t, err)
	require.NoError(t, w.Ready(bg, 5*time.Second))
	w.Leave()
	r.base = r.state()
	if m.lost {
		r.opts = []anyOpt{WithLease(swLostLease)}
	}
	return r
}

// cleanup ends the fault and every context of the run.
func (r *swRun) cleanup() {
	r.heal()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cancel := range r.cancels {
		cancel()
	}
}

// abandon makes the call, holds it up, ends its context once it is held
// up, and checks that it returns in time with its documented outcome.
// Other waits start while it is in flight.
func (r *swRun) abandon() {
	t, row := r.t, r.row
	armed, returned := make(chan struct{}), make(chan struct{})
	armOnce := sync.OnceFunc(func() { r.arm(); close(armed) })
	if row.mid == nil {
		armOnce()
	}
	hit := r.hit(armed, returned)
	var (
		cctx context.Context
		cerr error
		took time.Duration
	)
	start := time.Now()
	go func() {
		defer close(returned)
		cctx, cerr = row.call(r)
		took = time.Since(start)
	}()
	if row.mid != nil {
		r.mids.Add(1)
		go func() { defer r.mids.Done(); row.mid(r, armOnce) }()
	}
	<-hit
	r.waiters("while the call is in flight")
	time.Sleep(swCut)
	r.endCall()

	// When the call must have returned by.
	var by time.Time
	switch {
	case row.release:
		by = start.Add(holds.ReleaseTimeout)
	case row.bounded:
		by = start.Add(swCallCtx)
	case r.mode.lost:
		by = start.Add(swLostCtx)
	default:
		by = r.cutAt
	}
	select {
	case <-returned:
	case <-time.After(time.Until(by.Add(swSlack + time.Second + r.lag.Slack()))):
		t.Errorf("the call is still blocked %v after it must have returned (%s)", time.Since(by).Round(time.Millisecond), r.mode.name)
		r.heal()
		select {
		case <-returned:
		case <-time.After(15 * time.Second):
			t.Fatal("the call never returned")
		}
	}
	if late := start.Add(took).Sub(by); late > swSlack+r.lag.Slack() {
		t.Errorf("the call returned %v after it must have (%s; the machine's worst delay meanwhile: %v): %v", late.Round(time.Millisecond), r.mode.name, r.lag.Worst(), cerr)
	}
	t.Logf("the call returned after %v: %v", took.Round(time.Millisecond), cerr)
	r.checkWant(cctx, cerr)
	if cerr == nil && cctx != nil && !row.release {
		assert.NoError(t, cctx.Err(), "a call that succeeds returns a live context")
		ops := r.mine()
		owner := "A:call"
		if row.through {
			owner = swMain
		}
		r.granted(false, owner, "the call's hold", cctx, func() error { return ops.unlock(cctx) })
	}
	if row.atReturn != nil {
		row.atReturn(r, cerr)
	}
	if r.slow() {
		// A release may return before its script is written (the hold
		// ended with its context: it finishes in the background), so
		// the script may be on its way still.
		lag := startLag()
		defer lag.Stop()
		sent := time.Now()
		for r.rule != nil && r.rule.Fired() == 0 {
			if time.Since(sent) > 2*time.Second+lag.Slack() {
				t.Errorf("the call never sent its script (%v)", row.scripts)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// afterCall starts, as the call returns, the other waits again and (with
// the call's script held up) A's taking the lock again, while the script
// may still be on its way: taken before it lands, when that makes a
// difference. It returns a channel closed once A tried.
func (r *swRun) afterCall() <-chan struct{} {
	if r.slow() {
		// Renewals answer late too until the fault ends: a hold that
		// Redis lost meanwhile is not told by its next renewal before B
		// can see it lost (the hold's deadline is counted from when the
		// renewal was sent, so a live hold is not lost by this).
		r.renewals = r.hook.OnCommand(faultproxy.CommandRule{Args: swRenewal, Action: faultproxy.DelayReply(swDelay)})
	}
	retaken := make(chan struct{})
	go func() {
		defer close(retaken)
		if r.slow() {
			r.retake(time.Until(r.armedAt.Add(swDelay * 3 / 4)))
		}
	}()
	r.waiters("as the call returns")
	return retaken
}

// contend has B contend for the lock from retaken on (B does not compete
// with A's taking it again), until the function it returns is called.
func (r *swRun) contend(retaken <-chan struct{}) (stop func()) {
	stopB := make(chan struct{})
	var contending sync.WaitGroup
	if r.row.prim.rival != nil {
		contending.Add(1)
		go func() {
			defer contending.Done()
			select {
			case <-retaken:
			case <-stopB:
				return
			}
			r.contendB(stopB)
		}()
	}
	return sync.OnceFunc(func() { close(stopB); contending.Wait() })
}

// faultEnds waits for the fault to end (ends a link fault once the other
// waits ended), then checks the row's state after it.
func (r *swRun) faultEnds(retaken <-chan struct{}) {
	if r.slow() {
		delay := swDelay
		if r.mode.lost {
			delay = swLostDelay
		}
		// B has a moment to take the lock the late script may free.
		time.Sleep(time.Until(r.armedAt.Add(delay + swAfter)))
		r.renewals.Remove()
	} else {
		// The waits end while the link is down.
		waitGroup(&r.waits, swWaitCtx+swSlack+time.Second)
		r.heal()
		time.Sleep(50 * time.Millisecond)
		r.retake(swWaitCtx)
	}
	<-retaken
	// A hold may be lost to a long fault, and is then told: the row's
	// state is checked after a short one.
	short := r.slow() || time.Since(r.armedAt) < swLease/2
	if !waitGroup(&r.waits, 2*time.Second) || !waitGroup(&r.mids, holds.ReleaseTimeout+2*time.Second) {
		r.t.Error("a wait of the run is still blocked")
	}
	if r.row.after != nil && short && !r.mode.lost {
		r.row.after(r)
	}
}

// giveUp has A give up every hold it has; B then gets the lock within a
// lease.
func (r *swRun) giveUp() {
	r.mu.Lock()
	holds := append([]*swHold(nil), r.holds...)
	r.mu.Unlock()
	for i := len(holds) - 1; i >= 0; i-- {
		if h := holds[i]; h.release != nil {
			if err := h.release(); err != nil {
				r.t.Logf("giving up %s: %v", h.who, err)
			}
		}
	}
	releasedAt := time.Now()
	if r.row.prim.rival != nil {
		eventually(r.t, 2*swLease+time.Second, "B getting the lock once A gave everything up", func() bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			return len(r.bWins) > 0 && r.bWins[len(r.bWins)-1].After(releasedAt)
		})
	}
}

// nothingLeft checks that, after the leases, Redis keeps nothing but what
// stays by design, and that A waits for nothing.
func (r *swRun) nothingLeft() {
	deadline := time.Now().Add(2*swLease + 1500*time.Millisecond)
	for {
		s := r.state()
		if s == r.base {
			break
		}
		if time.Now().After(deadline) {
			r.t.Errorf("left in Redis after the leases (%s):\n%s\nwant:\n%s", r.mode.name, s, r.base)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	assert.Zero(r.t, semWaiters(r.a), "no wait left")
}
