package redisync

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"

	"github.com/redis/go-redis/v9"
)

// MinLease is the shortest lease redisync accepts (WithLease,
// WithWatchdogTimeout): below it, Redis's millisecond clock and a timer's
// latency leave no room to tell a holder before its lease runs out.
const MinLease = 20 * time.Millisecond

// MaxLease is the longest lease redisync accepts: a year.
const MaxLease = 365 * 24 * time.Hour

// checkLease refuses a lease (what names it) outside MinLease..MaxLease.
func checkLease(what string, d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %s %v is not positive", ErrInvalid, what, d)
	case d < MinLease:
		return fmt.Errorf("%w: %s %v is below MinLease (%v)", ErrInvalid, what, d, MinLease)
	case d > MaxLease:
		return fmt.Errorf("%w: %s %v is above MaxLease (%v)", ErrInvalid, what, d, MaxLease)
	}
	return nil
}

// spec is what a lock handle tells the hold machinery about itself.
type spec struct {
	ref     lease.Ref
	lease   time.Duration
	renewed bool
	fenced  bool // WithFencing: first acquisitions get a token
	wrap    func(error) error

	parts  bool        // a hold is on several locks (see hold.parts)
	covers []lease.Ref // those locks (see hold.covers)
}

// errUntrusted reports a grant that could not be trusted: its reply came
// after its lease could be trusted (Redis or the network stalled), or a
// ForceUnlock in this process came between its script and its reply. It
// was given back; the caller tries again as a new owner, since that
// give-back may reach Redis after its next attempt.
var errUntrusted = fmt.Errorf("%w: the grant could not be trusted (a stalled reply, or a ForceUnlock meanwhile) and was given back", ErrNotAcquired)

// errNewOwner makes a FairMutex wait start again as a new owner, after a
// grant it could not trust (errUntrusted): its queue entry and channel go
// with the owner.
var errNewOwner = errors.New("redisync: wait again as a new owner")

func (c *Client) stamp(s *spec) lease.Stamp {
	return lease.Stamp{Sent: time.Now(), Epoch: c.wd.Epoch(s.ref, s.covers)}
}

// grant turns a first acquisition, made by a script sent at sent, into a
// hold of field bound to parent (it ends when parent does), with fencing
// token token (0: none). renew and
// release are the hold's scripts. It gives the acquisition back and fails
// when it cannot be trusted (errUntrusted), when parent
// has ended, or when the client is closed. ends are run when the hold ends;
// when there is no hold, the caller runs them.
func (c *Client) grant(s *spec, parent context.Context, field string, count int, token int64, start time.Time, st lease.Stamp,
	renew, release call, ends ...func() bool) (context.Context, error) {
	h := c.newHold(s, parent, field, count, token, ends)
	h.One = [2]call{renew, release}
	h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	return c.grantHold(s, h, start, st)
}

// grantAll is grant for a hold on several slots: renew and release have
// one call per slot, and st is the stamp of the attempt's first script
// (its leases count from then). tokens are a fenced MultiLock's, by name.
func (c *Client) grantAll(s *spec, parent context.Context, field string, count int, token int64, tokens map[string]int64,
	start time.Time, st lease.Stamp, renew, release []call, ends ...func() bool) (context.Context, error) {
	h := c.newHold(s, parent, field, count, token, ends)
	h.Tokens = tokens
	h.Renew, h.Release = renew, release
	return c.grantHold(s, h, start, st)
}

func (c *Client) newHold(s *spec, parent context.Context, field string, count int, token int64, ends []func() bool) *lease.Hold {
	h := &lease.Hold{
		Ref: s.ref, Field: field, Scope: scopeOf(parent), Lease: s.lease, Renewed: s.renewed, Token: token,
		Parts: s.parts, Covers: s.covers, Parent: parent, Count: count, Taken: time.Now(),
		Mu: lease.NewHoldLock(),
	}
	for _, end := range ends {
		h.OnEnd(end)
	}
	return h
}

