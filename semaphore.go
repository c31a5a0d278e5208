package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/lua"
)

// semWaitCap bounds each wait of Acquire between two looks at Redis, so a
// lost wake-up message costs at most this long, even when the holders'
// leases are long or the permits were never set.
const semWaitCap = 2 * time.Second

// semReclaimLimit bounds how many expired holders one script reclaims, so a
// crowd of crashed holders cannot make one call block Redis for long; the
// rest are reclaimed by the following calls.
const semReclaimLimit = 100

// maxPermits keeps permit counts exact in Lua's doubles.
const maxPermits = 1 << 50

// Semaphore is a distributed counting semaphore whose permits are held by
// owners under a lease, so a crashed holder's permits come back by
// themselves. Its total is set with SetPermits, TrySetPermits or AddPermits,
// or stated on the handle with WithPermits; to follow a configuration
// change, call SetPermits with the new total.
//
// When Redis loses its data (a restart without persistence, a failover to
// a replica that did not have it yet), the total is lost with the holders:
// every hold's context ends with ErrLeaseLost at its next renewal, and
// Acquire waits until the total is set again, which a handle made with
// WithPermits does by itself at its next acquisition; without it, some
// process must call SetPermits again. docs/guarantees.md, "When Redis
// loses its data", says what each primitive does then.
//
// Permits are held as a Mutex's holds are: Acquire returns the hold's
// context; acquiring again through it adds permits to the same hold, and
// Release through it gives them back, in parts or all at once. A context
// without a hold of the semaphore gets a fresh owner. The hold's permits are
// kept alive by the Client's watchdog (or by a fixed lease, WithLease) until
// released, and released by redisync when the context they were acquired
// with ends. The scripts reclaim the permits of a holder whose lease has run
// out, by Redis's own clock, whenever anyone touches the semaphore.
//
// In Redis a semaphore is its name, a hash of the total ("permits") and the
// permits in use ("used"), plus two keys in the name's Cluster slot:
// "{tag}:sem-holders:<name>", a hash of owner → permits, and
// "{tag}:sem-expiry:<name>", a sorted set of owner → lease end in Redis's
// clock (tag is the name's hash tag, or the name); both vanish when nobody
// holds a permit. Whatever frees permits publishes how many on the channel
// "{tag}:sem-wake:<name>".
//
// A Semaphore is a cheap handle, safe for concurrent use.
type Semaphore struct {
	c       *Client
	name    string
	keys    []string // name, holders, expiry
	channel string
	spec    holds.Spec
	permits int // WithPermits: the total an acquisition creates when missing; 0: none
	err     error

	// Made once, shared by every call (never written), as the Mutex's.
	leaseMS    any                                                                           // spec.Lease in milliseconds
	permitsArg any                                                                           // permits
	chanArg    any                                                                           // channel
	release1   func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) // Release(ctx, 1)'s
}

// Semaphore returns a handle on the semaphore name. Bad input (an empty
// name, a name that cannot share its slot with companion keys, a bad
// option) is reported by every method of the handle.
//
// Options: WithLease gives the permits a fixed lease that the watchdog does
// not renew (they come free that long after the owner's latest Acquire),
// WithRenewedLease a lease of its own that the watchdog renews;
// WithPermits states the total, which acquisitions then create whenever it
// is missing (before anyone set it, after Redis lost its data). These are
// its options (SemaphoreOption).
func (c *Client) Semaphore(name string, opts ...SemaphoreOption) *Semaphore {
	s := &Semaphore{c: c, name: name, keys: []string{name, "", ""}}
	if keys.Taggable(name) {
		s.channel = keys.Companion(name, "sem-wake")
		s.keys = []string{name, keys.Companion(name, "sem-holders"), keys.Companion(name, "sem-expiry")}
	}
	s.spec.Wrap = wrapFor(c, "semaphore", name, keyType{name, "hash"}, keyType{s.keys[1], "hash"}, keyType{s.keys[2], "zset"})
	if c == nil {
		s.err = s.spec.Wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
		return s
	}
	lc, err := lockSetup(name, opts)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: semaphore name %q contains \"}\" without a hash tag", ErrInvalid, name)
	}
	s.err = s.spec.Wrap(err)
	s.spec.Ref = lease.Ref{Owner: c, Kind: string(KindSemaphore), Name: name}
	s.spec.Busy = (*semBusy)(s)
	s.spec.Lease, s.spec.Renewed = lc.leaseOf(c)
	s.permits = lc.permits
	s.leaseMS, s.permitsArg, s.chanArg = s.spec.Lease.Milliseconds(), s.permits, s.channel
	s.release1 = func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
		return s.c.holds.ReleaseBy(ctx, s.releaseCall(h, h.Arg(), 1, int64(count)))
	}
	return s
}

