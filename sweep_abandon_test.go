package redisync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/lua"
)

// The abandonment sweep (issue 24, "tests that find the next ones"): every
// public operation that takes a context is called while its script is
// held up, and its context ends mid-flight (swCut after the fault caught
// the call); then every promise is checked. One row per operation
// (swRows); each row runs in every mode (swModes), each run on a
// redis-server of its own:
//
//   - late-reply: the script runs in Redis, its reply comes swDelay late;
//   - late-send: the script is held up swDelay before it is written (in
//     the hooks' seam), and its caller leaves meanwhile: the engine never
//     writes it then (a call not written when its caller leaves is never
//     written);
//   - silent: the caller's link to Redis goes silent (a partition) until
//     the call and the other waits have returned;
//   - reset: the link resets every connection, again and again, so that
//     nothing gets through;
//   - lease-lost (calls through a hold only): the hold has a fixed lease,
//     which ends while the script's reply is held up; the call's context
//     carries the hold but does not end with it, nor on its own.
//
// Client A (through a proxy, with a fault hook) makes the call; client B
// (another process) takes the lock the rival way. Checked in every run:
//
//   - the call returns within its context, or within its documented bound
//     (a release: holds.ReleaseTimeout), with its documented error (swWant);
//   - never two live holders: B waits for the lock throughout the run and
//     gives it up at once; whenever one of them is granted it, every hold
//     context the other client handed out must already be done, and of an
//     exclusive lock, those of A's other owners too (A takes the lock
//     again right after the call, while its script may be on its way);
//   - other waits (another goroutine's Lock, a re-entry through the same
//     hold, each with its own short context), started while the call is
//     in flight and again as it returns, end within their context;
//   - once the fault is over, the row's state (a hold still live, its
//     count); once A gave everything up, B gets the lock within a lease;
//   - after the leases, nothing is left in Redis but what stays by design
//     (a Semaphore's total, an Election's term counter).
//
// Lateness is measured past the scheduler's own delay on a loaded
// machine (swRun.lag: the worst seen through the run, redistest.LagHops times). A
// new operation joins by one row.

const (
	swLease     = 2 * time.Second        // every Client's watchdog timeout
	swWaiters   = time.Second            // FairMutex's and RWMutex's WithWaiterTimeout
	swCut       = 50 * time.Millisecond  // the call's context ends this long after the fault hit it
	swCallCtx   = 100 * time.Millisecond // TryLockFor's wait
	swDelay     = 600 * time.Millisecond // how late the script answers, or arrives
	swAfter     = 300 * time.Millisecond // how long a held-up script's effect is watched
	swWaitCtx   = 100 * time.Millisecond // the other waits' contexts
	swSlack     = 150 * time.Millisecond // how late past its bound a call may return
	swLostLease = time.Second            // lease-lost: the hold's fixed lease (outlasts the setup beside busy loops: 300ms did not)
	swLostDelay = 2 * time.Second        // lease-lost: how late the reply comes
	swLostCtx   = 3 * time.Second        // lease-lost: how long the call may take
	swPoll      = 20 * time.Millisecond  // B's pause between two holds
	swSettle    = 50 * time.Millisecond  // for a call that waits to be idle
	swParallel  = 24                     // runs at once
	swName      = "sweep"
)

// swWant is a documented outcome of an abandoned call.
type swWant int

const (
	// wantWait: an error wrapping the context's; the call waits, so a
	// failing network does not end it first.
	wantWait swWant = iota
	// wantCtx: the context's error; a call that does not wait may also end
	// with the network's error when the link resets.
	wantCtx
	// wantNotAcquired: TryLockFor's wait ran out (ErrNotAcquired).
	wantNotAcquired
	// wantRelease: a release works with a cancelled context: nil; with the
	// link down, nil or an error (the release is retried in the
	// background, and the lease frees the lock at the latest).
	wantRelease
	// wantNil: nil whatever happens (a release of a hold that ended with
	// its context: redisync released it then).
	wantNil
)