// grantHold is grant's and grantAll's common part.
func (c *Client) grantHold(s *spec, h *lease.Hold, start time.Time, st lease.Stamp) (context.Context, error) {
	sent, parent := st.Sent, h.Parent
	giveUp := func(err error) (context.Context, error) {
		c.cleanup(h.Lease, h.Release...)
		return nil, err
	}
	if lease.Expired(lease.Deadline(sent, s.lease)) {
		return giveUp(errUntrusted)
	}
	if err := parent.Err(); err != nil {
		return giveUp(err)
	}
	if err := c.wd.Add(h, st); err != nil {
		return giveUp(err)
	}
	h.OnEnd(context.AfterFunc(parent, func() {
		if c.wd.End(h, lease.EndParent, context.Cause(parent)) {
			c.giveBack(h)
		}
	}))
	if c.obs.Acquired != nil {
		c.obs.Acquired(h.Parent, HoldEvent{Kind: s.ref.Kind, Name: s.ref.Name, Wait: h.Taken.Sub(start), Handoff: st.Handoff})
	}
	return h.Ctx, nil
}

// reenter acquires once more through h, the live hold ctx carries,
// waiting as long as wctx lasts (with wait, riding out a Redis that is
// not ready, see notReady): build makes the script's call for h's
// count, parse reads its reply (the new count, or lost when Redis no
// longer has the hold), and undo makes the call that takes back a
// re-entry to count n, for a re-entry that was not acknowledged
// (WithReplicaAck) or whose caller left. A handle whose lease or fencing
// differs from the hold's is refused, changing nothing.
func (c *Client) reenter(ctx, wctx context.Context, wait bool, s *spec, h *lease.Hold,
	build func(count int) call, parse func([]int64) (n int, lost bool), undo func(n int) call) (context.Context, error) {
	return c.reenterBy(ctx, wctx, s, h, func() ([]int64, error) {
		return c.underHold(wctx, wait, h, build, func(v []int64) {
			if v[0] == 1 {
				c.undoHeld(undo(int(v[1])))
			}
		})
	}, parse, func(n int) error { return c.undoUnder(wctx, h, undo(n)) })
}

// reenterBy is reenter with the sending step given: send runs the
// re-entry under h's lock as underHold (or underHoldAll) does, and undo
// takes back a re-entry to count n that was not acknowledged, under h's
// lock, which send left held for it (see undoUnder).
func (c *Client) reenterBy(ctx, wctx context.Context, s *spec, h *lease.Hold,
	send func() ([]int64, error), parse func([]int64) (n int, lost bool), undo func(n int) error) (context.Context, error) {
	if h.Lease != s.lease || h.Renewed != s.renewed {
		return nil, s.wrap(fmt.Errorf("%w: the context holds it with a %s, this handle asks for a %s",
			ErrInvalid, leaseText(h.Lease, h.Renewed), leaseText(s.lease, s.renewed)))
	}
	if (h.Token != 0) != s.fenced {
		return nil, s.wrap(fmt.Errorf("%w: the context holds it %s, this handle asks for it %s",
			ErrInvalid, fencingText(h.Token != 0), fencingText(s.fenced)))
	}
	r, err := send()
	var n int
	var lost bool
	if err == nil {
		if n, lost = parse(r); !lost {
			h.Count = n
			c.wd.Extend(h, h.LastSent)
		}
		h.Mu.Unlock()
	}
	switch {
	case errors.Is(err, errEnded):
		return nil, s.wrap(endedError(h))
	case notReplicated(err) != nil:
		nr := notReplicated(err)
		nr.undo = undo(nr.count())
		return nil, s.wrap(err)
	case err != nil:
		// wctx is TryLockFor's bound when it is not ctx: its end while
		// ctx lives is ErrNotAcquired, as for a first acquisition.
		return nil, s.wrap(waitError(err, ctx, wctx != ctx))
	case lost:
		c.lose(h, false) // told before the caller returns
		return nil, s.wrap(errLost)
	case !h.Live():
		return nil, s.wrap(endedError(h))
	}
	return h.ContextFor(ctx), nil
}