// Name returns the semaphore's name, which is also its main Redis key.
func (s *Semaphore) Name() string { return s.name }

func (s *Semaphore) check(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	return s.wrap(usable(ctx, s.c, s.spec.Wrap))
}

func (s *Semaphore) wrap(err error) error { return wrapOr(s.spec.Wrap, err) }

// checkN refuses a count of permits that is not positive or not exact.
func (s *Semaphore) checkN(what string, n int) error {
	if n <= 0 {
		return s.wrap(fmt.Errorf("%w: %s %d permits (must be positive)", ErrInvalid, what, n))
	}
	if n > maxPermits {
		return s.wrap(fmt.Errorf("%w: %s %d permits (at most %d)", ErrInvalid, what, n, maxPermits))
	}
	return nil
}

// SetPermits sets the semaphore's total permits to n (n ≥ 0) and wakes as
// many waiters as permits are free. Permits already held stay held: when n
// is below what is in use, nothing is available until enough are released.
// It is the way to follow a configuration change (a new limit): every
// process may call it with the configured total, idempotently, unlike
// AddPermits; TrySetPermits keeps a total already set.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n < 0 || n > maxPermits {
		return s.wrap(fmt.Errorf("%w: %d permits (must be 0 to %d)", ErrInvalid, n, maxPermits))
	}
	_, err := s.set(ctx, "set", n)
	return err
}

// TrySetPermits sets the total permits to n (n ≥ 0) only if they were never
// set, reporting whether it did. It is how one of many processes starting at
// once initialises the semaphore.
func (s *Semaphore) TrySetPermits(ctx context.Context, n int) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	if n < 0 || n > maxPermits {
		return false, s.wrap(fmt.Errorf("%w: %d permits (must be 0 to %d)", ErrInvalid, n, maxPermits))
	}
	return s.set(ctx, "try", n)
}

// AddPermits adds n permits to the total (n may be negative; a semaphore
// never set counts as 0) and wakes as many waiters as permits are free. It
// refuses, with an error wrapping ErrInvalid and changing nothing, n = 0 and
// a change that would leave fewer permits than are in use.
//
// Unlike SetPermits, an AddPermits that go-redis resends after a network
// error may add twice.
func (s *Semaphore) AddPermits(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if n == 0 || n > maxPermits || n < -maxPermits {
		return s.wrap(fmt.Errorf("%w: add %d permits (must be non-zero, at most %d either way)", ErrInvalid, n, maxPermits))
	}
	_, err := s.set(ctx, "add", n)
	return err
}

func (s *Semaphore) set(ctx context.Context, mode string, n int) (bool, error) {
	r, err := s.c.tr.Do(ctx, script(lua.SemSet, s.keys, mode, n, publish, semReclaimLimit, s.channel), nil).Int64Slice()
	if err != nil {
		return false, s.wrap(err)
	}
	if r[0] < 0 {
		return false, s.wrap(fmt.Errorf("%w: adding %d permits would leave fewer than the %d in use", ErrInvalid, n, r[1]))
	}
	return r[0] == 1, nil
}

