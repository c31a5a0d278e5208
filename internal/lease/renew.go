package lease

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/transport"
)

// due returns, when the round of a cadence is due at now, the cadences
// (by lease) whose round is due then or nearly: within half the shortest
// interval of them all (the slack), so that the rounds of the slower
// cadences join those of the fastest (renewed a little early, never late)
// instead of adding rounds of their own. Nothing is due before a round is:
// a round pulled for a late grant (plan) is waited for, so that the grants
// of its wait share it. A cadence whose round is under way is not due: its
// next round is set when its holds have answered (see renewAll); while a
// round of one pipeline is (a few milliseconds), a cadence due waits for
// it, at most the slack, to share the round that follows it, as it would
// if rounds ran one after another (see wait).
func (w *Keeper) due(now time.Time) map[time.Duration]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	slack := w.slack()
	ripe := false
	for lease, next := range w.cad {
		if _, busy := w.running[lease]; !busy && !next.After(now) {
			if w.small > 0 && now.Before(next.Add(slack)) {
				return nil // a round under way may end first
			}
			ripe = true
		}
	}
	if !ripe {
		return nil
	}
	var due map[time.Duration]bool
	for lease, next := range w.cad {
		if _, busy := w.running[lease]; !busy && !next.After(now.Add(slack)) {
			if due == nil {
				due = map[time.Duration]bool{}
			}
			due[lease] = true
		}
	}
	return due
}

// slack is half the shortest interval of the cadences (see due). Called
// under w.mu.
func (w *Keeper) slack() time.Duration {
	slack := time.Duration(0)
	for lease := range w.cad {
		if slack == 0 || lease/6 < slack {
			slack = lease / 6
		}
	}
	return slack
}

// snapshot returns the renewed holds of the cadences due, and forgets
// those of them that have no hold left (under the same lock as add, which
// starts a cadence again for its next hold). A round of one pipeline (one
// cadence's holds that fit in one: small) is counted in w.small until its
// end (see schedule).
func (w *Keeper) snapshot(due map[time.Duration]bool) (hs []*Hold, small bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs = make([]*Hold, 0, len(w.holds))
	live := map[time.Duration]bool{}
	for h := range w.holds {
		if h.Renewed && due[h.Lease] {
			hs = append(hs, h)
			live[h.Lease] = true
		}
	}
	now := time.Now()
	for lease := range due {
		delete(w.pulled, lease) // this round renews the holds it was pulled for
		w.running[lease] = now  // and not those added from now on (see plan)
		if !live[lease] {
			delete(w.cad, lease)
		}
	}
	if small = len(hs) <= batchSize && len(live) <= 1; small {
		w.small++
	}
	return hs, small
}

// schedule sets the next round of the cadences done, which a round
// started at start renewed (their holds have answered; the round may go
// on with other cadences' holds): a third of their lease after start
// (counted from the start of the round, so a slow round does not stretch
// the time between two renewals), sooner for those with a failed renewal,
// so a blip costs little of the lease (the deadlines still stand). small
// ends the count of a round of one pipeline (see snapshot).
func (w *Keeper) schedule(done, failed map[time.Duration]bool, start time.Time, small bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if small {
		w.small--
	}
	for lease := range done {
		p, pulled := w.pulled[lease] // by a late grant added during the round (see plan)
		delete(w.pulled, lease)
		delete(w.running, lease)
		if _, ok := w.cad[lease]; !ok {
			continue // no hold left
		}
		next := lease / 3
		if failed[lease] {
			next = min(next/3, time.Second)
		}
		at := start.Add(next)
		if pulled && p.Before(at) {
			at = p
		}
		w.cad[lease] = at
	}
}

// wait returns how long the loop may sleep: until the first cadence
// whose round is not under way is due, or, while a round of one pipeline
// is, the slack after that (see due: that round's end kicks the loop).
// The default interval when there is none: a new one kicks it.
func (w *Keeper) wait() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.interval
	now := time.Now()
	var late time.Duration
	if w.small > 0 {
		late = w.slack()
	}
	for lease, next := range w.cad {
		if _, busy := w.running[lease]; !busy {
			d = min(d, next.Add(late).Sub(now))
		}
	}
	return max(d, 0)
}