// errEnded reports, inside underHold, a hold found ended.
var errEnded = errors.New("redisync: the hold has ended")

// underHold sends the call build makes for h's count, under h's lock, and
// waits for the lock and for the reply as long as ctx lasts. On success it
// returns the reply with h's lock still held, for the caller to apply and
// unlock; on an error the lock is released (or was never taken, when ctx
// ended while waiting for it). When ctx ends during the call, the lock
// stays held until the reply comes, and then taken (unless nil) runs with
// the reply when the script took something, to give it back, and waits
// for that (undoHeld): the lock is released after it. A reply that took
// something the replicas did not acknowledge (WithReplicaAck) is a
// *notReplicatedError, returned with h's lock still held: the caller
// takes it back under the lock (undoUnder).
func (c *Client) underHold(ctx context.Context, wait bool, h *lease.Hold, build func(count int) call, taken func([]int64)) ([]int64, error) {
	for {
		if err := h.Mu.LockCtx(ctx); err != nil {
			return nil, err
		}
		if !h.Live() {
			h.Mu.Unlock()
			return nil, errEnded
		}
		k := build(h.Count)
		k.Takes = true
		r := c.tr.Do(ctx, k, func(r reply) {
			defer h.Mu.Unlock()
			if v, err := r.Int64Slice(); err == nil && taken != nil && len(v) >= 2 {
				taken(v)
			}
		})
		if r.Gone {
			return nil, r.Err()
		}
		v, err := c.acquired(r)
		if notReplicated(err) != nil {
			return nil, err // h's lock stays held for the undo
		}
		if err != nil {
			h.Mu.Unlock()
			var re redis.Error
			if wait && errors.As(err, &re) && notReady(err) {
				// Redis is loading its data or settling: the script did
				// not run; a waiting call rides it out.
				if err := sleepCtx(ctx, retryAfter); err != nil {
					return nil, err
				}
				continue
			}
			return nil, err
		}
		h.LastSent = r.Sent
		return v, nil
	}
}

// sleepCtx waits d, or less if ctx ends first (then it returns ctx's
// error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// underHoldAll is underHold for a hold on several slots: build makes one
// call per slot, all sent at once. It returns the first reply that did
// not take (the hold is gone there), else the first reply, with h's lock
// held; lastSent is the earliest of their sends. With wait, it rides out
// a Redis that is not ready, as underHold does. Its scripts set absolute
// counts, so a call abandoned when ctx ends, or one that ran where others
// failed, needs no give-back: the next call through the hold sets every
// count again, and the last release deletes the hold whatever its count.
// A *notReplicatedError is returned with h's lock held, as by underHold.
func (c *Client) underHoldAll(ctx context.Context, wait bool, h *lease.Hold, build func(count int) []call) ([]int64, error) {
	for {
		if err := h.Mu.LockCtx(ctx); err != nil {
			return nil, err
		}
		if !h.Live() {
			h.Mu.Unlock()
			return nil, errEnded
		}
		calls := build(h.Count)
		for i := range calls {
			calls[i].Takes = true
		}
		var first []int64
		var sent time.Time
		var ferr error
		for _, r := range c.tr.DoAll(ctx, calls) {
			v, err := c.acquired(r)
			switch {
			case err != nil:
				if ferr == nil || notReplicated(ferr) != nil || notReady(ferr) {
					ferr = err // an unknown outcome before a refused one
				}
			case first == nil || v[0] != 1 && first[0] == 1:
				first = v
			}
			if err == nil && (sent.IsZero() || r.Sent.Before(sent)) {
				sent = r.Sent
			}
		}
		if notReplicated(ferr) != nil {
			return nil, ferr // h's lock stays held for the undo
		}
		if ferr != nil {
			h.Mu.Unlock()
			var re redis.Error
			if wait && errors.As(ferr, &re) && notReady(ferr) {
				if err := sleepCtx(ctx, retryAfter); err != nil {
					return nil, err
				}
				continue
			}
			return nil, ferr
		}
		h.LastSent = sent
		return first, nil
	}
}