// swRow is one operation of the sweep.
type swRow struct {
	name    string
	prim    *swPrim
	scripts []*lua.Script // the call's scripts: the first one sent after arming is held up
	// setup makes the state the call starts from (holds taken through r).
	setup func(r *swRun)
	// call makes the call, with a context made by r.cut, which ends once
	// the fault holds the call up.
	call func(r *swRun) (context.Context, error)
	// mid, when set, arms the fault itself, while the call is in flight
	// (a call that waits first); otherwise the fault is armed before it.
	mid func(r *swRun, arm func())
	// bounded: the call's wait bound (swCallCtx, TryLockFor's) ends it,
	// not its context.
	bounded bool
	// release: the call works with a cancelled context; its bound is
	// holds.ReleaseTimeout.
	release bool
	// through: the call goes through a hold (the lease-lost mode applies).
	through bool
	// forces: the call is a ForceUnlock, whose script, left on its way,
	// frees whoever holds the lock when it runs (B too: B's release then
	// says its lease was lost, as documented).
	forces bool
	want   swWant
	// atReturn checks what must hold when the call returns; after, what
	// must hold once the fault is over (when the fault was short).
	atReturn func(r *swRun, err error)
	after    func(r *swRun)
	cleanup  func(r *swRun)
}

// TestSweepAbandon runs every row in every mode, each run on a Redis of
// its own. The runs mostly wait, on short leases: they run swParallel at
// a time, outside the -parallel limit, the releases first (a release
// held up by a silent link may take its whole bound, holds.ReleaseTimeout).
func TestSweepAbandon(t *testing.T) {
	t.Parallel()
	slots := make(chan struct{}, swParallel)
	var rows sync.WaitGroup
	for _, releases := range []bool{true, false} {
		for i := range swRows {
			row := &swRows[i]
			if row.release != releases {
				continue
			}
			rows.Add(1)
			go func() {
				defer rows.Done()
				t.Run(row.name, func(t *testing.T) {
					var runs sync.WaitGroup
					for _, m := range swModes {
						if m.lost && !row.through {
							continue
						}
						runs.Add(1)
						go func() {
							defer runs.Done()
							t.Run(m.name, func(t *testing.T) {
								slots <- struct{}{}
								defer func() { <-slots }()
								runSweep(t, row, m)
							})
						}()
					}
					runs.Wait()
				})
			}()
			time.Sleep(time.Millisecond) // in order, roughly
		}
	}
	rows.Wait()
}

