package redisync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The checks of the abandonment sweep (sweep_abandon_test.go): the
// grants of both clients, the other waits, the outcome of the call, what
// Redis keeps.

// holdsOnce checks that the hold of hctx is live and that Redis counts n
// holds (permits) of it, with those that other waits took through it,
// once what the call took was given back (a lagging count: some).
func (r *swRun) holdsOnce(hctx context.Context, n int) {
	t := r.t
	t.Helper()
	r.mu.Lock()
	n += r.more
	r.mu.Unlock()
	if r.lostMeanwhile(hctx) {
		return
	}
	require.NoError(t, hctx.Err(), "the hold is live after the fault (cause: %v, ended %v after the fault was armed)",
		context.Cause(hctx), r.ended(hctx))
	count := r.mine().count
	var got int
	var err error
	deadline := time.Now().Add(time.Second)
	for {
		got, err = count(hctx)
		done := err == nil && (got == n || r.row.prim.lagging && got > 0)
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if hctx.Err() != nil {
		// The hold ended meanwhile, and its holder was told: what Redis
		// has of it no longer matters.
		t.Logf("the hold ended while its count was read: %v", context.Cause(hctx))
		return
	}
	require.NoError(t, err)
	if r.row.prim.lagging {
		assert.Positive(t, got, "the hold is in Redis")
		return
	}
	assert.Equal(t, n, got, "holds of the hold in Redis")
}

// lostMeanwhile reports (and logs) that the hold of hctx was lost, and its
// holder told: on a loaded machine its renewals may not have kept up. What
// the row checks of it after the fault can then not be checked (the
// exclusion checks still apply).
func (r *swRun) lostMeanwhile(hctx context.Context) bool {
	if !errors.Is(context.Cause(hctx), ErrLeaseLost) {
		return false
	}
	r.t.Logf("the hold was lost %v after the fault was armed, and told: its state after the fault is not checked", r.ended(hctx))
	return true
}

// granted records a grant to owner, checking that no hold it excludes is
// live: the others' contexts are read first, then the new hold's, so a
// live one means both were live when the others were read. A hold of B
// excludes every hold of A; of an exclusive lock, every other owner's.
func (r *swRun) granted(b bool, owner, who string, hctx context.Context, release func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var live []string
	for _, h := range r.holds {
		if (h.b != b || !r.row.prim.shared && h.owner != owner) && h.ctx.Err() == nil {
			live = append(live, h.who)
		}
	}
	if len(live) > 0 && hctx.Err() == nil {
		r.t.Errorf("two live holders: %s was granted the lock while %v still live (%s)", who, live, r.mode.name)
	}
	r.holds = append(r.holds, &swHold{who: who, owner: owner, b: b, ctx: hctx, release: release})
	r.watch(hctx)
}

// waitGone waits until Redis is back to base: what a hold that ended left
// was given back.
func (r *swRun) waitGone(base string) {
	r.t.Helper()
	eventually(r.t, 2*time.Second, "the ended hold given back", func() bool { return r.state() == base })
}

// state is Redis's content without what stays by design.
func (r *swRun) state() string {
	s := redisState(r.t, r.e)
	if r.row.prim.residue != nil {
		for _, k := range r.row.prim.residue(swName) {
			s = dropLine(s, k)
		}
	}
	return s
}

// dropLine removes from a redisState the line of key k.
func dropLine(s, k string) string {
	var out []byte
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		line := s[:i]
		if i < len(s) {
			i++
		}
		if len(line) <= len(k) || line[:len(k)+1] != k+" " {
			out = append(out, s[:i]...)
		}
		s = s[i:]
	}
	return string(out)
}

