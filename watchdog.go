package redisync

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keeper owns a Client's table of live holds and the one goroutine that
// renews their leases, in pipelined batches, so 10,000 holds cost a
// handful of round trips, not 10,000 timers. The holds of one lease (the
// Client's Keeper timeout, or a lock's WithRenewedLease) form a cadence,
// renewed all together every third of that lease; the loop wakes for the
// cadence due first, and renews in the same round every cadence due
// within half the shortest interval, so that slower cadences share the
// rounds of the fastest.
//
// Each hold also has a local deadline, counted from when the newest script
// that set its lease was sent, a margin before Redis could let the lease
// expire. A timer fires it independently of the renewal loop, so a renewal
// stuck on a silent connection cannot keep a holder from hearing that its
// lease is gone before anyone else can take the lock.
type Keeper struct {
	c        *Client
	giveBack func(*Hold) // releases in Redis, in the background, a hold that ended
	lease    time.Duration
	interval time.Duration

	mu      sync.Mutex
	holds   map[*Hold]struct{}
	cad     map[time.Duration]time.Time // the next round of each cadence (by lease) of renewed holds
	kick    chan struct{}               // wakes the loop: a new cadence
	forced  map[Ref]uint64          // ForceUnlocks so far, per lock
	forcing map[Ref]int             // ForceUnlocks in flight, per lock
	calm    map[Ref]chan struct{}   // closed when a lock's last one in flight answers
	closed  bool

	stop chan struct{}
	done chan struct{}
	// rounds is the renewals' context, cancelled by close: a renewal on
	// a silent link does not hold Close up.
	rounds context.Context
	cancel context.CancelFunc
}

// batchSize bounds one pipeline; 10,000 holds take 5 round trips per tick.
const batchSize = 2000

func NewKeeper(c *Client, lease time.Duration) *Keeper {
	w := &Keeper{
		c:        c,
		giveBack: c.giveBack,
		lease:    lease,
		interval: lease / 3,
		holds:    map[*Hold]struct{}{},
		cad:      map[time.Duration]time.Time{},
		kick:     make(chan struct{}, 1),
		forced:   map[Ref]uint64{},
		forcing:  map[Ref]int{},
		calm:     map[Ref]chan struct{}{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	w.rounds, w.cancel = context.WithCancel(context.Background())
	go w.run()
	return w
}

// Add registers h, whose lease was set by a script stamped st. It
// registers nothing and returns ErrClosed once the client is closed, and
// errUntrusted when a ForceUnlock of the lock came after st.
func (w *Keeper) Add(h *Hold, st Stamp) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	if !w.trusted(st.Epoch, h.Ref, h.Covers) {
		return errUntrusted
	}
	sent := st.Sent
	w.holds[h] = struct{}{}
	if _, ok := w.cad[h.Lease]; h.Renewed && !ok {
		// The first hold of its lease: its cadence's first round is a
		// third of the lease from now; the loop may be asleep for longer.
		w.cad[h.Lease] = time.Now().Add(h.Lease / 3)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	h.tmu.Lock()
	h.sent = sent
	h.dl.set(Deadline(sent, h.Lease))
	h.timer = time.AfterFunc(h.dl.left(), func() {
		if w.End(h, EndLost, ErrLeaseLost) {
			w.giveBack(h) // Redis may keep it a little longer: give it back
		}
	})
	h.tmu.Unlock()
	return nil
}

// Extend moves h's local deadline after a script sent at sent set its lease.
// A deadline that has passed is not moved: the hold was lost then, whether
// or not anyone has looked yet, and a late reply does not bring it back.
func (w *Keeper) Extend(h *Hold, sent time.Time) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	if h.why != NotEnded || !sent.After(h.sent) || h.dl.passed() {
		return
	}
	h.sent = sent
	h.dl.set(Deadline(sent, h.Lease))
	h.timer.Reset(h.dl.left())
}

// End ends h for why: it leaves the table, its deadline stops, and its
// context is cancelled with cause, before anything else happens. It reports
// whether this call ended it; only one caller ever gets true.
func (w *Keeper) End(h *Hold, why EndReason, cause error) bool {
	w.mu.Lock()
	delete(w.holds, h)
	w.mu.Unlock()
	h.tmu.Lock()
	if h.why != NotEnded {
		h.tmu.Unlock()
		return false
	}
	h.why = why
	if h.timer != nil {
		h.timer.Stop()
	}
	stops, ties, firsts := h.stops, h.ties, h.firsts
	h.stops, h.ties, h.firsts = nil, nil, nil
	h.tmu.Unlock()
	for _, f := range firsts {
		f()
	}
	h.cancel(cause)
	for _, cancel := range ties {
		cancel(cause)
	}
	// Only now that every context of the hold is cancelled: until then,
	// one that finds the deadline passed waits for this (see overdue).
	h.dl.clear()
	close(h.over)
	for _, stop := range stops {
		stop()
	}
	w.c.ended(h, why, cause)
	return true
}

// Epoch returns how many times ref's lock was force-unlocked in this
// process: a grant whose script was sent before a ForceUnlock and whose
// reply came after it cannot tell which ran first, and is given back.
// A hold that covers other locks (a MultiLock's names) counts theirs too:
// the sum, which moves when any of them is force-unlocked.
func (w *Keeper) Epoch(ref Ref, covers []Ref) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.epochLocked(ref, covers)
}