func leaseText(d time.Duration, renewed bool) string {
	if renewed {
		return fmt.Sprintf("watchdog lease of %v", d)
	}
	return fmt.Sprintf("fixed lease of %v (WithLease)", d)
}

// release gives up n of the holds that ctx carries (all of them when n is
// its count), within releaseTimeout whatever ctx says. send runs the
// release script with the count before it and returns 1 (holds remain), 2
// (the last was released, or was already gone and the call was written
// twice: see writes), goneAt (the last was already gone, lost) or 0
// (holds that should remain are gone: the lease was lost), and when it was
// sent.
//
// A release that does not answer within releaseTimeout (a silent link)
// returns an error: the last one has ended the hold already, and is tried
// again in the background (Redis frees it at its lease's end at the
// latest); one that is not the last (sent by releaseBy) keeps h's lock
// until its reply comes, and is counted then (see pending), so that no
// later script through the hold is overtaken by it. A release that cannot
// have h's lock within releaseTimeout (an earlier call through the hold
// keeps it, waiting for its reply) changes nothing and returns an error.
func (c *Client) release(ctx context.Context, s *spec, n int, send func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error)) error {
	h := carried(ctx, s.ref)
	if h == nil {
		return s.wrap(fmt.Errorf("%w (the context carries no hold of it)", ErrNotHeld))
	}
	ctx, cancel := context.WithTimeout(detach(ctx), releaseTimeout)
	defer cancel()
	if err := h.Mu.LockCtx(ctx); err != nil {
		return s.wrap(fmt.Errorf("redisync: released nothing: the hold is busy with an earlier call whose reply has not come within %v: %w", releaseTimeout, err))
	}
	var p *pending // a release that is not the last
	defer func() {
		if p == nil || !p.left {
			h.Mu.Unlock()
		}
	}()
	if !h.Live() {
		return c.afterEnd(ctx, s, h)
	}
	count := h.Count
	if n > count {
		return s.wrap(fmt.Errorf("%w (release %d, %d held)", ErrNotHeld, n, count))
	}
	last := n == count
	if last {
		// Tell everyone sharing the hold before the lock can be free;
		// renewals stop before the script is sent, so none follows it.
		c.wd.End(h, lease.EndUnlocked, nil)
	} else {
		p = &pending{c: c, h: h, count: count, n: n}
		ctx = context.WithValue(ctx, pendingKey{}, p)
	}
	reply, sent, err := send(ctx, h, count)
	switch {
	case err != nil:
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			then := "the hold counts it once its reply comes"
			if last {
				then = "the lock is released in the background, or by its lease"
			}
			err = fmt.Errorf("redisync: the release had no reply within %v (%s): %w", releaseTimeout, then, err)
		}
		if last {
			c.giveBackFrom(h, true) // try again in the background; else Redis frees it at the lease's end
		}
		return s.wrap(err)
	case reply == 0:
		c.lose(h, true)
		return s.wrap(errLost)
	case reply == goneAt && goneInTime(h):
		// Redis lost the hold before its deadline (forced elsewhere, its
		// data lost, a key deleted): the hold has ended, and its owner
		// learns here that it was not protected until now.
		c.lose(h, true)
		return s.wrap(errLost)
	case reply == 1 && !last:
		h.Count = count - n
		c.wd.Extend(h, sent)
	}
	return nil
}

