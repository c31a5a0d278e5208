package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redisync-go/redisync/internal/transport"
)

// EndReason says why a hold ended.
type EndReason uint8

const (
	NotEnded    EndReason = iota
	EndUnlocked           // its last hold was released
	EndParent             // the context it was taken with ended
	EndLost               // its lease was lost, or may have been
	EndForced             // ForceUnlock in this process
	EndClosed             // Client.Close
)

// Hold is one owner's Hold of one lock (or of one semaphore's permits) in
// this process. While it lives, its lease is kept alive by the watchdog (or,
// for a fixed lease, watched), and its context is live; when it ends, for
// whatever reason, its context is cancelled first, and then redisync makes
// sure Redis does not keep it either.
type Hold struct {
	Ref      Ref
	Field    string // the owner's Redis field
	FieldArg any    // Field as a call's argument, boxed once for all the hold's calls
	Scope    any    // the owner's scope it was taken in (redisync's WithOwner); compared only
	Lease    time.Duration
	Renewed  bool // renewed by the watchdog; false for a fixed lease
	// Renew and release hold one call per Redis slot the hold is on (one
	// for every primitive but a MultiLock across slots). Each Renew call
	// returns 1 while held there, 0 once gone: the hold is renewed when
	// every one says 1, and lost when any says 0. The release calls give
	// up the whole hold, and are harmless when it is already gone.
	Renew   []transport.Call
	Release []transport.Call
	One     [2]transport.Call // backs renew and release for one call each: no allocation
	Parent  context.Context   // the hold ends with it
	Ctx     context.Context   // carries the hold (and its Values); ends with it: &own

	own     ownCtx        // the hold's own context (context.go)
	cstate  atomic.Uint32 // own's state: ctxLive, ctxCanceled, ctxDeadline
	causeCC any           // once own is cancelled without cc: what it answers causeKey with
	call    callCtx       // a release's context, under Mu (CallCtx)

	// Parts: the hold is on several locks, and can be lost from some of
	// them only (a MultiLock): a loss gives back the others. covers are
	// those locks, which a ForceUnlock in this process ends it with.
	Parts  bool
	Covers []Ref

	// Mu serialises the scripts that change this hold (re-entries,
	// releases, a give-back), so the count sent stays in step with Redis
	// even when goroutines share the hold. A call waits for it only as
	// long as its context lasts (lockCtx): an earlier call that left may
	// keep it until its reply comes.
	Mu       HoldLock
	Count    int
	LastSent time.Time // when the newest script under mu was sent

	Taken  time.Time        // when it was granted
	Token  int64            // fencing token (WithFencing); 0: none, and re-entries share it
	Tokens map[string]int64 // a fenced MultiLock's: each name's token (token is one of them)

	dl     dlStore        // the local deadline while live, for the hold's contexts (context.go)
	ending sync.WaitGroup // counts the hold's end while it is under way (Reason waits for it)
	dlPos  int64          // the local deadline, in the keeper's heap (under its dmu)
	heapAt int            // its place in the keeper's heap, plus one; 0: not in it (under its dmu)
	gate   gate           // the base of the real context beside own, ended by Parent's end (parent.go)
	pdl    int64          // Parent's deadline on the holds' clock (clockAt.pos), or 0: none

	tmu         sync.Mutex              // guards the fields below
	cc          context.Context         // the real context beside own, once asked for (context.go)
	ccCancel    context.CancelCauseFunc // cancels cc
	endCause    error                   // the cause own ended with (cancelOwn)
	endByParent bool                    // own ended with h.Parent's end (the gate cancels cc)
	sent        time.Time               // when the newest script that set the lease was sent
	at          int64                   // the deadline that script set, on the holds' clock (clockAt.pos; kept after the end)
	atSet       bool                    // at is set
	why         EndReason
	stops       []func() bool          // undone when the hold ends
	ties        map[uint64]func(error) // re-entries' contexts and those derived from own, cancelled when it ends
	nties       uint64
	// firsts run when the hold ends, before its context is cancelled:
	// what they see of other contexts was not caused by its end.
	firsts []func()

	// Obs, when set (by the root, for an observer that gives values at a
	// hold's start), holds those values and orders the reports of the
	// hold's start and end (observed.go).
	Obs *Observed
	obs Observed // backs Obs (Observe): no allocation

	k *Keeper // set by Add

	// args is room for the arguments of the hold's calls (Args), of
	// which nargs are taken.
	args  [argRoom]any
	nargs atomic.Int32
}

