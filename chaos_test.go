package redisync

// TestChaos: a bounded chaos test. Several Clients, each on its own go-redis
// pool (like separate processes), and several goroutines per Client hammer a
// Mutex, a FairMutex, an RWMutex (readers and writers), a Semaphore, a
// MultiLock over the Mutex's name and another, and an Election, while
// a fault injector disturbs the private redis-server they share: killed
// subscription connections, a flushed script cache, pauses (SIGSTOP) shorter
// and longer than the lease, restarts that lose every key (some of them
// loading another dataset for a second, answering LOADING meanwhile), and
// killed ordinary connections. Throughout, it checks the promises of the contract:
//
//  1. Exclusion, and 4. every holder told before another holds: while a
//     hold's context is live its owner holds the lock, so whenever a holder
//     is seen live, no conflicting holder may be seen live too (Mutex and
//     MultiLock together, FairMutex, RWMutex writer against anyone, RWMutex
//     readers among themselves allowed, one leader of the Election); and
//     each leader's term is above the terms of the leaders before it.
//  2. Every wait is bounded: a call with a deadline returns within the
//     deadline plus chaosSlack, whatever Redis does.
//  3. The Semaphore never grants more permits to live holders than it has.
//  5. Nothing is left in Redis right after the run (but the semaphore's
//     total, the fencing counter and the election's term counter): not
//     even a hold that would expire by itself.
//  6. No goroutine of the library outlives the Clients' Close.
//  7. Fencing tokens keep increasing across every fault, restarts that lose
//     the data while a fenced holder holds included, and the resource that
//     checks them is never locked out (chaos_fence_test.go).
//  8. The Semaphore's handles state its total (WithPermits): after a
//     restart that lost it, nobody sets it again by hand.
//
// The faults run for 20s (at least one of each kind; about 25s in all),
// REDISYNC_CHAOS=5m runs them for five minutes. Skipped with -short.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/redistest"
	"github.com/redisync-go/redisync/internal/transport"
)

const (
	// chaosLease is the Clients' watchdog timeout: short, so that leases
	// run out, are renewed and are lost many times within the test.
	chaosLease = 1500 * time.Millisecond
	// chaosWaiterTimeout bounds how long a FairMutex or RWMutex waiter
	// whose leave could not be sent stays in Redis.
	chaosWaiterTimeout = 1500 * time.Millisecond
	// chaosSlack is how far past its deadline a call may return: the
	// scheduler of a busy machine under the race detector.
	chaosSlack = time.Second
	// chaosSyncSlack is how far past its deadline a re-entry may return
	// (a nested Lock through the hold's context, or a Semaphore acquire
	// through it): as for a first acquisition, its wait ends with its
	// context even while Redis does not answer (it runs under the hold's
	// lock, and an abandoned re-entry is taken back). Kept apart to report
	// it on its own line.
	chaosSyncSlack = chaosSlack
	// chaosRestartWindow is how long after a restart that lost every key
	// a stale holder's context may still be live (see restartCovers).
	chaosRestartWindow = chaosLease + time.Second

	// A restart-loading fault has Redis load chaosLoadKeys keys, one per
	// chaosLoadPerKey, before it is ready: it answers LOADING for about a
	// second.
	chaosLoadKeys   = 2000
	chaosLoadPerKey = 500 * time.Microsecond
	chaosClients    = 3
	chaosPermits    = 2
)

// chaosMode says how a holder takes part in its lock.
type chaosMode int

const (
	modeExclusive chaosMode = iota // Mutex, FairMutex
	modeRead                       // RWMutex reader
	modeWrite                      // RWMutex writer
	modePermits                    // Semaphore
)

// chaosHolder is one hold as the test sees it.
type chaosHolder struct {
	who     string
	owner   uint64 // the same for a writer and its downgraded read hold
	mode    chaosMode
	permits int             // modePermits: what the test counts it holds (guarded by the tracker's mu)
	ctx     context.Context // the hold's context
	began   time.Time       // when the call that took it began
	got     time.Time       // when that call returned
	// granted is when Redis granted what the hold holds: got, or, for a
	// Mutex hold handed over in memory (it takes over its releaser's
	// Redis field), the grant of that field's first hold.
	granted time.Time
}

// conflicts reports whether holders in modes a and b may not both hold.
func conflicts(a, b chaosMode) bool {
	return !(a == modeRead && b == modeRead)
}

// chaosTracker is the in-process view of one lock: the holders registered
// as inside it. A holder is registered right after its call returned and
// unregistered after its last release returned (by then its context is
// done), so the set holds every holder whose context may be live.
type chaosTracker struct {
	name  string
	total int // Semaphore: its permits
	mu    sync.Mutex
	in    map[*chaosHolder]struct{}
	seen  map[[2]uint64]bool   // overlaps already reported or excused, by owners
	field map[string]time.Time // a Mutex's Redis owner fields, with when Redis granted each
}

func newTracker(name string, total int) *chaosTracker {
	return &chaosTracker{name: name, total: total, in: map[*chaosHolder]struct{}{}, seen: map[[2]uint64]bool{},
		field: map[string]time.Time{}}
}