// Available returns how many permits can be acquired now: the total minus
// the permits held under a live lease (never negative; 0 when the permits
// were never set, unless the handle states them with WithPermits). Expired
// holders are reclaimed first, never counted.
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	for {
		r, err := s.c.tr.Do(ctx, script(lua.SemAvailable, s.keys, publish, semReclaimLimit, s.channel), nil).Int64Slice()
		if err != nil {
			return 0, s.wrap(err)
		}
		if r[2] == 1 {
			continue // more expired holders to reclaim
		}
		total := r[0]
		if total < 0 && s.permits > 0 {
			total = int64(s.permits) // WithPermits: a missing total counts as stated
		}
		if total < 0 || r[1] >= total {
			return 0, nil
		}
		return int(total - r[1]), nil
	}
}

// Acquire acquires n permits (n > 0), waiting until they are free or ctx
// ends (then it returns an error wrapping ctx's error, leaving nothing
// behind). On a semaphore whose permits were never set, and for more permits
// than the semaphore has in total, it waits until permits are added (the
// error then says the permits were never set, if so).
//
// It returns the hold's context, derived from ctx, with Mutex.Lock's rules:
// through a context that already holds permits of the semaphore it adds
// them to that hold; the hold's permits are released when ctx ends; the
// context is cancelled with cause ErrLeaseLost if their lease is lost, and
// plainly when the hold's last permit is released. Waits are woken by
// releases (one waiter per permit freed) and look again at least every
// couple of seconds and when the nearest lease ends, so a lost message
// costs a delay, never a hang. On error, Acquire returns a nil context.
func (s *Semaphore) Acquire(ctx context.Context, n int) (context.Context, error) {
	return s.acquire(ctx, ctx, n, true, false)
}

// TryAcquire is Acquire without waiting: it returns an error wrapping
// ErrNotAcquired when fewer than n permits are free, saying so when the
// permits were never set (a misspelt name, or SetPermits not yet called).
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (context.Context, error) {
	return s.acquire(ctx, ctx, n, false, false)
}