// argRoom is how many arguments of its calls a hold keeps in itself: a
// Semaphore's acquisition, renewal, give-back and release (23; a Mutex's
// take 15).
const argRoom = 24

// Arg returns h's field as a call's argument: FieldArg, boxed once, when
// it has been set.
func (h *Hold) Arg() any {
	if h.FieldArg != nil {
		return h.FieldArg
	}
	return h.Field
}

// Args returns vals as the arguments of a call of h, copied to h's own
// room while it lasts (no allocation: made once with the hold), else to a
// new slice. What it returns is never written again: a call that may be
// sent again keeps it. It is safe for concurrent use (a late reply's
// give-back makes its calls beside its acquisition's).
func (h *Hold) Args(vals ...any) []any {
	n := int32(len(vals))
	if h.nargs.Load() >= argRoom {
		return append([]any(nil), vals...)
	}
	end := h.nargs.Add(n)
	if end > argRoom { // full: what it took is not given back, so that no two calls share it
		return append([]any(nil), vals...)
	}
	a := h.args[end-n : end : end]
	copy(a, vals)
	return a
}

// Live reports whether h is Live; a hold whose local deadline has passed,
// or whose context ended, is not, even before their timers have run (it
// is ended then, see Settle).
func (h *Hold) Live() bool {
	return h.Reason() == NotEnded
}

// Reason says why h ended, or live; see live.
func (h *Hold) Reason() EndReason {
	h.Settle()
	h.tmu.Lock()
	why := h.why
	h.tmu.Unlock()
	if why != NotEnded {
		// Ended: once every context of the hold is cancelled, so that a
		// caller told it ended finds its context done too.
		h.ending.Wait()
	}
	return why
}

// OnEnd registers stop to be called when the hold ends (at once if it has).
func (h *Hold) OnEnd(stop func() bool) {
	h.tmu.Lock()
	if h.why == NotEnded {
		h.stops = append(h.stops, stop)
		h.tmu.Unlock()
		return
	}
	h.tmu.Unlock()
	stop()
}

// First registers f to run when the hold ends, before its context is
// cancelled; at once if it has ended. f runs while the hold is ending: it
// must not call the methods of the hold's contexts, nor of contexts
// derived from them, which wait for the end.
func (h *Hold) First(f func()) {
	h.tmu.Lock()
	if h.why == NotEnded {
		h.firsts = append(h.firsts, f)
		h.tmu.Unlock()
		return
	}
	h.tmu.Unlock()
	f()
}

// Stamp is what an attempt notes before sending its script: when, and the
// lock's ForceUnlock epoch (with those of the locks it covers).
type Stamp struct {
	Sent    time.Time
	Epoch   uint64
	Handoff bool // the attempt was a local holder's hand-over (redisync's cohort)
}

// Ref names one lock of one Client: the key under which a context
// carries a hold of it.
type Ref struct {
	Owner any    // the client the lock is one of (its identity only)
	Kind  string // the kind of lock (redisync's KindMutex, ...)
	Name  string
}

// Ended reports why h ended (NotEnded while it lives), and when the
// newest script that set its lease was sent, without waiting for its end
// to complete (see Reason).
func (h *Hold) Ended() (why EndReason, sent time.Time) {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	return h.why, h.sent
}

// InTime reports whether h's local deadline, as its newest lease set it,
// has not passed yet: a reply that came now came while h could still be
// held.
func (h *Hold) InTime() bool {
	h.tmu.Lock()
	at, set := h.at, h.atSet
	h.tmu.Unlock()
	return set && now().pos()-at < 0
}

// Left returns how long until h's local deadline passes (0 once it has,
// or when h is not registered or has ended).
func (h *Hold) Left() time.Duration { return h.dl.left() }