// grantedAt returns when Redis granted the hold of a call that returned at
// got with field (see chaosHolder.granted): a field seen before was handed
// over in memory, and holds what Redis granted its first holder.
func (tr *chaosTracker) grantedAt(field string, got time.Time) time.Time {
	if field == "" {
		return got
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if t, ok := tr.field[field]; ok {
		return t
	}
	tr.field[field] = got
	return got
}

// window is one restart of Redis (done is zero while it is under way).
type window struct{ start, done time.Time }

// chaos is the state of one chaos run.
type chaos struct {
	t     *testing.T
	start time.Time
	lease time.Duration

	mu          sync.Mutex
	stats       map[string]map[string]int // primitive -> event -> count
	faults      map[string]int
	faultLog    []string // "+12.3s restart (0.4s)"
	current     string   // the fault under way, if any
	restarts    []window
	violations  int
	kinds       map[string]int // violations by kind
	checks      int
	excused     int
	maxStale    time.Duration // the latest, after a restart, that an excused overlap was seen
	maxWait     time.Duration
	maxWaitWhat string
	maxOver     time.Duration
	maxOverWhat string
	maxSync     time.Duration // the same for re-entries (see chaosSyncSlack)
	maxSyncWhat string
	maxRelease  time.Duration
	maxRelWhat  string
	leasesLost  int

	fence chaosFence // the fenced holders (chaos_fence_test.go)
}

func (ch *chaos) since(at time.Time) string {
	return fmt.Sprintf("+%.3fs", at.Sub(ch.start).Seconds())
}

func (ch *chaos) count(prim, event string) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	m := ch.stats[prim]
	if m == nil {
		m = map[string]int{}
		ch.stats[prim] = m
	}
	m[event]++
}

// violate fails the test with a message that says what was going on.
func (ch *chaos) violate(format string, args ...any) { ch.violateKind(format, format, args...) }

// violateKind is violate, counting the violation under kind for the
// summary; five of each kind are told.
func (ch *chaos) violateKind(kind, format string, args ...any) {
	ch.mu.Lock()
	ch.violations++
	ch.kinds[kind]++
	n := ch.kinds[kind]
	ctx := ch.faultContextLocked()
	ch.mu.Unlock()
	if n > 5 {
		return // the first ones tell the story; the count is in the summary
	}
	ch.t.Errorf("VIOLATION at %s: %s [%s]", ch.since(time.Now()), fmt.Sprintf(format, args...), ctx)
}

// faultContextLocked describes the fault under way and the latest ones.
func (ch *chaos) faultContextLocked() string {
	var b strings.Builder
	if ch.current != "" {
		fmt.Fprintf(&b, "fault under way: %s; ", ch.current)
	}
	b.WriteString("latest faults: ")
	from := max(len(ch.faultLog)-3, 0)
	if from == len(ch.faultLog) {
		b.WriteString("none")
	}
	b.WriteString(strings.Join(ch.faultLog[from:], ", "))
	return b.String()
}

// restartCovers reports whether an overlap seen at now between h and live
// may be the documented loss of a failover (DESIGN.md, failure mode 6): a
// restart of Redis without persistence loses every lock, so others can
// acquire at once, while a holder from before the restart only hears of it
// at its next renewal (within a third of the lease, or at its deadline if
// Redis does not answer meanwhile): "the holder is told, but maybe late".
// An overlap is excused only within chaosRestartWindow of a restart's end,
// and only if one of the holders was granted its hold (its call returned)
// before that restart ended, so that it may hold a lock the restart lost. A
// call that began before the restart but was granted after it was granted
// by the Redis that came back, like any other: it is not excused, unless
// it was handed a Mutex in memory by a holder of this process: it then
// holds what Redis granted before (the same owner field), and is told at
// its next renewal as that holder would have been (Mutex.Unlock's doc).
func (ch *chaos) restartCovers(now time.Time, h *chaosHolder, live []*chaosHolder) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, r := range ch.restarts {
		done := r.done
		if done.IsZero() {
			done = now
		}
		if now.Before(r.start) || now.After(done.Add(chaosRestartWindow)) {
			continue
		}
		stale := h.granted.Before(done)
		for _, o := range live {
			stale = stale || o.granted.Before(done)
		}
		if stale {
			ch.maxStale = max(ch.maxStale, now.Sub(done))
			return true
		}
	}
	return false
}

// checkLocked checks, with tr.mu held, that h may hold what it holds now:
// no conflicting holder of another owner is live (Semaphore: the live
// holders' permits, h's included, are within the total). The others'
// contexts are read before h's own: if h's is live after, it was live when
// theirs were seen live, so both held at that moment. A holder whose
// context is already done is not checked: it no longer holds. Each overlap
// is reported (or excused) once.
func (ch *chaos) checkLocked(tr *chaosTracker, h *chaosHolder, what string) {
	now := time.Now()
	var live []*chaosHolder
	for o := range tr.in {
		if o == h || o.owner == h.owner || !conflicts(h.mode, o.mode) {
			continue
		}
		if o.ctx.Err() == nil {
			live = append(live, o)
		}
	}
	if h.ctx.Err() != nil {
		return
	}
	ch.mu.Lock()
	ch.checks++
	ch.mu.Unlock()
	bad := len(live) > 0
	if h.mode == modePermits {
		sum := h.permits
		for _, o := range live {
			sum += o.permits
		}
		bad = sum > tr.total
	}
	if !bad {
		return
	}
	// One report per overlap: by the pair of owners (Semaphore: by the
	// holder that finds the permits over-granted).
	key := [2]uint64{h.owner, 0}
	if h.mode != modePermits {
		a, b := h.owner, live[0].owner
		key = [2]uint64{min(a, b), max(a, b)}
	}
	if tr.seen[key] {
		return
	}
	tr.seen[key] = true
	desc := func(x *chaosHolder) string {
		p := ""
		if x.mode == modePermits {
			p = fmt.Sprintf(", %d permits", x.permits)
		}
		return fmt.Sprintf("%s (call began %s, returned %s%s)", x.who, ch.since(x.began), ch.since(x.got), p)
	}
	var others []string
	for _, o := range live {
		others = append(others, desc(o))
	}
	if ch.restartCovers(now, h, live) {
		ch.mu.Lock()
		ch.excused++
		n := ch.excused
		ch.mu.Unlock()
		if n <= 3 {
			ch.t.Logf("excused (a restart lost the data) at %s on %q: %s while live: %s", ch.since(now), tr.name, desc(h), strings.Join(others, "; "))
		}
		return
	}
	kind := "exclusion broken"
	if h.mode == modePermits {
		kind = fmt.Sprintf("semaphore over-granted (total %d)", tr.total)
	}
	ch.violate("%s on %q (seen %s): %s holds while these holders' contexts are live: %s",
		kind, tr.name, what, desc(h), strings.Join(others, "; "))
}

