package redisync

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redisync-go/redisync/internal/keys"
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
// themselves. Its total is set with SetPermits, TrySetPermits or AddPermits.
//
// Permits belong to the context's owner, as a Mutex's holds do: the owner
// may hold several and release them in parts, and its permits are kept
// alive by the Client's watchdog (or by a fixed lease, WithLease) until
// released. The scripts reclaim the permits of a holder whose lease has run
// out, by Redis's own clock, whenever anyone touches the semaphore.
//
// In Redis a semaphore is its name, a hash of the total ("permits") and the
// permits in use ("used"), plus two keys in the name's Cluster slot (for a
// name without a hash tag): "{name}:holders", a hash of owner → permits, and
// "{name}:expiry", a sorted set of owner → lease end in Redis's clock; both
// vanish when nobody holds a permit. Whatever frees permits publishes how
// many on the channel "{name}:channel".
//
// A Semaphore is a cheap handle, safe for concurrent use.
type Semaphore struct {
	c       *Client
	name    string
	keys    []string // name, holders, expiry
	channel string
	lease   time.Duration
	renewed bool
	err     error
}

// Semaphore returns a handle on the semaphore name. Bad input (an empty
// name, a name that cannot share its slot with companion keys, a bad
// option) is reported by every method of the handle.
//
// WithLease gives the permits a fixed lease that the watchdog does not
// renew: they come free that long after the owner's latest Acquire.
func (c *Client) Semaphore(name string, opts ...LockOption) *Semaphore {
	s := &Semaphore{name: name}
	if c == nil {
		s.err = fmt.Errorf("%w: nil Client", ErrInvalid)
		return s
	}
	lc, err := lockSetup(name, opts, false)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: semaphore name %q contains \"}\" without a hash tag", ErrInvalid, name)
	}
	s.c, s.err, s.lease, s.renewed = c, err, c.lease, true
	if lc.lease > 0 {
		s.lease, s.renewed = lc.lease, false
	}
	s.keys = []string{name, keys.Tagged(name, "holders"), keys.Tagged(name, "expiry")}
	s.channel = keys.Tagged(name, "channel")
	return s
}

// Name returns the semaphore's name, which is also its main Redis key.
func (s *Semaphore) Name() string { return s.name }

func (s *Semaphore) check() error {
	if s.err != nil {
		return s.err
	}
	return s.c.checkOpen()
}

func (s *Semaphore) wrap(err error) error {
	return fmt.Errorf("redisync: semaphore %q: %w", s.name, err)
}