// goneInTime reports whether a last release of h whose reply found the
// hold gone in Redis found it gone while its lease still stood there: its
// reply came (so the script ran) before the hold's deadline, which comes
// before Redis can let the lease run out. Renewals stop when a last
// release begins, and a release that takes long (sent again while a
// slot's keys are split between two masters, or slow on the way) can find
// a lease that ran out after that: the hold was not lost then, it lapsed
// after its Unlock began, and the release succeeds.
func goneInTime(h *lease.Hold) bool { return h.InTime() }

// lose ends h, which Redis no longer has (or no longer has whole), as
// lost: its holders are told first; then what Redis still keeps of a
// hold on several locks (a MultiLock) is given back. locked says the
// caller holds h.mu.
func (c *Client) lose(h *lease.Hold, locked bool) {
	if c.wd.End(h, lease.EndLost, ErrLeaseLost) && h.Parts {
		c.giveBackFrom(h, locked)
	}
}

// afterEnd answers a release through a hold that has already ended, making
// sure Redis does not keep it: nil when it ended with its context (redisync
// released it), an error otherwise. A release to make sure that fails (a
// reset connection, Redis silent) does not change the answer: it is tried
// again in the background, and the lease frees the lock at the latest.
// The caller holds h.mu.
func (c *Client) afterEnd(ctx context.Context, s *spec, h *lease.Hold) error {
	why := h.Reason()
	if why == lease.EndParent || why == lease.EndLost {
		if err := c.releaseAll(ctx, h.Release); err != nil {
			c.giveBackFrom(h, true)
		}
	}
	if why == lease.EndParent {
		return nil
	}
	return s.wrap(endedError(h))
}

// endedError describes a hold that has ended.
func endedError(h *lease.Hold) error {
	switch h.Reason() {
	case lease.EndUnlocked:
		return fmt.Errorf("%w (already released)", ErrNotHeld)
	case lease.EndParent:
		return fmt.Errorf("%w (the hold ended with its context: %v)", ErrNotHeld, context.Cause(h.Parent))
	case lease.EndClosed:
		return ErrClosed
	default:
		return errLost
	}
}

// errLost is the error of a call through a hold whose lease was lost.
var errLost = &multiError{msg: "redisync: not held: lease lost", errs: []error{ErrNotHeld, ErrLeaseLost}}

// undo sends calls, in order and without waiting, to give back what an
// abandoned attempt took or left in Redis; a failure is logged.
func (c *Client) undo(calls ...call) {
	c.tr.Async(func(k call, r reply) {
		if err := r.Err(); err != nil {
			c.log.Warn("redisync: could not give back what an abandoned attempt took; its lease or deadline frees it",
				"script", scriptName(k), "error", err)
		}
	}, calls...)
}