// The rows: one per operation.
var swRows = []swRow{
	swLock("Mutex.Lock", swMutex),
	swAfterWait("Mutex.Lock (after a wait)", swMutex),
	swHandedOver("Mutex.Lock (handed over in the Client)", swMutex),
	swTry("Mutex.TryLock", swMutex),
	swTryFor("Mutex.TryLockFor", swMutex),
	swReenter("Mutex.Lock (re-entry)", swMutex),
	swUnlock("Mutex.Unlock", swMutex),
	swUnlockReentry("Mutex.Unlock (a re-entry)", swMutex),
	swUnlockEnded("Mutex.Unlock (the hold ended with its context)", swMutex),
	swForce("Mutex.ForceUnlock (held)", swMutex, true),
	swForce("Mutex.ForceUnlock (free)", swMutex, false),

	swLock("FairMutex.Lock", swFair),
	swAfterWait("FairMutex.Lock (after a wait)", swFair),
	swTry("FairMutex.TryLock", swFair),
	swTryFor("FairMutex.TryLockFor", swFair),
	swReenter("FairMutex.Lock (re-entry)", swFair),
	swUnlock("FairMutex.Unlock", swFair),
	swUnlockReentry("FairMutex.Unlock (a re-entry)", swFair),
	swUnlockEnded("FairMutex.Unlock (the hold ended with its context)", swFair),
	swForce("FairMutex.ForceUnlock (held)", swFair, true),
	swForce("FairMutex.ForceUnlock (free)", swFair, false),

	swLock("RWMutex.Lock", swWrite),
	swAfterWait("RWMutex.Lock (after a wait)", swWrite),
	swTry("RWMutex.TryLock", swWrite),
	swTryFor("RWMutex.TryLockFor", swWrite),
	swReenter("RWMutex.Lock (re-entry)", swWrite),
	swUnlock("RWMutex.Unlock", swWrite),
	swUnlockReentry("RWMutex.Unlock (a re-entry)", swWrite),
	swUnlockEnded("RWMutex.Unlock (the hold ended with its context)", swWrite),
	swForce("RWMutex.ForceUnlock (held)", swWrite, true),
	swForce("RWMutex.ForceUnlock (free)", swWrite, false),
	swLock("RWMutex.RLock", swRead),
	swAfterWait("RWMutex.RLock (after a wait)", swRead),
	swTry("RWMutex.TryRLock", swRead),
	swTryFor("RWMutex.TryRLockFor", swRead),
	swReenter("RWMutex.RLock (re-entry)", swRead),
	swDowngrade("RWMutex.RLock (downgrade)"),
	swUnlock("RWMutex.RUnlock", swRead),
	swUnlockReentry("RWMutex.RUnlock (a re-entry)", swRead),
	swUnlockEnded("RWMutex.RUnlock (the hold ended with its context)", swRead),

	swLock("Semaphore.Acquire", swSem),
	swAfterWait("Semaphore.Acquire (after a wait)", swSem),
	swTry("Semaphore.TryAcquire", swSem),
	swTryFor("Semaphore.TryAcquireFor", swSem),
	swReenter("Semaphore.Acquire (more permits through a hold)", swSem),
	swUnlock("Semaphore.Release", swSem),
	swUnlockReentry("Semaphore.Release (part of a hold)", swSem),
	swUnlockEnded("Semaphore.Release (the hold ended with its context)", swSem),

	swCountDown("CountDownLatch.CountDown"),

	swLock("Election.Campaign", swElect),
	swAfterWait("Election.Campaign (after a wait)", swElect),
	swUnlock("Election.Resign", swElect),
	swUnlockEnded("Election.Resign (the leadership ended with its context)", swElect),

	swLock("MultiLock.Lock", swMulti),
	swAfterWait("MultiLock.Lock (after a wait)", swMulti),
	swTry("MultiLock.TryLock", swMulti),
	swTryFor("MultiLock.TryLockFor", swMulti),
	swReenter("MultiLock.Lock (re-entry)", swMulti),
	swUnlock("MultiLock.Unlock", swMulti),
	swUnlockReentry("MultiLock.Unlock (a re-entry)", swMulti),
	swUnlockEnded("MultiLock.Unlock (the hold ended with its context)", swMulti),
}

// The shapes of the rows: an operation of a primitive, from a state.

// swLock: a first acquisition of a free lock (Lock, RLock, Acquire,
// Campaign).
func swLock(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.lockScript}, want: wantWait,
		call: func(r *swRun) (context.Context, error) {
			return r.mine().lock(r.cut(context.Background()))
		}}
}

// swAfterWait: a first acquisition whose attempt after its wait is held
// up: B holds the lock, the call waits, then the fault is armed and B
// releases.
func swAfterWait(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.lockScript}, want: wantWait,
		setup: func(r *swRun) {
			hctx, err := r.rival().lock(r.bg())
			require.NoError(r.t, err)
			r.granted(true, "B:setup", "B's hold in the setup", hctx, nil)
			r.bHold = hctx
		},
		call: func(r *swRun) (context.Context, error) {
			return r.mine().lock(r.cut(context.Background()))
		},
		mid: func(r *swRun, arm func()) {
			r.waitingA()
			// Not the attempt a wait makes once subscribed: the one after
			// B's release is to be held up. An attempt the fault missed
			// could reach Redis after B's release (A's link is slower).
			time.Sleep(swSettle)
			arm()
			r.quiet()
			assert.NoError(r.t, r.rival().unlock(r.bHold), "B's release")
		}}
}