// TryAcquireFor is Acquire waiting at most wait (wait > 0): after it, it
// returns an error wrapping ErrNotAcquired, leaving nothing behind. Permits
// it gets are held as long as ctx lasts.
func (s *Semaphore) TryAcquireFor(ctx context.Context, n int, wait time.Duration) (context.Context, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWait(wait); err != nil {
		return nil, s.wrap(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return s.acquire(ctx, wctx, n, true, true)
}

// errNeverSet explains a refusal on a semaphore whose permits were never set.
var errNeverSet = fmt.Errorf("%w: its permits were never set (SetPermits or TrySetPermits first; or is the name misspelt?)", ErrNotAcquired)

func (s *Semaphore) acquire(parent, wctx context.Context, n int, wait, bounded bool) (_ context.Context, err error) {
	if err := s.check(parent); err != nil {
		return nil, err
	}
	if err := s.checkN("acquire", n); err != nil {
		return nil, err
	}
	if err := wctx.Err(); err != nil {
		return nil, s.wrap(errs.Wait(err, parent, bounded))
	}
	h, err := holds.Entry(parent, s.spec.Ref)
	if err != nil {
		return nil, s.wrap(err)
	}
	if h != nil && (h.Lease != s.spec.Lease || h.Renewed != s.spec.Renewed) {
		return nil, s.wrap(fmt.Errorf("%w: the context holds permits with a %s, this handle asks for a %s",
			ErrInvalid, holds.LeaseText(h.Lease, h.Renewed), holds.LeaseText(s.spec.Lease, s.spec.Renewed)))
	}
	at := semAttempt{s: s, h: h, n: n, parent: parent, wctx: wctx, wait: wait}
	if h == nil { // a first acquisition's; permits added to a hold are a re-entry's
		at.a = s.c.holds.BeginWith(&s.spec, parent, wctx, wait, (*semScripts)(s))
		defer func() { err = at.a.Finish(err) }()
	}
	done, next, err := at.try()
	if err != nil {
		return nil, s.wrap(errs.Wait(err, parent, bounded))
	}
	if done {
		return at.result(), nil
	}
	if !wait {
		if at.neverSet {
			return nil, s.wrap(errNeverSet)
		}
		return nil, s.wrap(ErrNotAcquired)
	}
	if at.neverSet {
		s.c.log.Warn("redisync: waiting on a semaphore whose permits were never set", "name", s.name)
	}
	w := &semAttempt{} // the wait's, made only now
	*w = at
	if err := s.c.holds.AwaitShared(wctx, s.channel, wakeFreed, next, w.try); err != nil {
		err = errs.Wait(err, parent, bounded)
		if w.neverSet && (errors.Is(err, ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			err = fmt.Errorf("%w (its permits were never set)", err)
		}
		return nil, s.wrap(err)
	}
	return w.result(), nil
}

// semAttempt is one call's acquisition of n permits: a first
// acquisition's (a), or permits added to the hold h that the call's
// context carries; its attempts (try), and what they found.
type semAttempt struct {
	s        *Semaphore
	a        *holds.Acquisition
	h        *lease.Hold
	n        int
	parent   context.Context
	wctx     context.Context
	wait     bool
	neverSet bool            // the latest attempt found the permits never set
	hctx     context.Context // the context of the hold added to
}

// result is the context the acquisition returns once it has the permits.
func (t *semAttempt) result() context.Context {
	if t.h != nil {
		return t.hctx
	}
	return t.a.HoldCtx
}

// acquireCall is the acquire script's call taking n permits for the field
// whose argument is field, with the hold's permits before the call, its
// arguments kept in room (a hold's, or an acquisition's Room).
func (s *Semaphore) acquireCall(room *lease.Hold, field any, n, prev int) call {
	return call{Script: lua.SemAcquire, Keys: s.keys, Args: room.Args(field, n, prev, s.leaseMS, publish, semReclaimLimit, s.permitsArg, s.chanArg)}
}

// releaseCall is the release script's call that takes n permits back
// from the field whose argument is field, which holds count of them
// before the call (or, for a give-back, after them), its arguments kept
// in room (a hold's, or an acquisition's Room).
func (s *Semaphore) releaseCall(room *lease.Hold, field any, n int, count int64) call {
	return call{Script: lua.SemRelease, Keys: s.keys, Args: room.Args(field, n, count, publish, semReclaimLimit, s.chanArg)}
}

// try is one attempt.
func (t *semAttempt) try() (bool, time.Duration, error) {
	if t.h != nil {
		return t.more()
	}
	s, a := t.s, t.a
	field, r, d, err := a.Send(func(field string) call { return s.acquireCall(a.Room(), a.Arg(field), t.n, 0) })
	if r == nil {
		return false, d, err
	}
	if r[0] != 1 {
		t.neverSet = r[2] == 0
		return false, semBound(r[1]), nil
	}
	return a.GrantOne(field, int(r[1]), call{Script: lua.SemRenew, Keys: s.keys, Args: a.Args(a.Arg(field), s.leaseMS, publish, semReclaimLimit, s.chanArg)})
}

// semScripts is a Semaphore as the maker of its first acquisitions'
// give-backs (holds.Scripts).
type semScripts Semaphore

// Release gives back a granted attempt of field.
func (s *semScripts) Release(a *holds.Acquisition, field string) call {
	return call{Script: lua.SemDrop, Keys: s.keys, Args: a.Args(a.Arg(field), publish, semReclaimLimit, s.chanArg)}
}

// more adds the call's n permits to h, the hold its context carries.
func (t *semAttempt) more() (bool, time.Duration, error) {
	s, h, n, parent, wctx, wait := t.s, t.h, t.n, t.parent, t.wctx, t.wait
	held, err := s.heldWithin(parent, wctx)
	if err != nil {
		return false, 0, err
	}
	if held+n > maxPermits {
		return false, 0, fmt.Errorf("%w: would hold more than %d permits", ErrInvalid, maxPermits)
	}
	r, err := s.c.holds.UnderHold(wctx, wait, h, false, func(count int) []call { return []call{s.acquireCall(h, h.Arg(), n, count)} }, func(r []int64) {
		if r[0] == 1 {
			_ = s.c.holds.UndoNow(context.Background(), nil, s.releaseCall(h, h.Arg(), n, r[1]))
		}
	})
	if err == nil {
		switch r[0] {
		case -1: // the hold's lease ran out in Redis before this process noticed
			s.c.wd.End(h, lease.EndLost, ErrLeaseLost)
		case 1:
			h.Count = int(r[1])
			s.c.wd.Extend(h, h.LastSent)
		}
		h.Mu.Unlock()
	}
	switch {
	case errors.Is(err, holds.ErrEnded):
		return false, 0, holds.EndedError(h)
	case holds.NotReplicated(err) != nil: // WithReplicaAck: take the n back, under h's lock
		nr := holds.NotReplicated(err)
		nr.Undo = s.c.holds.UndoNow(wctx, h, s.releaseCall(h, h.Arg(), n, int64(nr.Count())))
		return false, 0, err
	case err != nil:
		return false, 0, err
	case r[0] == -1:
		return false, 0, errs.Lost
	case r[0] == 0:
		t.neverSet = r[2] == 0
		return false, semBound(r[1]), nil
	case !h.Live():
		// Lost (or ended) while the script was on its way: its
		// permits go with the hold's give-back, as a Mutex
		// re-entry's do.
		return false, 0, holds.EndedError(h)
	}
	t.hctx = h.ContextFor(parent)
	return true, 0, nil
}

// wakeFreed is the semaphore's wake policy: a message carries the number of
// permits that came free, and wakes that many local waiters.
func wakeFreed(payload string) int {
	n, err := strconv.Atoi(payload)
	if err != nil {
		return -1
	}
	return max(n, 0)
}

// semBound turns the acquire script's bound (ms until the nearest lease
// ends, 0 to look again at once, -1 for none) into a wait.
func semBound(ms int64) time.Duration {
	switch {
	case ms < 0:
		return semWaitCap
	case ms == 0:
		return time.Millisecond
	default:
		return min(time.Duration(ms)*time.Millisecond, semWaitCap)
	}
}

// Release releases n of the permits held by the hold ctx carries (n > 0)
// and wakes up to n waiters; the hold's context is cancelled when its last
// permit is released (before the permits are free). It works with a
// cancelled ctx.
//
// Releasing more than the hold has returns an error wrapping ErrNotHeld and
// changes nothing. Its other results are Mutex.Unlock's: nil when the hold
// already ended with the context it was taken with, and an error wrapping
// ErrNotHeld (and ErrLeaseLost) when its lease was lost (its deadline had
// passed, or Redis no longer had its permits, told as Mutex.Unlock tells
// it), in which case whatever Redis still kept of the hold is released. It
// returns by the end of the context the permits were acquired with at the
// latest, and within 5s, with the results Mutex.Unlock has then: nil once
// that context has ended (the permits were the caller's until then; they
// are released in the background, and their lease frees them at the
// latest), an error when Redis has not answered within 5s while it lives.
func (s *Semaphore) Release(ctx context.Context, n int) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.checkN("release", n); err != nil {
		return err
	}
	send := s.release1
	if n != 1 {
		send = func(ctx context.Context, h *lease.Hold, count int) (int64, time.Time, error) {
			return s.c.holds.ReleaseBy(ctx, s.releaseCall(h, h.Arg(), n, int64(count)))
		}
	}
	return s.c.holds.Release(ctx, &s.spec, n, send)
}

// held returns how many permits the hold ctx carries has, as this process
// knows without a round trip (0 when none).
func (s *Semaphore) held(ctx context.Context) int {
	n, _ := s.heldWithin(ctx, context.Background())
	return n
}

// heldWithin is held waiting for the hold's lock (which a call through the
// hold that left may keep until its reply comes) only as long as wctx
// lasts: it returns wctx's error then.
func (s *Semaphore) heldWithin(ctx, wctx context.Context) (int, error) {
	if s.err != nil {
		return 0, nil
	}
	h := holds.Held(ctx, s.spec.Ref)
	if h == nil {
		return 0, nil
	}
	if err := h.Mu.LockCtx(wctx); err != nil {
		return 0, err
	}
	defer h.Mu.Unlock()
	return h.Count, nil
}