func (w *Keeper) epochLocked(ref Ref, covers []Ref) uint64 {
	n := w.forced[ref]
	for _, r := range covers {
		n += w.forced[r]
	}
	return n
}

// trusted reports whether a grant of ref (covering covers) stamped with
// epoch can be trusted: no ForceUnlock of any of them came after the
// stamp, and none is in flight. Call with w.mu held.
func (w *Keeper) trusted(epoch uint64, ref Ref, covers []Ref) bool {
	if w.epochLocked(ref, covers) != epoch || w.forcing[ref] > 0 {
		return false
	}
	for _, r := range covers {
		if w.forcing[r] > 0 {
			return false
		}
	}
	return true
}

// Force ends, with ErrLeaseLost, every hold of ref's lock (any owner),
// before a ForceUnlock frees it, and makes grants in flight unusable: the
// epoch is bumped under the same lock that collects the holds, so a grant
// either registers before and is ended here, or finds the epoch moved.
// Call done once the ForceUnlock's script has answered (from the
// transport's late callback when the caller left before: the script may
// still be on its way, and frees what holds the lock when it runs): until
// then no grant of the lock is trusted (its script may have run before
// the ForceUnlock's, and its hold be freed by it), new attempts wait for
// it (see unforced), and the epoch moves again, so that a grant sent
// meanwhile and answered later is refused too. A MultiLock's hold that
// covers the lock ends too, and done gives back its other locks (only
// then: the ForceUnlock finds the lock held, as it was). A MultiLock's
// grant in flight is refused as well (its stamp counts the ForceUnlocks
// of every name it covers).
func (w *Keeper) Force(ref Ref) (done func()) {
	w.mu.Lock()
	w.forced[ref]++
	if w.forcing[ref]++; w.forcing[ref] == 1 {
		w.calm[ref] = make(chan struct{})
	}
	var hs []*Hold
	for h := range w.holds {
		if h.Ref == ref || slices.Contains(h.Covers, ref) {
			hs = append(hs, h)
		}
	}
	w.mu.Unlock()
	var others []*Hold // MultiLocks: their other names are given back after
	for _, h := range hs {
		if w.End(h, EndForced, ErrLeaseLost) && h.Ref != ref {
			others = append(others, h)
		}
	}
	return func() {
		for _, h := range others {
			w.giveBack(h)
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		// A grant whose script ran before the ForceUnlock's can answer
		// after it: refused while it is in flight, and by the epoch after.
		w.forced[ref]++
		if w.forcing[ref]--; w.forcing[ref] == 0 {
			delete(w.forcing, ref)
			close(w.calm[ref])
			delete(w.calm, ref)
		}
	}
}

// resumed sets again the timers of every hold after the wall clock jumped
// ahead of the monotonic one (the machine was suspended): the timers count
// monotonic time, and would tell the holders late. A hold whose deadline
// passed meanwhile is told at once; so is one whose context is read first
// (see dlStore).
func (w *Keeper) resumed() {
	w.mu.Lock()
	hs := make([]*Hold, 0, len(w.holds))
	for h := range w.holds {
		hs = append(hs, h)
	}
	w.mu.Unlock()
	for _, h := range hs {
		h.tmu.Lock()
		if h.why == NotEnded && h.timer != nil {
			h.timer.Reset(h.dl.left())
		}
		h.tmu.Unlock()
	}
}

// Unforced returns the epoch of ref's lock (with those of covers, see
// epoch) once no ForceUnlock of any of them is in flight in this process:
// an attempt stamped while one is could not tell whether its script ran
// before the ForceUnlock's, and its grant would be refused; stamped after
// the ForceUnlock's script answered, it ran after it. Without wait it
// reports false at once instead of waiting; it returns ctx's error when
// ctx ends first, and ErrClosed when the client closes.
func (w *Keeper) Unforced(ctx context.Context, ref Ref, covers []Ref, wait bool) (uint64, bool, error) {
	for {
		w.mu.Lock()
		ch := w.calm[ref]
		for _, r := range covers {
			if ch == nil {
				ch = w.calm[r]
			}
		}
		if ch == nil {
			epoch := w.epochLocked(ref, covers)
			w.mu.Unlock()
			return epoch, true, nil
		}
		w.mu.Unlock()
		if !wait {
			return 0, false, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-w.c.closed:
			return 0, false, ErrClosed
		}
	}
}

// forceBy sends k, the script of a ForceUnlock of refs' locks, and returns
// its reply. Their holds in this process end first (see watchdog.force),
// and the window in which their grants are not trusted ends when the
// script answers: when ctx ends first, only once its late reply comes.
func (c *Client) forceBy(ctx context.Context, k call, refs ...Ref) reply {
	dones := make([]func(), len(refs))
	for i, ref := range refs {
		dones[i] = c.wd.Force(ref)
	}
	done := func() {
		for i := len(dones) - 1; i >= 0; i-- {
			dones[i]()
		}
	}
	r := c.tr.Do(ctx, k, func(reply) { done() })
	if !r.Gone {
		done()
	}
	return r
}

// due returns the cadences (by lease) whose round is due at now, or
// nearly: within half the shortest interval of them all, so that the
// rounds of the slower cadences join those of the fastest (renewed a
// little early, never late) instead of adding rounds of their own.
func (w *Keeper) due(now time.Time) map[time.Duration]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	var due map[time.Duration]bool
	slack := time.Duration(0)
	for lease := range w.cad {
		if slack == 0 || lease/6 < slack {
			slack = lease / 6
		}
	}
	for lease, next := range w.cad {
		if !next.After(now.Add(slack)) {
			if due == nil {
				due = map[time.Duration]bool{}
			}
			due[lease] = true
		}
	}
	return due
}