// enter registers h as inside its lock, after checking it.
func (ch *chaos) enter(tr *chaosTracker, h *chaosHolder) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ch.checkLocked(tr, h, "on acquisition")
	tr.in[h] = struct{}{}
}

// audit checks h again during its work.
func (ch *chaos) audit(tr *chaosTracker, h *chaosHolder) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ch.checkLocked(tr, h, "during the work")
}

// addPermits changes what h counts it holds: before a release (d < 0) or
// after an acquisition (d > 0, then checked).
func (ch *chaos) addPermits(tr *chaosTracker, h *chaosHolder, d int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	h.permits += d
	if d > 0 {
		ch.checkLocked(tr, h, "after adding a permit to the hold")
	}
}

func (ch *chaos) exit(tr *chaosTracker, h *chaosHolder) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	delete(tr.in, h)
}

// timed records a call that began at began and returned at ret, with a
// deadline (zero: none), and fails the test if it returned too late. sync
// says the call is a re-entry (see chaosSyncSlack).
func (ch *chaos) timed(prim, op string, sync bool, began, ret, deadline time.Time, err error) {
	wait := ret.Sub(began)
	class := "ok"
	if err != nil {
		class, _ = chaosClass(err, false)
	}
	what := fmt.Sprintf("%s.%s (%s) at %s", prim, op, class, ch.since(began))
	slack, maxOver, maxWhat := chaosSlack, &ch.maxOver, &ch.maxOverWhat
	if sync {
		slack, maxOver, maxWhat = chaosSyncSlack, &ch.maxSync, &ch.maxSyncWhat
	}
	ch.mu.Lock()
	if wait > ch.maxWait && !sync {
		ch.maxWait, ch.maxWaitWhat = wait, what
	}
	var over time.Duration
	if !deadline.IsZero() {
		over = ret.Sub(deadline)
		if over > *maxOver {
			*maxOver, *maxWhat = over, what
		}
	}
	ch.mu.Unlock()
	if !deadline.IsZero() && over > slack {
		ch.violate("unbounded wait: %s returned %v after its deadline (began %s, deadline %s, returned %s, err %v)",
			what, over.Round(time.Millisecond), ch.since(began), ch.since(deadline), ch.since(ret), err)
	}
}

// chaosTransient lists the replies of a Redis that is there but not ready
// (loading its data, a replica, a cluster reconfiguring): a waiting call
// must ride them out like any other wait, not return them.
var chaosTransient = []string{"LOADING", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"}

// chaosWaits says whether op is a waiting call (Lock, TryLockFor, and the
// re-entries and downgrades that are Lock calls through a hold).
func chaosWaits(prim, op string) bool {
	switch op {
	case "Lock", "TryLockFor", "downgrade":
		return true
	case "re-entry":
		return prim != "Semaphore" // the Semaphore's adds a permit with TryAcquire
	}
	return false
}

// chaosClass sorts an error from a call; unexpected ones fail the test.
// waits says the call was a waiting one (see chaosWaits): a transient
// reply is unexpected from it.
func chaosClass(err error, waits bool) (class string, unexpected bool) {
	switch {
	case errors.Is(err, ErrInvalid):
		return "invalid", true
	case errors.Is(err, ErrClosed):
		return "closed", true
	case errors.Is(err, ErrLeaseLost):
		return "lease lost", false
	case errors.Is(err, ErrNotAcquired):
		return "not acquired", false
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline", false
	case errors.Is(err, context.Canceled):
		return "canceled", false
	case errors.Is(err, ErrNotHeld):
		return "not held", true
	}
	s := err.Error()
	for _, k := range []string{"NOSCRIPT", "WRONGTYPE", "ERR "} {
		if strings.Contains(s, k) {
			return "redis refused: " + k, true
		}
	}
	for _, k := range chaosTransient {
		if strings.Contains(s, k) {
			return "transient: " + k, waits
		}
	}
	// Redis unreachable, paused or restarting: expected during faults.
	for _, k := range []string{"EOF", "connection refused", "connection reset", "broken pipe",
		"i/o timeout", "use of closed network connection", "pool timeout"} {
		if strings.Contains(s, k) {
			return "unreachable: " + k, false
		}
	}
	return "other: " + s, true
}

// chaosOps is one primitive (or mode) as a plain lock. n is the permits of
// a Semaphore (1 for the others).
type chaosOps struct {
	prim   string
	mode   chaosMode
	tr     *chaosTracker
	lock   func(ctx context.Context, n int) (context.Context, error)
	try    func(ctx context.Context, n int) (context.Context, error)
	tryFor func(ctx context.Context, n int, wait time.Duration) (context.Context, error)
	unlock func(ctx context.Context, n int) error
	// again re-enters through a hold's context (Semaphore: adds a permit
	// to the hold without waiting); unagain gives it back.
	again   func(hctx context.Context) (context.Context, error)
	unagain func(ctx context.Context) error
	// downgrade takes the read lock through a write hold (RWMutex writers).
	downgrade   func(hctx context.Context) (context.Context, error)
	undowngrade func(ctx context.Context) error
	// token reads a fenced hold's token (the fenced Mutex); nil otherwise.
	token func(ctx context.Context) (int64, bool)
	// field reads a hold's Redis owner field (the Mutex, whose Unlock may
	// hand it over in memory); nil otherwise.
	field func(hctx context.Context) string
}

// exclusiveLock is what the Mutex, the FairMutex and the MultiLock have in
// common.
type exclusiveLock interface {
	Lock(ctx context.Context) (context.Context, error)
	TryLock(ctx context.Context) (context.Context, error)
	TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error)
	Unlock(ctx context.Context) error
}