// wait runs lock in a goroutine, with its own context of swWaitCtx from
// parent, and checks that it ends within it.
func (r *swRun) wait(who string, through bool, parent context.Context, lock func(context.Context) (context.Context, error), unlock func(context.Context) error) {
	r.waits.Add(1)
	go func() {
		defer r.waits.Done()
		ctx, cancel := context.WithTimeout(parent, swWaitCtx)
		defer cancel()
		deadline, _ := ctx.Deadline()
		hctx, err := lock(ctx)
		if late := time.Since(deadline); late > swSlack+r.lag.Slack() {
			r.t.Errorf("%s returned %v after its context ended (%s; the machine's worst delay meanwhile: %v): %v",
				who, late.Round(time.Millisecond), r.mode.name, r.lag.Worst(), err)
		}
		if err == nil && hctx != nil {
			owner := who
			if through {
				owner = swMain
			}
			r.granted(false, owner, who, hctx, func() error { return unlock(hctx) })
			if through {
				r.mu.Lock()
				r.more++
				r.mu.Unlock()
			}
		}
	}()
}

// waiters starts the other waits: another goroutine's fresh Lock, and a
// re-entry through the hold the call goes through.
func (r *swRun) waiters(when string) {
	ops := r.mine()
	r.wait("another goroutine's wait "+when, false, context.Background(), ops.lock, ops.unlock)
	if r.main != nil && r.row.prim.reenters {
		r.wait("a re-entry through the hold "+when, true, r.main, ops.lock, ops.unlock)
	}
}

// retake has A take the lock again as a fresh owner, waiting at most
// wait (for the other waits of A, which may hold it meanwhile).
func (r *swRun) retake(wait time.Duration) {
	ops := r.mine()
	var hctx context.Context
	var err error
	switch {
	case ops.tryFor != nil && wait > 0:
		hctx, err = ops.tryFor(r.bg(), wait)
	case ops.try != nil:
		hctx, err = ops.try(r.bg())
	default:
		return
	}
	r.t.Logf("A took the lock again %v after the fault was armed: %v", time.Since(r.armedAt).Round(time.Millisecond), err)
	if err == nil {
		r.granted(false, "A:retake", "A's fresh hold taken after the call", hctx, func() error { return ops.unlock(hctx) })
	}
}

// contendB has B wait for the lock (the rival way) throughout the run,
// giving it up as soon as it gets it, until stop is closed: B is woken by
// every release, so it gets the lock the moment Redis frees it.
func (r *swRun) contendB(stop <-chan struct{}) {
	ops := r.rival()
	all, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	go func() {
		select {
		case <-stop:
			cancelAll()
		case <-all.Done():
		}
	}()
	for n := 1; all.Err() == nil; n++ {
		// One wait until it gets it: a wait that ends and starts again
		// would miss a release made meanwhile, until its bound.
		ctx, cancel := context.WithCancel(all)
		hctx, err := ops.lock(ctx)
		if err == nil {
			r.granted(true, fmt.Sprintf("B:%d", n), fmt.Sprintf("B's hold #%d", n), hctx, nil)
			if err := ops.unlock(hctx); err != nil && all.Err() == nil && !(r.row.forces && errors.Is(err, ErrLeaseLost)) {
				r.t.Errorf("B's release: %v", err)
			}
			r.mu.Lock()
			r.bWins = append(r.bWins, time.Now())
			r.mu.Unlock()
		}
		cancel()
		if err == nil {
			select {
			case <-all.Done():
			case <-time.After(swPoll):
			}
		}
	}
}

// checkWant checks the call's error against the row's documented outcome.
func (r *swRun) checkWant(hctx context.Context, err error) {
	t := r.t
	if r.mode.lost {
		// A call through a hold lost while its script was on its way
		// reports the loss; it never succeeds through it.
		if err == nil {
			t.Errorf("a call through a hold lost while its script was on its way returned nil (its context done: %v)", hctx != nil && hctx.Err() != nil)
			return
		}
		assert.ErrorIs(t, err, ErrLeaseLost, "a call through a hold lost meanwhile")
		return
	}
	reset := r.mode.link == "reset"
	switch r.row.want {
	case wantWait:
		assert.ErrorIs(t, err, context.Canceled, "the error of the call's context")
	case wantCtx:
		if reset {
			assert.Error(t, err)
		} else {
			assert.ErrorIs(t, err, context.Canceled, "the error of the call's context")
		}
	case wantNotAcquired:
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, context.Canceled)
	case wantRelease:
		if r.slow() {
			assert.NoError(t, err)
		}
	case wantNil:
		assert.NoError(t, err)
	}
}