// run is the renewal loop. Each round runs in a goroutine of its own, so
// that a round of many holds (10,000 of a long lease take hundreds of
// milliseconds on a busy machine) does not hold up the rounds of another
// cadence (a short lease's, due every few tens of milliseconds).
func (w *Keeper) run() {
	defer close(w.done)
	var rounds sync.WaitGroup
	defer rounds.Wait() // Close cancelled them: they end soon
	t := time.NewTimer(w.interval)
	defer t.Stop()
	jump := time.NewTicker(jumpEvery)
	defer jump.Stop()
	last := now().gain
	for {
		select {
		case <-w.stop:
			return
		case <-jump.C:
			if g := now().gain; g-last > int64(jumpSlack) {
				w.resumed()
				last = g
			}
			continue
		case <-w.kick:
		case <-t.C:
		}
		start := time.Now()
		if due := w.due(start); due != nil {
			hs, small := w.snapshot(due)
			rounds.Add(1)
			go func() {
				defer rounds.Done()
				w.renewAll(due, hs, start, small)
			}()
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(w.wait())
	}
}

// renewAll renews hs, the renewed holds of the cadences due (taken by
// snapshot), in a round started at start: in one pipeline when they are
// one cadence's and fit in one (small); else cadence after cadence, the
// shortest lease's first, each in pipelines of its own (a short lease's
// renewals neither wait for nor ride in the pipelines of the holds of
// another lease, even of 1,000 that fit in one with them). Each cadence's next
// round is set as soon as its own holds have answered (sooner for one with
// a renewal that failed for a reason other than the hold being gone), and
// the loop is kicked: that cadence's next round may start while this one
// goes on with the others.
func (w *Keeper) renewAll(due map[time.Duration]bool, hs []*Hold, start time.Time, small bool) {
	var r Round
	r.Holds = len(hs)
	failed := map[time.Duration]bool{}
	var firstErr error
	renew := func(hs []*Hold) {
		for len(hs) > 0 {
			n := min(len(hs), batchSize)
			if err := w.renewBatch(hs[:n], &r, failed); err != nil && firstErr == nil {
				firstErr = err
			}
			hs = hs[n:]
		}
	}
	if small {
		renew(hs)
		w.scheduled(due, failed, start, true)
	} else {
		byLease := map[time.Duration][]*Hold{}
		for _, h := range hs {
			byLease[h.Lease] = append(byLease[h.Lease], h)
		}
		leases := slices.Sorted(maps.Keys(due))
		for _, lease := range leases {
			renew(byLease[lease]) // none: a cadence with no hold left
			w.scheduled(map[time.Duration]bool{lease: true}, failed, start, false)
		}
	}
	r.Took = time.Since(start)
	if r.Failed > 0 && w.rounds.Err() == nil {
		w.cfg.Log.Warn("redisync: lease renewals failed; retrying until their deadlines", "failed", r.Failed, "of", r.Holds, "error", firstErr)
	}
	if w.cfg.Renewed != nil && r.Holds > 0 {
		w.cfg.Renewed(r)
	}
}

// scheduled is schedule, then a kick of the loop: the next round of the
// cadences done may be due before the loop would wake.
func (w *Keeper) scheduled(done, failed map[time.Duration]bool, start time.Time, small bool) {
	w.schedule(done, failed, start, small)
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// renewBatch renews hs, counting in r, and returns the first error of a
// renewal that failed for a reason other than the hold being gone; the
// leases of those holds are set in failed. Each
// renewal is dated by when its own pipeline was sent: one that Redis
// answered with NOSCRIPT and that was sent again counts from then. A hold
// on several slots (a MultiLock) is renewed when every one of its calls
// renewed, dated by the earliest of their pipelines; it is lost when any
// found it gone.
func (w *Keeper) renewBatch(hs []*Hold, r *Round, failed map[time.Duration]bool) error {
	calls := make([]transport.Call, 0, len(hs))
	for _, h := range hs {
		for _, k := range h.Renew {
			k.Takes = true
			k.Once = true // a failed renewal is retried sooner than the transport would
			calls = append(calls, k)
		}
	}
	replies := w.cfg.Transport.DoAll(w.rounds, calls)
	pipes := map[uint64]bool{}
	var first error
	for _, h := range hs {
		rs := replies[:len(h.Renew)]
		replies = replies[len(h.Renew):]
		var sent time.Time
		gone := false
		var err error
		for _, rep := range rs {
			if rep.Pipe != 0 {
				pipes[rep.Pipe] = true
			}
			n, rerr := rep.Int64()
			if rerr == nil && n == 1 {
				rerr = w.acked(rep) // renewed, but not acknowledged: a failed renewal
			}
			switch {
			case rerr == nil && n == 1:
				if sent.IsZero() || rep.Sent.Before(sent) {
					sent = rep.Sent
				}
			case rerr == nil || IsGone(rerr):
				gone = true
			case err == nil:
				err = rerr
			}
		}
		switch {
		case gone:
			// A hold due to end ends first as it was due (its context
			// may have ended before its lease: a process stopped past
			// both). Lost counts a hold that was live until now, or
			// ended lost meanwhile; not one released while the round was
			// in flight (its release ended it first, and removed it from
			// Redis), nor one that ended with its context.
			h.Settle()
			if w.End(h, EndLost, w.cfg.Errors.Lost) {
				r.Lost++
				if h.Parts {
					w.cfg.GiveBack(h) // a MultiLock: what Redis still keeps of it
				}
			} else if why := h.Reason(); why == EndLost || why == EndForced {
				r.Lost++
			}
		case err == nil:
			w.Extend(h, sent)
		default:
			r.Failed++ // transient: retried until the deadline fires
			failed[h.Lease] = true
			if first == nil {
				first = err
			}
		}
	}
	r.RoundTrips += len(pipes)
	return first
}

// IsGone reports whether a renewal error means the hold cannot exist any
// more: its key now holds another type of value.
func IsGone(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// Unreleased is a hold whose release at Close failed, and why (the first
// error of its release calls).
type Unreleased struct {
	Hold *Hold
	Err  error
}

// Close stops the renewal loop (a round in flight is abandoned), ends
// every hold (their contexts are cancelled first, with a cause matching
// both ErrClosed and ErrLeaseLost), then releases them in Redis,
// best-effort, in one pipeline, waiting for it until deadline. It returns
// the holds whose release failed: the caller may send those again within
// its bound (holds.Machine.KeepAll).
func (w *Keeper) Close(deadline time.Time) []Unreleased {
	w.mu.Lock()
	w.closed = true
	hs := make([]*Hold, 0, len(w.holds))
	for h := range w.holds {
		hs = append(hs, h)
	}
	w.mu.Unlock()
	close(w.stop)
	w.cancel()
	<-w.done
	defer w.dlTimer.Stop()

	var ended []*Hold
	for _, h := range hs {
		if w.End(h, EndClosed, w.cfg.Errors.ClosedHold) {
			ended = append(ended, h)
		}
	}
	if len(ended) == 0 {
		return nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	calls := make([]transport.Call, 0, len(ended))
	for _, h := range ended {
		calls = append(calls, h.Release...)
	}
	rs := w.cfg.Transport.DoAll(ctx, calls)
	var failed []Unreleased
	i := 0
	for _, h := range ended {
		var err error
		for range h.Release {
			if err == nil {
				err = rs[i].Err()
			}
			i++
		}
		if err != nil {
			failed = append(failed, Unreleased{Hold: h, Err: err})
		}
	}
	return failed
}

// acked is Config.Acked, or nil without it.
func (w *Keeper) acked(r transport.Reply) error {
	if w.cfg.Acked == nil {
		return nil
	}
	return w.cfg.Acked(r)
}