// chaosExclusiveOps is the chaos operations of l, a prim.
func chaosExclusiveOps(prim string, l exclusiveLock, tr *chaosTracker) chaosOps {
	return chaosOps{
		prim: prim, mode: modeExclusive, tr: tr,
		lock: func(ctx context.Context, _ int) (context.Context, error) { return l.Lock(ctx) },
		try:  func(ctx context.Context, _ int) (context.Context, error) { return l.TryLock(ctx) },
		tryFor: func(ctx context.Context, _ int, w time.Duration) (context.Context, error) {
			return l.TryLockFor(ctx, w)
		},
		unlock:  func(ctx context.Context, _ int) error { return l.Unlock(ctx) },
		again:   l.Lock,
		unagain: l.Unlock,
	}
}

func chaosMutexOps(m *Mutex, tr *chaosTracker) chaosOps {
	ops := chaosExclusiveOps("Mutex", m, tr)
	ops.field = func(hctx context.Context) string {
		if h := holds.Carried(hctx, m.spec.Ref); h != nil {
			return h.Field
		}
		return ""
	}
	return ops
}

func chaosFairOps(f *FairMutex, tr *chaosTracker) chaosOps {
	return chaosExclusiveOps("FairMutex", f, tr)
}

func chaosReaderOps(r *RWMutex, tr *chaosTracker) chaosOps {
	return chaosOps{
		prim: "RWMutex-read", mode: modeRead, tr: tr,
		lock: func(ctx context.Context, _ int) (context.Context, error) { return r.RLock(ctx) },
		try:  func(ctx context.Context, _ int) (context.Context, error) { return r.TryRLock(ctx) },
		tryFor: func(ctx context.Context, _ int, w time.Duration) (context.Context, error) {
			return r.TryRLockFor(ctx, w)
		},
		unlock:  func(ctx context.Context, _ int) error { return r.RUnlock(ctx) },
		again:   r.RLock,
		unagain: r.RUnlock,
	}
}

func chaosWriterOps(r *RWMutex, tr *chaosTracker) chaosOps {
	return chaosOps{
		prim: "RWMutex-write", mode: modeWrite, tr: tr,
		lock: func(ctx context.Context, _ int) (context.Context, error) { return r.Lock(ctx) },
		try:  func(ctx context.Context, _ int) (context.Context, error) { return r.TryLock(ctx) },
		tryFor: func(ctx context.Context, _ int, w time.Duration) (context.Context, error) {
			return r.TryLockFor(ctx, w)
		},
		unlock:      func(ctx context.Context, _ int) error { return r.Unlock(ctx) },
		again:       r.Lock,
		unagain:     r.Unlock,
		downgrade:   r.RLock,
		undowngrade: r.RUnlock,
	}
}

func chaosSemOps(s *Semaphore, tr *chaosTracker) chaosOps {
	return chaosOps{
		prim: "Semaphore", mode: modePermits, tr: tr,
		lock:    s.Acquire,
		try:     s.TryAcquire,
		tryFor:  s.TryAcquireFor,
		unlock:  s.Release,
		again:   func(hctx context.Context) (context.Context, error) { return s.TryAcquire(hctx, 1) },
		unagain: func(ctx context.Context) error { return s.Release(ctx, 1) },
	}
}

var chaosOwners atomic.Uint64

// deadlineOf returns ctx's deadline, or zero.
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// lockFailed counts a failed acquisition and fails the test on an
// unexpected error. through is the hold a re-entry or downgrade went
// through (nil for a first acquisition).
func (ch *chaos) lockFailed(prim, op string, err error, through context.Context) {
	class, unexpected := chaosClass(err, chaosWaits(prim, op))
	if op == "Lock" && class == "not acquired" {
		unexpected = true // only the Try forms give up
	}
	if class == "not held" && through != nil && through.Err() != nil {
		unexpected = false // the hold ended (with its context) meanwhile
	}
	ch.count(prim, op+" error: "+class)
	if unexpected {
		ch.violateKind("unexpected error: "+class, "unexpected error from %s.%s: %v", prim, op, err)
	}
}

// unlocked runs a release, times it and counts its result; it reports
// whether it succeeded.
func (ch *chaos) unlocked(prim, op string, release func() error) bool {
	began := time.Now()
	err := release()
	took := time.Since(began)
	ch.mu.Lock()
	if took > ch.maxRelease {
		ch.maxRelease, ch.maxRelWhat = took, fmt.Sprintf("%s.%s at %s", prim, op, ch.since(began))
	}
	ch.mu.Unlock()
	if err == nil {
		ch.count(prim, op+": ok")
		return true
	}
	class, unexpected := chaosClass(err, false)
	if errors.Is(err, ErrNotHeld) && errors.Is(err, ErrLeaseLost) {
		class, unexpected = "not held: lease lost", false
	}
	ch.count(prim, op+" error: "+class)
	if unexpected {
		ch.violateKind("unexpected error: "+class, "unexpected error from %s.%s: %v", prim, op, err)
	}
	return false
}

// work holds for about d, checking the hold now and then, until d has
// passed or the hold's context is done.
func (ch *chaos) work(tr *chaosTracker, h *chaosHolder, rng *rand.Rand, d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		t := time.NewTimer(time.Duration(2+rng.IntN(14)) * time.Millisecond)
		select {
		case <-h.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		ch.audit(tr, h)
	}
}