// swHandedOver: a Mutex wait that its Client's holder hands the lock to
// (cohort handoff), whose context ends while the handoff is held up.
func swHandedOver(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{lua.Handoff}, want: wantWait,
		setup: func(r *swRun) {
			// The handoff script (a hand-over in memory sends nothing
			// to hold up): what a run's last handoff, a fenced lock,
			// WithReplicaAck and WithLease use.
			r.a.scriptHandoff = true
			r.main = r.holdA("A's hold in the setup")
		},
		call: func(r *swRun) (context.Context, error) {
			return r.mine().lock(r.cut(context.Background()))
		},
		mid: func(r *swRun, arm func()) {
			channel := r.a.Mutex(swName).channel
			eventually(r.t, 5*time.Second, "the call waiting, idle", func() bool { return advIdleWaiters(r.a, channel) == 1 })
			arm()
			start := time.Now()
			err := r.mine().unlock(r.main)
			if took := time.Since(start); took > holds.ReleaseTimeout+swSlack+r.lag.Slack() {
				r.t.Errorf("the Unlock handing over returned after %v: %v", took.Round(time.Millisecond), err)
			}
			if r.slow() {
				assert.NoError(r.t, err, "the Unlock handing over")
			}
		}}
}

// swTry: an acquisition that does not wait.
func swTry(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.lockScript}, want: wantCtx,
		call: func(r *swRun) (context.Context, error) {
			return r.mine().try(r.cut(context.Background()))
		}}
}

// swTryFor: an acquisition whose wait bound (not its context) ends
// mid-flight.
func swTryFor(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.lockScript}, want: wantNotAcquired, bounded: true,
		call: func(r *swRun) (context.Context, error) {
			return r.mine().tryFor(r.bg(), swCallCtx)
		}}
}

// swReenter: a re-entry (for a Semaphore, more permits) through a hold.
func swReenter(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.lockScript}, want: wantCtx, through: true,
		setup: func(r *swRun) { r.main = r.holdA("A's hold in the setup") },
		call: func(r *swRun) (context.Context, error) {
			return r.mine().lock(r.cut(r.via()))
		},
		after: func(r *swRun) { r.holdsOnce(r.main, 1) }}
}

// swUnlock: the release of a hold's last count.
func swUnlock(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.unlockScript}, want: wantRelease, release: true,
		setup: func(r *swRun) { r.main = r.holdA("A's hold in the setup") },
		call: func(r *swRun) (context.Context, error) {
			return nil, r.mine().unlock(r.cut(r.main))
		},
		atReturn: func(r *swRun, _ error) {
			assert.Error(r.t, r.main.Err(), "the hold's context is done when its last release returns")
		}}
}

// swUnlockReentry: the release of one count of a hold that has two.
func swUnlockReentry(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.unlockScript}, want: wantRelease, release: true,
		setup: func(r *swRun) {
			r.main = r.holdA("A's hold in the setup")
			r.reenterA("A's re-entry in the setup", r.main)
		},
		call: func(r *swRun) (context.Context, error) {
			return nil, r.mine().unlock(r.cut(r.main))
		},
		after: func(r *swRun) {
			if r.slow() {
				r.holdsOnce(r.main, 1)
				return
			}
			// The link was down: the release may not have reached Redis.
			if !r.lostMeanwhile(r.main) {
				assert.NoError(r.t, r.main.Err(), "the hold is live")
			}
		}}
}