func (s *Semaphore) holdID(field string) string { return "sem\x00" + s.name + "\x00" + field }

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
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if err := s.check(); err != nil {
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
	if err := s.check(); err != nil {
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
	if err := s.check(); err != nil {
		return err
	}
	if n == 0 || n > maxPermits || n < -maxPermits {
		return s.wrap(fmt.Errorf("%w: add %d permits (must be non-zero, at most %d either way)", ErrInvalid, n, maxPermits))
	}
	_, err := s.set(ctx, "add", n)
	return err
}

func (s *Semaphore) set(ctx context.Context, mode string, n int) (bool, error) {
	r, err := lua.SemSet.Run(ctx, s.c.rdb, s.keys, mode, n, s.channel, semReclaimLimit).Int64Slice()
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
// were never set). Expired holders are reclaimed first, never counted.
func (s *Semaphore) Available(ctx context.Context) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	for {
		r, err := lua.SemAvailable.Run(ctx, s.c.rdb, s.keys, s.channel, semReclaimLimit).Int64Slice()
		if err != nil {
			return 0, s.wrap(err)
		}
		if r[2] == 1 {
			continue // more expired holders to reclaim
		}
		if r[0] < 0 || r[1] >= r[0] {
			return 0, nil
		}
		return int(r[0] - r[1]), nil
	}
}

// Acquire acquires n permits (n > 0) for ctx's owner, waiting until they
// are free or ctx ends (then it returns ctx's error). A context without an
// owner gets a new one. On a semaphore whose permits were never set, and
// for more permits than the semaphore has in total, it waits until permits
// are added.
//
// It returns the hold's context, cancelled with cause ErrLeaseLost if the
// permits' lease is lost and plainly when the owner's last permit is
// released; an owner that already holds permits of the semaphore gets back
// the context it passed. On error, Acquire returns ctx unchanged. Waits are
// woken by releases (one waiter per permit freed) and look again at least
// every couple of seconds and when the nearest lease ends, so a lost
// message costs a delay, never a hang.
func (s *Semaphore) Acquire(ctx context.Context, n int) (context.Context, error) {
	return s.acquire(ctx, n, true)
}

// TryAcquire is Acquire without waiting: it returns an error wrapping
// ErrNotAcquired when fewer than n permits are free (or the permits were
// never set).
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (context.Context, error) {
	return s.acquire(ctx, n, false)
}

func (s *Semaphore) acquire(parent context.Context, n int, wait bool) (context.Context, error) {
	if err := s.check(); err != nil {
		return parent, err
	}
	if err := s.checkN("acquire", n); err != nil {
		return parent, err
	}
	if err := parent.Err(); err != nil {
		return parent, err
	}
	ctx, o := ensureOwner(parent)
	hctx, next, err := s.try(ctx, o, n)
	if err != nil {
		return parent, err
	}
	if hctx != nil {
		return hctx, nil
	}
	if !wait {
		return parent, s.wrap(ErrNotAcquired)
	}
	err = s.c.awaitShared(ctx, s.channel, wakeFreed, next, func() (bool, time.Duration, error) {
		hctx, next, err = s.try(ctx, o, n)
		return hctx != nil, next, err
	})
	if err != nil {
		return parent, err
	}
	return hctx, nil
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

// try runs the acquire script once. It returns the hold's context when o
// now holds n more permits, or the bound to wait before trying again.
func (s *Semaphore) try(ctx context.Context, o *owner, n int) (context.Context, time.Duration, error) {
	field := s.c.field(o)
	id := s.holdID(field)
	leaseMs := s.lease.Milliseconds()

	o.mu.Lock()
	defer o.mu.Unlock()
	h := s.c.wd.get(id)
	prev := 0
	if h != nil {
		prev = h.count
	}
	if prev+n > maxPermits {
		return nil, 0, s.wrap(fmt.Errorf("%w: would hold more than %d permits", ErrInvalid, maxPermits))
	}
	// The script runs to completion even if ctx ends meanwhile: permits
	// taken in Redis but abandoned here would stay taken for a whole lease.
	sent := time.Now()
	r, err := lua.SemAcquire.Run(context.WithoutCancel(ctx), s.c.rdb, s.keys,
		field, n, prev, leaseMs, s.channel, semReclaimLimit).Int64Slice()
	if err != nil {
		return nil, 0, s.wrap(err)
	}
	switch r[0] {
	case -1:
		// Our permits' lease ran out in Redis before this process noticed.
		s.c.wd.lose(h, ErrLeaseLost)
		return nil, 0, s.wrap(ErrLeaseLost)
	case 0:
		return nil, semBound(r[1]), nil
	}
	if h != nil {
		h.count = int(r[1])
		s.c.wd.extend(h, sent)
		return ctx, 0, nil
	}
	hctx, cancel := context.WithCancelCause(ctx)
	h = &hold{
		id:      id,
		lease:   s.lease,
		renewed: s.renewed,
		renew:   call{lua.SemRenew, s.keys, []any{field, leaseMs, s.channel, semReclaimLimit}},
		release: call{lua.SemDrop, s.keys, []any{field, s.channel, semReclaimLimit}},
		count:   int(r[1]),
		ctx:     hctx,
		cancel:  cancel,
	}
	if !s.c.wd.add(h, sent) {
		cancel(ErrClosed)
		rctx, done := detach(ctx)
		defer done()
		_ = lua.SemDrop.Run(rctx, s.c.rdb, s.keys, field, s.channel, semReclaimLimit).Err()
		return nil, 0, ErrClosed
	}
	return hctx, 0, nil
}

// Release releases n of the permits ctx's owner holds (n > 0) and wakes up
// to n waiters. Releasing more than the owner holds (including after its
// lease was lost) returns an error wrapping ErrNotHeld and changes nothing.
// It works with a cancelled ctx; the hold's context is cancelled when the
// owner's last permit is released.
//
// One exception: releasing all of the owner's permits after Redis lost them
// (a failover, a deleted key) before this process noticed succeeds, and the
// hold's context is cancelled plainly: the script cannot tell that case from
// the same release resent by go-redis after it succeeded.
//
// After an error other than ErrNotHeld on the owner's last permits (Redis
// unreachable), they are no longer renewed: Redis frees them when their
// lease ends.
func (s *Semaphore) Release(ctx context.Context, n int) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.checkN("release", n); err != nil {
		return err
	}
	o := ownerOf(ctx)
	if o == nil {
		return s.wrap(fmt.Errorf("%w (the context carries no owner)", ErrNotHeld))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	field := s.c.field(o)

	o.mu.Lock()
	defer o.mu.Unlock()
	h := s.c.wd.get(s.holdID(field))
	if h == nil {
		return s.wrap(fmt.Errorf("%w (release %d permits, none held)", ErrNotHeld, n))
	}
	count := h.count
	if n > count {
		return s.wrap(fmt.Errorf("%w (release %d permits, %d held)", ErrNotHeld, n, count))
	}
	last := n == count
	if last {
		// Renewals stop before the release is sent, so none can follow it.
		s.c.wd.remove(h)
	}
	r, err := lua.SemRelease.Run(ctx, s.c.rdb, s.keys, field, n, count, s.channel, semReclaimLimit).Int64()
	switch {
	case err != nil:
		if last {
			h.cancel(nil)
		}
		return s.wrap(err)
	case r == 0:
		s.c.wd.lose(h, ErrLeaseLost)
		h.cancel(ErrLeaseLost) // no-op unless already removed above
		return s.wrap(fmt.Errorf("%w (lease lost)", ErrNotHeld))
	case r == 1 && !last:
		h.count = count - n
	default:
		s.c.wd.remove(h)
		h.cancel(nil)
	}
	return nil
}

// held returns how many permits of the semaphore ctx's owner holds, as this
// process knows without a round trip (0 when none).
func (s *Semaphore) held(ctx context.Context) int {
	if s.err != nil {
		return 0
	}
	o := ownerOf(ctx)
	if o == nil {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if h := s.c.wd.get(s.holdID(s.c.field(o))); h != nil {
		return h.count
	}
	return 0
}