// iterate is one round of a worker: acquire, hold and work (sometimes
// re-entering or downgrading), release.
func (ch *chaos) iterate(who string, ops chaosOps, rng *rand.Rand) {
	bg := context.Background()
	n := 1
	if ops.mode == modePermits && rng.IntN(5) == 0 {
		n = 2
	}
	var (
		parent   context.Context
		cancel   context.CancelFunc
		deadline time.Time
		op       string
		hctx     context.Context
		err      error
	)
	began := time.Now()
	switch x := rng.IntN(10); {
	case x < 6:
		// Lock with a deadline, which also bounds the hold.
		op = "Lock"
		parent, cancel = context.WithTimeout(bg, 300*time.Millisecond+time.Duration(rng.Int64N(int64(2700*time.Millisecond))))
		deadline = deadlineOf(parent)
		hctx, err = ops.lock(parent, n)
	case x < 9:
		// TryLockFor bounds the wait only; parent bounds the hold.
		op = "TryLockFor"
		parent, cancel = context.WithTimeout(bg, 10*time.Second)
		wait := 100*time.Millisecond + time.Duration(rng.Int64N(int64(1400*time.Millisecond)))
		deadline = began.Add(wait)
		hctx, err = ops.tryFor(parent, n, wait)
	default:
		op = "TryLock"
		parent, cancel = context.WithTimeout(bg, time.Second)
		deadline = deadlineOf(parent)
		hctx, err = ops.try(parent, n)
	}
	defer cancel()
	ret := time.Now()
	ch.timed(ops.prim, op, false, began, ret, deadline, err)
	ch.count(ops.prim, "calls")
	if err != nil {
		ch.lockFailed(ops.prim, op, err, nil)
		time.Sleep(time.Duration(5+rng.IntN(30)) * time.Millisecond)
		return
	}
	ch.count(ops.prim, "acquired")
	ch.count(ops.prim, "acquired by "+op)
	tr := ops.tr
	id := chaosOwners.Add(1)
	h := &chaosHolder{
		who:     fmt.Sprintf("%s %s #%d", who, op, id),
		owner:   id,
		mode:    ops.mode,
		permits: n,
		ctx:     hctx,
		began:   began,
		got:     ret,
	}
	field := ""
	if ops.field != nil {
		field = ops.field(hctx)
	}
	h.granted = tr.grantedAt(field, ret)
	ch.enter(tr, h)
	defer ch.exit(tr, h) // after the release and cancel below (deferred later, run first)
	var token int64
	if ops.token != nil {
		var ok bool
		if token, ok = ops.token(hctx); !ok {
			ch.violate("%s: a fenced hold without a token", h.who)
		}
		ch.fenceAcquired(h.who, token, began, ret)
		if hctx.Err() == nil {
			ch.fenceWrite(h, token)
		}
	}
	defer func() {
		cancel()
		if errors.Is(context.Cause(hctx), ErrLeaseLost) {
			ch.count(ops.prim, "leases lost")
			ch.mu.Lock()
			ch.leasesLost++
			ch.mu.Unlock()
		}
	}()

	held := n // the hold's count (Semaphore: permits) as the library has it
	ch.work(tr, h, rng, time.Duration(5+rng.IntN(100))*time.Millisecond)
	if ops.token != nil && hctx.Err() == nil {
		ch.fenceWrite(h, token) // once more, at the end of the work
	}

	// Sometimes re-enter (Semaphore: add a permit to the hold).
	if ops.again != nil && rng.IntN(3) == 0 && hctx.Err() == nil {
		rb := time.Now()
		rctx, err := ops.again(hctx)
		ch.timed(ops.prim, "re-entry", true, rb, time.Now(), deadlineOf(hctx), err)
		if err != nil {
			class, _ := chaosClass(err, false)
			if ops.mode == modePermits && class == "not acquired" {
				ch.count(ops.prim, "re-entry: no permit free")
			} else {
				ch.lockFailed(ops.prim, "re-entry", err, hctx)
			}
			if errors.Is(err, ErrLeaseLost) && hctx.Err() == nil {
				ch.violate("%s: a re-entry failed with a lost lease (%v) while the hold's context is live", h.who, err)
			}
		} else {
			ch.count(ops.prim, "re-entered")
			held++
			if ops.mode == modePermits {
				ch.addPermits(tr, h, 1)
			}
			ch.work(tr, h, rng, time.Duration(rng.IntN(30))*time.Millisecond)
			if ops.mode == modePermits {
				ch.addPermits(tr, h, -1) // before the permit can be free
			}
			var rerr error
			if ch.unlocked(ops.prim, "re-entry release", func() error { rerr = ops.unagain(rctx); return rerr }) ||
				errors.Is(rerr, transport.ErrNoReply) {
				// (A re-entry release written whose reply was lost counts
				// as done: the scripts set the count, and the next release
				// sets it again.)
				held--
			}
		}
	}

	// Sometimes downgrade (RWMutex writers): take the read lock through the
	// write hold, release the write lock, go on reading.
	if ops.downgrade != nil && rng.IntN(4) == 0 && hctx.Err() == nil {
		db := time.Now()
		rctx, err := ops.downgrade(hctx)
		ch.timed(ops.prim, "downgrade", false, db, time.Now(), deadlineOf(hctx), err)
		if err != nil {
			ch.lockFailed(ops.prim, "downgrade", err, hctx)
		} else {
			ch.count(ops.prim, "downgraded")
			now := time.Now()
			rh := &chaosHolder{who: h.who + " (downgraded)", owner: h.owner, mode: modeRead, ctx: rctx, began: db, got: now, granted: now}
			ch.enter(tr, rh)
			ch.releaseAll(ops, h, held, func(ctx context.Context) error { return ops.unlock(ctx, 1) })
			ch.work(tr, rh, rng, time.Duration(5+rng.IntN(50))*time.Millisecond)
			if ch.unlocked(ops.prim, "downgraded read release", func() error { return ops.undowngrade(rctx) }) && rctx.Err() == nil {
				ch.violate("%s: the read hold's context is live after its last release returned nil", rh.who)
			}
			ch.exit(tr, rh)
			return
		}
	}

	if ops.mode == modePermits {
		ch.addPermits(tr, h, -h.permits) // before the permits can be free
		if ch.unlocked(ops.prim, "release", func() error { return ops.unlock(hctx, held) }) && hctx.Err() == nil {
			ch.violate("%s: the hold's context is live after releasing all its permits returned nil", h.who)
		}
		return
	}
	ch.releaseAll(ops, h, held, func(ctx context.Context) error { return ops.unlock(ctx, 1) })
}