// swUnlockEnded: the release of a hold that ended with the context it was
// taken with (and that redisync released then).
func swUnlockEnded(name string, p *swPrim) swRow {
	return swRow{name: name, prim: p, scripts: []*lua.Script{p.dropScript}, want: wantNil, release: true,
		setup: func(r *swRun) {
			ctx, cancel := context.WithCancel(context.Background())
			ops := r.mine()
			hctx, err := ops.lock(ctx)
			require.NoError(r.t, err)
			r.granted(false, swMain, "A's hold in the setup", hctx, nil)
			r.main = hctx
			cancel()
			r.waitGone(r.base)
		},
		call: func(r *swRun) (context.Context, error) {
			return nil, r.mine().unlock(r.main)
		}}
}

// swForce: ForceUnlock, of a lock A holds (held) or of a free one.
func swForce(name string, p *swPrim, held bool) swRow {
	row := swRow{name: name, prim: p, scripts: []*lua.Script{p.forceScript}, want: wantCtx, forces: true,
		call: func(r *swRun) (context.Context, error) {
			_, err := p.force(r.cut(context.Background()), r.a, swName)
			return nil, err
		}}
	if held {
		row.setup = func(r *swRun) { r.main = r.holdA("A's hold in the setup") }
		row.atReturn = func(r *swRun, _ error) {
			assert.ErrorIs(r.t, context.Cause(r.main), ErrLeaseLost, "the holder in the process that forced is told before ForceUnlock returns")
		}
	}
	return row
}

// swDowngrade: an RWMutex read lock taken through a write hold.
func swDowngrade(name string) swRow {
	return swRow{name: name, prim: swRead, scripts: []*lua.Script{lua.RWRLock}, want: wantWait, through: true,
		setup: func(r *swRun) {
			w := swWriteOps(r.a, swName, r.opts)
			hctx, err := w.lock(r.bg())
			require.NoError(r.t, err)
			r.granted(false, swMain, "A's write hold in the setup", hctx, func() error { return w.unlock(hctx) })
			r.main = hctx
		},
		call: func(r *swRun) (context.Context, error) {
			return r.mine().lock(r.cut(r.via()))
		},
		after: func(r *swRun) {
			if r.lostMeanwhile(r.main) {
				return
			}
			assert.NoError(r.t, r.main.Err(), "the write hold is live")
			rw := r.a.RWMutex(swName)
			eventually(r.t, time.Second, "no read hold left by the abandoned downgrade", func() bool {
				n, err := rwReaders(context.Background(), rw)
				return err == nil && n == 0
			})
		}}
}

// swCountDown: a CountDown of a latch at 2.
func swCountDown(name string) swRow {
	return swRow{name: name, prim: swLatch, scripts: []*lua.Script{lua.LatchCountDown}, want: wantCtx,
		setup: func(r *swRun) {
			ok, err := r.a.CountDownLatch(swName).TrySetCount(context.Background(), 2)
			require.NoError(r.t, err)
			require.True(r.t, ok)
		},
		call: func(r *swRun) (context.Context, error) {
			return nil, r.a.CountDownLatch(swName).CountDown(r.cut(context.Background()))
		},
		after: func(r *swRun) {
			count := func() int64 {
				n, err := r.a.CountDownLatch(swName).Count(context.Background())
				require.NoError(r.t, err)
				return n
			}
			switch r.mode.name {
			case "late-reply":
				eventually(r.t, time.Second, "the abandoned CountDown counted", func() bool { return count() < 2 })
				assert.EqualValues(r.t, 1, count(), "the abandoned CountDown counted once")
			case "late-send":
				time.Sleep(swDelay) // past when it would have been written
				assert.EqualValues(r.t, 2, count(), "a CountDown whose caller left before it was written is never written")
			default:
				assert.Contains(r.t, []int64{1, 2}, count(), "counted at most once")
			}
		},
		cleanup: func(r *swRun) {
			_, err := r.a.CountDownLatch(swName).Delete(context.Background())
			assert.NoError(r.t, err)
		}}
}
