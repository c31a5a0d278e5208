package lease

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redisync-go/redisync/internal/transport"
)

// Keeper owns a client's table of live holds and the one goroutine that
// renews their leases, in pipelined batches, so 10,000 holds cost a
// handful of round trips, not 10,000 timers. The holds of one lease (the
// client's watchdog timeout, Config.Lease, or a lock's WithRenewedLease) form a cadence,
// renewed all together every third of that lease; the loop wakes for the
// cadence due first, and renews in the same round every cadence due
// within half the shortest interval, so that slower cadences share the
// rounds of the fastest. A round runs in a goroutine of its own; one of
// several cadences, or that needs more than a pipeline, renews cadence after cadence, the shortest
// lease's first, and each cadence's next round is set as soon as its own
// holds have answered, so a short lease's rounds go on beside a long round
// of another lease's 10,000 holds instead of waiting for its end.
//
// Each hold also has a local deadline, counted from when the newest script
// that set its lease was sent, a margin before Redis could let the lease
// expire. A timer fires it independently of the renewal loop, so a renewal
// stuck on a silent connection cannot keep a holder from hearing that its
// lease is gone before anyone else can take the lock: one timer of the
// keeper's for every hold, set for the earliest deadline (deadlines.go).
type Keeper struct {
	cfg      Config
	interval time.Duration

	mu      sync.Mutex
	holds   map[*Hold]struct{}
	cad     map[time.Duration]time.Time // the next round of each cadence (by lease) of renewed holds
	pulled  map[time.Duration]time.Time // the round a late grant needs, by lease, until a round takes it (see plan)
	running map[time.Duration]time.Time // the start of the round under way, by lease (see plan)
	small   int                         // rounds of one pipeline under way (see due)
	kick    chan struct{}               // wakes the loop: a new cadence
	forced  map[Ref]uint64              // ForceUnlocks so far, per lock
	// everForced is set by the first ForceUnlock, under mu, before it
	// counts: until then every lock's epoch is 0 and none is in flight,
	// which Unforced answers without mu.
	everForced atomic.Bool
	forcing    map[Ref]int           // ForceUnlocks in flight, per lock
	calm       map[Ref]chan struct{} // closed when a lock's last one in flight answers
	closed     bool

	// The holds' deadlines (deadlines.go), under dmu: a heap, the
	// earliest first, and the one timer set for it (at dlAt, 0: none).
	dmu     sync.Mutex
	dls     dlHeap
	dlAt    int64
	dlTimer *time.Timer

	causes []cause // what the contexts of holds ended with the keeper's errors answer causeKey with
	slots  slots   // the bounds of calls (slots.go)

	stop chan struct{}
	done chan struct{}
	// rounds is the renewals' context, cancelled by close: a renewal on
	// a silent link does not hold Close up.
	rounds context.Context
	cancel context.CancelFunc
}

// batchSize bounds one pipeline; 10,000 holds take 5 round trips per tick.
const batchSize = 2000

// Config is what a Keeper is made with: the transport its renewals go
// through, and what it calls back.
type Config struct {
	Transport *transport.Transport
	// Lease is the default lease; the loop sleeps at most a third of it.
	Lease time.Duration
	// Closed is closed when the owner closes: Unforced stops waiting.
	Closed <-chan struct{}
	Log    *slog.Logger
	// GiveBack releases in Redis, in the background, a hold that ended
	// while Redis may still have it.
	GiveBack func(*Hold)
	// Ended is told of every hold's end, once, after its contexts are
	// cancelled.
	Ended func(h *Hold, why EndReason, cause error)
	// Acked, when set, checks a renewal's reply: an error (replicas did
	// not acknowledge it) counts as a failed renewal.
	Acked func(transport.Reply) error
	// Renewed, when set, is told of every round that renewed holds.
	Renewed func(Round)
	// Errors are the errors it reports.
	Errors Errors
}

// Errors are the owner's errors, which the Keeper reports: Lost is the
// cause of a lost hold's contexts, ClosedHold that of the holds ended by
// Close; Closed is what Add and Unforced return once closed; Untrusted is
// what Add returns for a grant a ForceUnlock may have overtaken.
type Errors struct {
	Lost, Closed, ClosedHold, Untrusted error
}