// releaseAll releases the held holds of h one by one, stopping at the
// first error; after the last release returned nil, h's context must be
// done.
func (ch *chaos) releaseAll(ops chaosOps, h *chaosHolder, held int, unlock func(context.Context) error) {
	for ; held > 0; held-- {
		if !ch.unlocked(ops.prim, "release", func() error { return unlock(h.ctx) }) {
			return
		}
	}
	if h.ctx.Err() == nil {
		ch.violate("%s: the hold's context is live after its last release returned nil", h.who)
	}
}

// chaosInChild runs TestChaos in a child process (see TestChaos) and
// fails with its output when it fails; its log is this test's.
func chaosInChild(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestChaos$", "-test.count=1", "-test.v", "-test.timeout=15m")
	cmd.Env = append(os.Environ(), chaosChildEnv+"=1")
	cmd.SysProcAttr = redistest.ChildProcAttr() // it dies with this process (a test timeout)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the chaos process failed (%v):\n%s", err, out)
	}
	t.Logf("the chaos process said:\n%s", out)
}

// chaosFault is one kind of fault; run injects it and describes it.
type chaosFault struct {
	name string
	run  func() string
}

// libraryGoroutines returns the stacks of the goroutines running code of
// the library: a non-test file of this package or of one of its layers
// under internal/ (not the test support: redistest, faultproxy).
func libraryGoroutines() []string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file) + "/"
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			rest, ok := strings.CutPrefix(line, "\t"+dir)
			if !ok {
				continue
			}
			f, _, _ := strings.Cut(rest, ":")
			if libraryFile(f) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// libraryFile reports whether f, a path from the module's root, is a
// non-test file of the library: of the root package or of a package under
// internal/ other than the test-support ones (so a new layer package is
// counted without being listed here).
func libraryFile(f string) bool {
	if strings.HasSuffix(f, "_test.go") {
		return false
	}
	dir, _ := filepath.Split(f)
	if dir == "" {
		return true
	}
	pkg, ok := strings.CutPrefix(dir, "internal/")
	if !ok || strings.Count(pkg, "/") != 1 {
		return false
	}
	switch strings.TrimSuffix(pkg, "/") {
	case "redistest", "faultproxy", "matrix", "readme", "fipstest":
		return false
	}
	return true
}