// snapshot returns the renewed holds of the cadences due, and forgets
// those of them that have no hold left (under the same lock as add, which
// starts a cadence again for its next hold).
func (w *Keeper) snapshot(due map[time.Duration]bool) []*Hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs := make([]*Hold, 0, len(w.holds))
	live := map[time.Duration]bool{}
	for h := range w.holds {
		if h.Renewed && due[h.Lease] {
			hs = append(hs, h)
			live[h.Lease] = true
		}
	}
	for lease := range due {
		if !live[lease] {
			delete(w.cad, lease)
		}
	}
	return hs
}

// schedule sets the next round of the cadences due, which a round started
// at start renewed: a third of their lease after start (counted from the
// start of the round, so a slow round does not stretch the time between
// two renewals), sooner for those with a failed renewal, so a blip costs
// little of the lease (the deadlines still stand).
func (w *Keeper) schedule(due, failed map[time.Duration]bool, start time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for lease := range due {
		if _, ok := w.cad[lease]; !ok {
			continue // no hold left
		}
		next := lease / 3
		if failed[lease] {
			next = min(next/3, time.Second)
		}
		w.cad[lease] = start.Add(next)
	}
}

// wait returns how long the loop may sleep: until the first cadence is
// due (the default interval when there is none: a new one kicks it).
func (w *Keeper) wait() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.interval
	now := time.Now()
	for _, next := range w.cad {
		d = min(d, next.Sub(now))
	}
	return max(d, 0)
}