// Round is what one renewal round did.
type Round struct {
	Holds, Lost, Failed, RoundTrips int
	Took                            time.Duration
}

// New starts the keeper of cfg; Close stops it.
func New(cfg Config) *Keeper {
	w := &Keeper{
		cfg:      cfg,
		interval: cfg.Lease / 3,
		holds:    map[*Hold]struct{}{},
		cad:      map[time.Duration]time.Time{},
		pulled:   map[time.Duration]time.Time{},
		running:  map[time.Duration]time.Time{},
		kick:     make(chan struct{}, 1),
		forced:   map[Ref]uint64{},
		forcing:  map[Ref]int{},
		calm:     map[Ref]chan struct{}{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	w.rounds, w.cancel = context.WithCancel(context.Background())
	w.dlTimer = time.AfterFunc(time.Hour, w.expire)
	w.dlTimer.Stop()
	w.slots.timer = time.AfterFunc(time.Hour, w.slots.fire)
	w.slots.timer.Stop()
	for _, err := range []error{nil, cfg.Errors.Lost, cfg.Errors.Closed, cfg.Errors.ClosedHold, cfg.Errors.Untrusted} {
		w.causes = append(w.causes, cause{err, newCause(err)})
	}
	go w.run()
	return w
}

// Add starts h, whose lease was set by a script stamped st: h gets its
// context (h.Ctx: part of h, it carries h, tells from its deadline, and
// ends with h.Parent unless the lease ran out first, see parent.go; its
// other values are h.Values()'s), and its lease is kept from now on. It
// registers nothing and returns Errors.Closed once the keeper is closed,
// and Errors.Untrusted when a ForceUnlock of the lock came after st; h's
// context is then cancelled with that error.
func (w *Keeper) Add(h *Hold, st Stamp) error {
	h.k = w
	h.dl.clear() // until registered
	if h.Obs != nil {
		h.Obs.base = valuesCtx{Context: h.Parent, h: h}
	}
	// Read before w.mu: h.Parent may be another hold's context, whose
	// methods may end that hold.
	h.gate.init(h.valuesBase())
	h.pdl = 0
	if d, ok := h.Parent.Deadline(); ok {
		h.pdl = stamp(d).pos()
	}
	ends := h.gate.ends
	h.own.h = h
	h.Ctx = &h.own // it carries h (ownCtx.Value)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		h.cancelOwn(EndClosed, nil, w.cfg.Errors.Closed)
		return w.cfg.Errors.Closed
	}
	if !w.trusted(st.Epoch, h.Ref, h.Covers) {
		w.mu.Unlock()
		h.cancelOwn(EndLost, nil, w.cfg.Errors.Untrusted)
		return w.cfg.Errors.Untrusted
	}
	sent := st.Sent
	w.holds[h] = struct{}{}
	if h.Renewed {
		w.plan(h.Lease, sent)
	}
	h.tmu.Lock()
	h.sent = sent
	h.at, h.atSet = h.dl.set(Deadline(sent, h.Lease)), true
	w.watch(h, h.at)
	h.tmu.Unlock()
	w.mu.Unlock()
	if ends { // a parent that can never end needs no watch
		h.OnEnd(context.AfterFunc(h.Parent, func() {
			h.Settle()
			h.call.parentEnded() // a release under way ends with it
		}))
	}
	return nil
}

// plan makes sure a renewed hold of lease granted by a script sent at sent
// is renewed before its deadline, a sixth of its lease ahead of it (room
// for the round): at its cadence's next round, or at a round pulled
// earlier when that one would come too late (a grant whose reply came
// late: a script that sat in a paused server's socket, a very slow link),
// or, for the first hold of its lease, a third of the lease from now. A
// round under way (its holds taken) does not renew the hold: its next
// round is the one that round's end sets, a third of the lease after its
// start (when that round found holds of the lease; otherwise the cadence
// starts again, as for a first hold). A pulled round is remembered until
// a round takes the hold (snapshot), so that the end of a round under way
// does not move it back (schedule). The loop may be asleep for longer: it
// is kicked. Called under w.mu.
func (w *Keeper) plan(lease time.Duration, sent time.Time) {
	need := Deadline(sent, lease).Add(-lease / 6)
	next, ok := w.cad[lease]
	if start, busy := w.running[lease]; busy && ok {
		next = start.Add(lease / 3)
	}
	switch first := time.Now().Add(lease / 3); {
	case !ok && first.Before(need):
		w.cad[lease] = first
	case !ok || next.After(need):
		w.cad[lease] = need
		if p, ok := w.pulled[lease]; !ok || need.Before(p) {
			w.pulled[lease] = need
		}
	default:
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
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
	h.at, h.atSet = h.dl.set(Deadline(sent, h.Lease)), true
	w.moved(h, h.at)
}

// End ends h for why: it leaves the table, its deadline stops, and its
// context is cancelled with cause, before anything else happens. It reports
// whether this call ended it; only one caller ever gets true.
func (w *Keeper) End(h *Hold, why EndReason, cause error) bool {
	return w.endFor(h, why, nil, cause, true)
}

// EndUntold is End without the report of the end (Config.Ended), which the
// caller makes with Told once it knows how the hold ended: a last release
// ends its hold before its script is sent, and learns from the reply
// whether Redis had lost the hold meanwhile.
func (w *Keeper) EndUntold(h *Hold, why EndReason) bool { return w.endFor(h, why, nil, nil, false) }

// Told reports the end of h, which EndUntold ended, as why, with cause.
func (w *Keeper) Told(h *Hold, why EndReason, cause error) { w.cfg.Ended(h, why, cause) }

// endFor is End, told when tell says so; err, for an end with h.Parent
// (EndParent), is h.Parent's error, which the hold's own context ends with.
func (w *Keeper) endFor(h *Hold, why EndReason, err, cause error, tell bool) bool {
	if !w.end(h, why, err, cause) {
		return false
	}
	if tell {
		w.cfg.Ended(h, why, cause)
	}
	return true
}

// end is endFor without the report.
func (w *Keeper) end(h *Hold, why EndReason, err, cause error) bool {
	w.mu.Lock()
	delete(w.holds, h)
	w.mu.Unlock()
	h.tmu.Lock()
	if h.why != NotEnded {
		h.tmu.Unlock()
		return false
	}
	h.why = why
	h.ending.Add(1)
	stops, ties, firsts := h.stops, h.ties, h.firsts
	h.stops, h.ties, h.firsts = nil, nil, nil
	h.tmu.Unlock()
	w.unwatch(h)
	for _, f := range firsts {
		f()
	}
	h.cancelOwn(why, err, cause)
	for _, cancel := range ties {
		cancel(cause)
	}
	// Only now that every context of the hold is cancelled: until then,
	// one that finds the deadline passed waits for this (see Settle).
	h.dl.clear()
	h.ending.Done()
	for _, stop := range stops {
		stop()
	}
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
	w.everForced.Store(true)
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
		if w.End(h, EndForced, w.cfg.Errors.Lost) && h.Ref != ref {
			others = append(others, h)
		}
	}
	return func() {
		for _, h := range others {
			w.cfg.GiveBack(h)
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

// resumed sets again the deadlines' timer after the wall clock jumped
// ahead of the monotonic one (the machine was suspended): the timer counts
// monotonic time, and would tell the holders late. A hold whose deadline
// passed meanwhile is told at once; so is one whose context is read first
// (see dlStore).
func (w *Keeper) resumed() { w.rearm() }

// Unforced returns the epoch of ref's lock (with those of covers, see
// epoch) once no ForceUnlock of any of them is in flight in this process:
// an attempt stamped while one is could not tell whether its script ran
// before the ForceUnlock's, and its grant would be refused; stamped after
// the ForceUnlock's script answered, it ran after it. Without wait it
// reports false at once instead of waiting; it returns ctx's error when
// ctx ends first, and ErrClosed when the client closes.
func (w *Keeper) Unforced(ctx context.Context, ref Ref, covers []Ref, wait bool) (uint64, bool, error) {
	if !w.everForced.Load() {
		// No ForceUnlock so far: epoch 0, and a grant stamped with it
		// that one overtakes is refused by Add, under mu.
		return 0, true, nil
	}
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
		case <-w.cfg.Closed:
			return 0, false, w.cfg.Errors.Closed
		}
	}
}