// undoNow is undo for a caller that must know the undo done before it goes
// on (a call that fails with ErrNotReplicated, whose promise is that what
// it took was undone when it returns; see also undoHeld): it waits for
// the replies, as long as ctx lasts and at most releaseTimeout (what it
// no longer waits for still goes out). It returns the first error: ctx's
// when it ended first (the undo is on its way), or why the undo failed.
func (c *Client) undoNow(ctx context.Context, calls ...call) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	var first error
	for i, r := range c.tr.DoAll(ctx, calls) {
		err := r.Err()
		if err != nil && !r.Gone {
			c.log.Warn("redisync: could not give back what an attempt took; its lease or deadline frees it",
				"script", scriptName(calls[i]), "error", err)
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// undoUnder is undoNow for the undo of a script sent through h, under
// h's lock, which the caller holds: the lock is released once the undo
// has answered (at most releaseTimeout), in the background when ctx ends
// first. h's lock serialises the scripts that change the hold because
// they set counts, not add to them: an undo sent after the lock was
// released could land after another goroutine's re-entry through h and
// set the count below what that one took (a Semaphore's permits: other
// owners could then take more than the semaphore has).
func (c *Client) undoUnder(ctx context.Context, h *lease.Hold, calls ...call) error {
	done := make(chan error, 1)
	go func() {
		defer h.Mu.Unlock()
		done <- c.undoNow(context.WithoutCancel(ctx), calls...)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// undoHeld is undo for a give-back sent under a hold's lock (underHold's
// taken): it waits for the replies, at most releaseTimeout, so that the
// lock, released after it, orders the give-back before the next script
// through the hold. Those scripts set counts rather than add to them, and
// pipelines of one lane may overtake each other (one goes out beside a
// slow one after laneStall): a give-back landing after another
// goroutine's re-entry would set the count below what that one took.
func (c *Client) undoHeld(calls ...call) { _ = c.undoNow(context.Background(), calls...) }

// scriptName names k's script for the log.
func scriptName(k call) string {
	if k.Script == nil {
		return ""
	}
	return k.Script.Name()
}

// giveBack releases h in Redis in the background (once the Client is
// closing, at once), bounded by releaseTimeout: h ended while Redis may
// still keep it.
func (c *Client) giveBack(h *lease.Hold) { c.giveBackFrom(h, false) }

// giveBackFrom is giveBack for a caller that holds h.mu when locked.
func (c *Client) giveBackFrom(h *lease.Hold, locked bool) {
	give := func(lock, wait bool) {
		if lock {
			// In the background, as long as an earlier call through the
			// hold keeps its lock; else at most releaseTimeout.
			lctx, cancel := context.Background(), context.CancelFunc(func() {})
			if !wait {
				lctx, cancel = context.WithTimeout(lctx, releaseTimeout)
			}
			err := h.Mu.LockCtx(lctx)
			cancel()
			if err != nil {
				c.log.Warn("redisync: could not release a hold that ended, busy with a call that has had no reply; Redis frees it when its lease ends",
					"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
				return
			}
			defer h.Mu.Unlock()
		}
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		if err := c.releaseAll(ctx, h.Release); err != nil {
			c.log.Warn("redisync: could not release a hold that ended; Redis frees it when its lease ends",
				"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
		}
	}
	if !c.bgStart() {
		// Closing: Close releases the holds that were live; this one
		// ended before, so it is released here, once, now.
		give(!locked, false)
		return
	}
	go func() {
		defer c.bg.Done()
		give(true, true)
	}()
}

// entry returns the live hold of ref that a Lock with ctx re-enters, or nil
// for a first acquisition. A context that carries a hold of ref that was
// lost (or ended with its context, or by Close) is refused: acquiring again
// would silently make a new hold of what its caller believes it still has.
func entry(ctx context.Context, ref lease.Ref) (*lease.Hold, error) {
	h := carried(ctx, ref)
	if h == nil {
		return nil, nil
	}
	switch h.Reason() {
	case lease.NotEnded:
		return h, nil
	case lease.EndUnlocked:
		return nil, nil
	default:
		return nil, endedError(h)
	}
}

// releaseAll sends calls, a hold's release calls, and returns the first
// error.
func (c *Client) releaseAll(ctx context.Context, calls []call) error {
	if len(calls) == 1 {
		k := calls[0]
		k.Direct = true
		return c.tr.Do(ctx, k, nil).Err()
	}
	for _, r := range c.tr.DoAll(ctx, calls) {
		if err := r.Err(); err != nil {
			return err
		}
	}
	return nil
}

// releaseBy sends k, a release script, for release's send; a last hold
// found gone is lost unless go-redis wrote the call twice (see writes).
func (c *Client) releaseBy(ctx context.Context, k call) (int64, time.Time, error) {
	k, w := transport.Counted(k)
	k.Direct = true
	p, _ := ctx.Value(pendingKey{}).(*pending)
	var late func(reply)
	if p != nil {
		late = p.late
	}
	r := c.tr.Do(ctx, k, late)
	if r.Gone && p != nil {
		p.left = true // late has h's lock now
	}
	n, err := r.Int64()
	return lostOrResent(n, w), r.Sent, err
}