func (w *Keeper) run() {
	defer close(w.done)
	t := time.NewTimer(w.interval)
	defer t.Stop()
	jump := time.NewTicker(jumpEvery)
	defer jump.Stop()
	last := clockOf(time.Now()).lead
	for {
		select {
		case <-w.stop:
			return
		case <-jump.C:
			if now := clockOf(time.Now()).lead; now-last > int64(jumpSlack) {
				w.resumed()
				last = now
			} else {
				last = min(last, now)
			}
			continue
		case <-w.kick:
		case <-t.C:
		}
		start := time.Now()
		if due := w.due(start); due != nil {
			w.schedule(due, w.renewAll(due), start)
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

// renewAll renews every renewed hold of the cadences due, and returns
// those of them with a renewal that failed for a reason other than the
// hold being gone.
func (w *Keeper) renewAll(due map[time.Duration]bool) map[time.Duration]bool {
	start := time.Now()
	hs := w.snapshot(due)
	var r RenewalEvent
	r.Holds = len(hs)
	var firstErr error
	failed := map[time.Duration]bool{}
	for len(hs) > 0 {
		n := min(len(hs), batchSize)
		if err := w.renewBatch(hs[:n], &r, failed); err != nil && firstErr == nil {
			firstErr = err
		}
		hs = hs[n:]
	}
	r.Took = time.Since(start)
	if r.Failed > 0 && w.rounds.Err() == nil {
		w.c.log.Warn("redisync: lease renewals failed; retrying until their deadlines", "failed", r.Failed, "of", r.Holds, "error", firstErr)
	}
	if w.c.obs.Renewed != nil && r.Holds > 0 {
		w.c.obs.Renewed(r)
	}
	return failed
}

// renewBatch renews hs, counting in r, and returns the first error of a
// renewal that failed for a reason other than the hold being gone; the
// leases of those holds are set in failed. Each
// renewal is dated by when its own pipeline was sent: one that Redis
// answered with NOSCRIPT and that was sent again counts from then. A hold
// on several slots (a MultiLock) is renewed when every one of its calls
// renewed, dated by the earliest of their pipelines; it is lost when any
// found it gone.
func (w *Keeper) renewBatch(hs []*Hold, r *RenewalEvent, failed map[time.Duration]bool) error {
	calls := make([]call, 0, len(hs))
	for _, h := range hs {
		for _, k := range h.Renew {
			k.Takes = true
			k.Once = true // a failed renewal is retried sooner than the transport would
			calls = append(calls, k)
		}
	}
	replies := w.c.tr.DoAll(w.rounds, calls)
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
				rerr = w.c.renewedAck(rep) // renewed, but not acknowledged: a failed renewal
			}
			switch {
			case rerr == nil && n == 1:
				if sent.IsZero() || rep.Sent.Before(sent) {
					sent = rep.Sent
				}
			case rerr == nil || isGone(rerr):
				gone = true
			case err == nil:
				err = rerr
			}
		}
		switch {
		case gone:
			r.Lost++
			if w.End(h, EndLost, ErrLeaseLost) && h.Parts {
				w.giveBack(h) // a MultiLock: what Redis still keeps of it
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

// isGone reports whether a renewal error means the hold cannot exist any
// more: its key now holds another type of value.
func isGone(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// Close stops the renewal loop (a round in flight is abandoned), ends
// every hold (their contexts are cancelled first, with a cause matching
// both ErrClosed and ErrLeaseLost), then releases them in Redis,
// best-effort, in one pipeline, waiting for it until deadline.
func (w *Keeper) Close(deadline time.Time) {
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

	var ended []*Hold
	for _, h := range hs {
		if w.End(h, EndClosed, errClosedHold) {
			ended = append(ended, h)
		}
	}
	if len(ended) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	calls := make([]call, 0, len(ended))
	for _, h := range ended {
		calls = append(calls, h.Release...)
	}
	w.c.tr.DoAll(ctx, calls)
}

// errClosedHold is the cause of the contexts of holds ended by Close.
var errClosedHold = &multiError{msg: "redisync: client closed; lease released", errs: []error{ErrClosed, ErrLeaseLost}}