func chaosRDB(t *testing.T, addr string, poolSize int) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr: addr, PoolSize: poolSize,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// chaosChildEnv marks the process that runs the chaos itself (TestChaos).
const chaosChildEnv = "REDISYNC_CHAOS_CHILD"

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test skipped in -short mode")
	}
	if os.Getenv(chaosChildEnv) == "" {
		// The chaos counts the library's goroutines left after Close,
		// which other tests' would add to: it runs in a process of its
		// own (this test binary again, running this test alone), so that
		// here it can run in parallel with the others.
		t.Parallel()
		chaosInChild(t)
		return
	}
	duration := 20 * time.Second
	if v := os.Getenv("REDISYNC_CHAOS"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "REDISYNC_CHAOS must be a duration (e.g. 5m)")
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos: faults for %v, seed %d, lease %v", duration, seed, chaosLease)

	srv := redistest.Start(t, redistest.SlowLoading(chaosLoadPerKey)...)
	bg := context.Background()
	ch := &chaos{
		t: t, start: time.Now(), lease: chaosLease,
		stats: map[string]map[string]int{}, faults: map[string]int{}, kinds: map[string]int{},
	}

	const (
		mutexName = "chaos:mutex"
		fairName  = "chaos:fair"
		rwName    = "chaos:rw"
		semName   = "chaos:sem"
		fenceName = "chaos:fenced"
		multiName = "chaos:multi" // a MultiLock's other name, with mutexName
		electName = "chaos:elect"
	)
	trMutex, trFair := newTracker(mutexName, 0), newTracker(fairName, 0)
	trFenced := newTracker(fenceName, 0)
	trElect, terms := newTracker(electName, 0), &chaosTerms{}
	trRW, trSem := newTracker(rwName, 0), newTracker(semName, chaosPermits)

	// The admin: one connection (so SKIPME spares it), and a Client of its
	// own that only sets and reads the semaphore's permits.
	admin := chaosRDB(t, srv.Addr(), 1)
	adminC, err := New(admin, WithWatchdogTimeout(chaosLease))
	require.NoError(t, err)
	adminSem := adminC.Semaphore(semName, WithPermits(chaosPermits))
	require.NoError(t, adminSem.SetPermits(bg, chaosPermits))

	// The workers: per Client, two goroutines on each of the Mutex, the
	// FairMutex, the RWMutex's read lock, the Semaphore and the fenced
	// Mutex, and one writer.
	var clients []*Client
	stop := make(chan struct{})
	var wg sync.WaitGroup
	workers := 0
	for i := range chaosClients {
		c, err := New(chaosRDB(t, srv.Addr(), 0), WithWatchdogTimeout(chaosLease))
		require.NoError(t, err)
		clients = append(clients, c)
		rw := c.RWMutex(rwName, WithWaiterTimeout(chaosWaiterTimeout))
		var set []chaosOps
		for range 2 {
			set = append(set,
				chaosMutexOps(c.Mutex(mutexName), trMutex),
				chaosFairOps(c.FairMutex(fairName, WithWaiterTimeout(chaosWaiterTimeout)), trFair),
				chaosReaderOps(rw, trRW),
				chaosSemOps(c.Semaphore(semName, WithPermits(chaosPermits)), trSem),
				chaosFencedOps(c.Mutex(fenceName, WithFencing()), trFenced),
				chaosMultiOps(c.MultiLock([]string{multiName, mutexName}), trMutex),
				chaosElectionOps(ch, c.Election(electName), trElect, terms))
		}
		set = append(set, chaosWriterOps(rw, trRW))
		for j, ops := range set {
			who := fmt.Sprintf("client%d/%s/g%d", i, ops.prim, j)
			rng := rand.New(rand.NewPCG(seed, uint64(i*100+j)))
			workers++
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					ch.iterate(who, ops, rng)
				}
			}()
		}
	}

	// The faults, in the test's goroutine (Restart may call t.Fatal).
	adminDo := func(what string, f func() error) {
		var err error
		for range 20 {
			if err = f(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("fault injector: %s: %v", what, err)
	}
	pause := func(d time.Duration) func() string {
		return func() string {
			srv.Pause()
			time.Sleep(d)
			srv.Resume()
			return fmt.Sprintf("paused %v", d)
		}
	}
	// restart restarts Redis with do, which loses every key, the semaphore's
	// permits too.
	restart := func(do func(testing.TB)) {
		ch.mu.Lock()
		ch.restarts = append(ch.restarts, window{start: time.Now()})
		i := len(ch.restarts) - 1
		ch.mu.Unlock()
		do(t)
		ch.mu.Lock()
		ch.restarts[i].done = time.Now()
		ch.mu.Unlock()
	}
	// chaosKept reports the keys that stay, by design: the semaphore's
	// total and the fencing counter.
	chaosKept := func(k string) bool {
		return k == semName || k == fenceKey(fenceName) || k == keys.Companion(electName, "elect-term")
	}
	faults := []chaosFault{
		{"pubsub-kill", func() string {
			var n int64
			adminDo("CLIENT KILL TYPE pubsub", func() (err error) {
				n, err = admin.ClientKillByFilter(bg, "TYPE", "pubsub").Result()
				return err
			})
			return fmt.Sprintf("%d killed", n)
		}},
		{"script-flush", func() string {
			adminDo("SCRIPT FLUSH", func() error { return admin.ScriptFlush(bg).Err() })
			return ""
		}},
		{"pause-short", pause(chaosLease / 4)},
		{"pause-long", pause(chaosLease * 5 / 3)},
		{"restart", func() string {
			fenced := chaosFencedRestart(ch, trFenced)
			restart(srv.Restart)
			// Every key is gone, the semaphore's total and the fencing
			// counter too: the workers' handles state the total
			// (WithPermits), and tokens go on from the server's clock.
			if fenced {
				return "all data lost, a fenced holder holding"
			}
			return "all data lost"
		}},
		{"restart-loading", func() string {
			fenced := chaosFencedRestart(ch, trFenced)
			restart(func(tb testing.TB) { srv.RestartLoading(tb, chaosLoadKeys) })
			// The keys it loaded are not the workers': delete them.
			var n int
			adminDo("delete the keys loaded", func() error {
				ks, err := admin.Keys(bg, redistest.LoadingKeys).Result()
				if err == nil && len(ks) > 0 {
					err = admin.Unlink(bg, ks...).Err()
				}
				n = len(ks)
				return err
			})
			if fenced {
				return fmt.Sprintf("all data lost, a fenced holder holding, %d keys loaded meanwhile", n)
			}
			return fmt.Sprintf("all data lost, %d keys loaded meanwhile", n)
		}},
		{"kill-normal", func() string {
			var n int64
			adminDo("CLIENT KILL TYPE normal", func() (err error) {
				n, err = admin.ClientKillByFilter(bg, "TYPE", "normal", "SKIPME", "yes").Result()
				return err
			})
			return fmt.Sprintf("%d killed", n)
		}},
	}
	frng := rand.New(rand.NewPCG(seed, 999))
	end := time.Now().Add(duration)
faulting:
	for round := 0; ; round++ {
		for _, i := range frng.Perm(len(faults)) {
			if round > 0 && time.Now().After(end) {
				break faulting
			}
			time.Sleep(400*time.Millisecond + time.Duration(frng.Int64N(int64(800*time.Millisecond))))
			f := faults[i]
			fs := time.Now()
			ch.mu.Lock()
			ch.current = fmt.Sprintf("%s since %s", f.name, ch.since(fs))
			ch.mu.Unlock()
			info := f.run()
			took := time.Since(fs)
			entry := fmt.Sprintf("%s %s (%v%s)", ch.since(fs), f.name, took.Round(time.Millisecond), strings.TrimRight(", "+info, ", "))
			ch.mu.Lock()
			ch.current = ""
			ch.faults[f.name]++
			ch.faultLog = append(ch.faultLog, entry)
			ch.mu.Unlock()
			t.Logf("fault %s", entry)
		}
		if time.Now().After(end) {
			break
		}
	}
	time.Sleep(time.Second) // a calm second: the workers go on without faults

	// Stop the workers; each ends its round, every wait of which is bounded.
	close(stop)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		buf := make([]byte, 8<<20)
		t.Fatalf("workers still running 30s after being told to stop (a hang):\n%s", buf[:runtime.Stack(buf, true)])
	}
	stopped := time.Now()
	for _, c := range clients {
		if err := c.Close(); err != nil {
			ch.violate("Close: %v", err)
		}
	}

	// 5. Nothing left in Redis, right after the run: every hold was
	// released (or given back when its release failed, which Close waits
	// for) and every waiter left the queues. A hold left to expire by
	// itself would delay the next holder by a lease: it is a leak, not a
	// tolerance. Only the semaphore's total stays, by design.
	left, err := admin.Keys(bg, "*").Result()
	if err != nil || len(slices.DeleteFunc(slices.Clone(left), chaosKept)) > 0 {
		sort.Strings(left)
		var desc []string
		for _, k := range left {
			typ, _ := admin.Type(bg, k).Result()
			ttl, _ := admin.PTTL(bg, k).Result()
			var v any
			switch typ {
			case "hash":
				v, _ = admin.HGetAll(bg, k).Result()
			case "zset":
				v, _ = admin.ZRangeWithScores(bg, k, 0, -1).Result()
			}
			desc = append(desc, fmt.Sprintf("%s (%s %v, ttl %v)", k, typ, v, ttl))
		}
		ch.violate("keys left in Redis right after the workers stopped and the Clients closed (%v after they stopped): %s (err %v)",
			time.Since(stopped).Round(time.Millisecond), strings.Join(desc, ", "), err)
	}
	avail, err := adminSem.Available(bg)
	if err != nil || avail != chaosPermits {
		ch.violate("semaphore: %d permits available at the end (err %v), want all %d", avail, err, chaosPermits)
	}
	semHash, err := admin.HGetAll(bg, semName).Result()
	if err != nil || len(semHash) != 1 || semHash["permits"] != fmt.Sprint(chaosPermits) {
		ch.violate("semaphore's key at the end: %v (err %v), want only its total", semHash, err)
	}
	require.NoError(t, adminC.Close())

	// 6. No goroutine of the library outlives Close.
	var alive []string
	deadline := time.Now().Add(10 * time.Second)
	for {
		alive = libraryGoroutines()
		if len(alive) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(alive) > 0 {
		ch.violate("%d goroutines of the library still running 10s after Close:\n%s", len(alive), strings.Join(alive, "\n\n"))
	}

	// Every primitive made progress despite the faults.
	for _, p := range []string{"Mutex", "FairMutex", "RWMutex-read", "RWMutex-write", "Semaphore", "FencedMutex", "MultiLock", "Election"} {
		if ch.stats[p]["acquired"] == 0 {
			ch.violate("%s was never acquired", p)
		}
	}
	// 7. At least one restart lost the data while a fenced holder held.
	ch.fence.mu.Lock()
	fencedRestarts := ch.fence.restarts
	ch.fence.mu.Unlock()
	if fencedRestarts == 0 {
		ch.violate("no restart lost the data while a fenced holder held")
	}

	// The summary.
	ch.mu.Lock()
	defer ch.mu.Unlock()
	t.Logf("chaos summary (%v of faults, %v in all; %d Clients, %d workers; lease %v, slack %v):",
		duration, time.Since(ch.start).Round(100*time.Millisecond), chaosClients, workers, chaosLease, chaosSlack)
	var kinds []string
	for _, f := range faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", f.name, ch.faults[f.name]))
	}
	t.Logf("  faults injected: %s", strings.Join(kinds, ", "))
	for _, p := range []string{"Mutex", "FairMutex", "RWMutex-read", "RWMutex-write", "Semaphore", "FencedMutex", "MultiLock", "Election"} {
		m := ch.stats[p]
		var evs []string
		for k := range m {
			if k != "calls" && k != "acquired" {
				evs = append(evs, fmt.Sprintf("%s %d", k, m[k]))
			}
		}
		sort.Strings(evs)
		t.Logf("  %s: %d calls, %d acquired; %s", p, m["calls"], m["acquired"], strings.Join(evs, ", "))
	}
	t.Logf("  longest wait: %v (%s)", ch.maxWait.Round(time.Millisecond), ch.maxWaitWhat)
	t.Logf("  longest overshoot past a deadline: %v (%s); allowed %v", ch.maxOver.Round(time.Millisecond), ch.maxOverWhat, chaosSlack)
	t.Logf("  longest re-entry overshoot past a deadline: %v (%s); allowed %v", ch.maxSync.Round(time.Millisecond), ch.maxSyncWhat, chaosSyncSlack)
	t.Logf("  longest release: %v (%s)", ch.maxRelease.Round(time.Millisecond), ch.maxRelWhat)
	t.Logf("  leases lost: %d", ch.leasesLost)
	t.Logf("  fenced: %s", ch.fenceSummary())
	t.Logf("  exclusion/permit checks made: %d; overlaps excused after a restart that lost the data: %d (seen up to %v after the restart)",
		ch.checks, ch.excused, ch.maxStale.Round(time.Millisecond))
	t.Logf("  keys left right after the run, but the semaphore's total: %d; library goroutines after Close: %d", len(slices.DeleteFunc(left, chaosKept)), len(alive))
	var byKind []string
	for k, n := range ch.kinds {
		byKind = append(byKind, fmt.Sprintf("%d × %s", n, k))
	}
	sort.Strings(byKind)
	t.Logf("  violations: %d %v", ch.violations, byKind)
}

// chaosFencedRestart waits, at most a second, for a fenced holder to hold,
// so that a restart loses the data under it, and counts such restarts.
func chaosFencedRestart(ch *chaos, tr *chaosTracker) bool {
	fenced := false
	for limit := time.Now().Add(time.Second); !fenced && time.Now().Before(limit); {
		if fenced = tr.holding(); !fenced {
			time.Sleep(time.Millisecond)
		}
	}
	if fenced {
		ch.fence.mu.Lock()
		ch.fence.restarts++
		ch.fence.mu.Unlock()
	}
	return fenced
}
