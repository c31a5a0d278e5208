package holds

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// A context carries holds, not an owner. Each first acquisition of a lock
// gets a fresh owner (the Redis field "<client uuid>:<n>"); the hold's
// context carries that hold under a key naming the lock, so a nested Lock of
// the same lock with it re-enters, while any other lock sees no hold and
// gives the caller a fresh owner of its own.

// scope is started by NewScope: holds taken outside it are not re-entered
// inside it.
type scope struct{ _ byte }

type scopeKey struct{}

// NewScope returns a copy of ctx that starts a new owner scope (the root
// package's WithOwner): the holds ctx carries are not re-entered with it.
func NewScope(ctx context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, new(scope))
}

// scopeOf returns the owner scope of ctx (nil outside any NewScope).
func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(scopeKey{}).(*scope)
	return s
}

// Carried returns the hold of ref that ctx carries, live or ended, or nil;
// a hold taken outside ctx's WithOwner scope is not ctx's.
func Carried(ctx context.Context, ref lease.Ref) *lease.Hold {
	h := lease.HoldIn(ctx, ref)
	if h == nil {
		return nil
	}
	if ctx == h.Ctx && h.Obs == nil {
		return h // its own context: in its scope, by its making (no lookup)
	}
	if h.Scope != scopeOf(ctx) {
		return nil
	}
	return h
}

// Held returns the live hold of ref that ctx carries, or nil.
func Held(ctx context.Context, ref lease.Ref) *lease.Hold {
	if h := Carried(ctx, ref); h != nil && h.Live() {
		return h
	}
	return nil
}

var ownerSeq atomic.Uint64

// NewField returns a fresh owner's Redis field.
func (m *Machine) NewField() string {
	b := make([]byte, 0, 64)
	b = append(append(b, m.id...), ':')
	return string(strconv.AppendUint(b, ownerSeq.Add(1), 10))
}

// Entry returns the live hold of ref that a Lock with ctx re-enters, or nil
// for a first acquisition. A context that carries a hold of ref that was
// lost (or ended with its context, or by Close) is refused: acquiring again
// would silently make a new hold of what its caller believes it still has.
func Entry(ctx context.Context, ref lease.Ref) (*lease.Hold, error) {
	h := Carried(ctx, ref)
	if h == nil {
		return nil, nil
	}
	switch h.Reason() {
	case lease.NotEnded:
		return h, nil
	case lease.EndUnlocked:
		return nil, nil
	default:
		return nil, EndedError(h)
	}
}

// ErrUntrusted reports a grant that could not be trusted: its reply came
// after its lease could be trusted (Redis or the network stalled), or a
// ForceUnlock in this process came between its script and its reply. It
// was given back; the caller tries again as a new owner, since that
// give-back may reach Redis after its next attempt.
var ErrUntrusted = fmt.Errorf("%w: the grant could not be trusted (a stalled reply, or a ForceUnlock meanwhile) and was given back", errs.NotAcquired)

// ErrNewOwner makes a FairMutex wait start again as a new owner, after a
// grant it could not trust (ErrUntrusted): its queue entry and channel go
// with the owner.
var ErrNewOwner = errors.New("redisync: wait again as a new owner")

// Acquisition is one call's first acquisition of a lock under a fresh
// owner, across the attempts of its wait. It owns the owner's field (a new
// one after a grant it could not trust), notes when an attempt's outcome is
// unknown, and gives back what the call's attempts may have left in Redis
// when the call fails. Every primitive's first acquisition runs through it.
type Acquisition struct {
	m       *Machine
	Spec    *Spec
	Parent  context.Context // the hold is bound to it
	WaitCtx context.Context // the wait ends with it; its commands carry its values
	told    context.Context // the wait's values, as the observer is told them
	wait    bool
	start   time.Time
	Owner   string
	St      lease.Stamp // of the latest attempt
	Dirty   bool        // an attempt's outcome is unknown: sweep the owner if the call fails
	Won     bool
	Token   int64            // the fencing token of the latest attempt's grant
	Tokens  map[string]int64 // a fenced MultiLock's, by name
	HoldCtx context.Context  // the hold's context, once won
	// For explain: why the latest attempt that Redis did not answer
	// failed, when the wait went on after it (nil once Redis answers one),
	// and how long the attempt the wait ended in had waited for its reply.
	last   error
	unsent time.Duration

	// left returns what an attempt of field may leave in Redis even
	// when refused (a queue entry); release gives up what a granted one
	// took (the hold's release script), or else scr does. A primitive
	// whose hold spans several slots (MultiLock) sets releases instead,
	// one call per slot.
	left     func(field string) []call
	Release  func(field string) call
	Releases func(field string) []call
	scr      Scripts
	ownerArg any      // Owner, boxed once (see Arg)
	took     [3]int64 // the latest attempt's reply, as read by Took

	// hold is the first grant's hold, made with the acquisition: one
	// allocation for both, and room for the arguments of their calls
	// (Args). A grant that is given back leaves it used: another is
	// made.
	hold     lease.Hold
	holdUsed bool
	// restart: after a grant it could not trust, the wait starts again
	// as the new owner (ErrNewOwner) instead of going on, because the
	// owner's channel changes with it (FairMutex).
	Restart bool
}

// Begin starts the first acquisition of s's lock for a hold bound to
// parent, waiting (if wait) as long as wctx lasts: left and release are
// as the Acquisition's fields say (left may be nil). It tells the
// observer (WaitStarted), whose context's values the acquisition's
// commands carry from then on: Finish must follow, or a grant.
func (m *Machine) Begin(s *Spec, parent, wctx context.Context, wait bool, left func(string) []call, release func(string) call) *Acquisition {
	a := m.BeginWith(s, parent, wctx, wait, nil)
	a.left, a.Release = left, release
	return a
}

// Scripts makes the give-back of a primitive's first acquisition (see
// Begin's release), as a handle that implements it once, for all its
// calls, rather than a closure for each: Release returns what gives back
// what a granted attempt of field took, its arguments in a.Args (the
// field as a.Arg(field)).
type Scripts interface {
	Release(a *Acquisition, field string) call
}

// Leaves is implemented by the Scripts of a primitive whose attempts may
// leave something in Redis even when refused (a queue entry): Left
// returns what takes it out (Begin's left).
type Leaves interface {
	Left(a *Acquisition, field string) []call
}

// BeginWith is Begin with scr making the give-back, and what a refused
// attempt leaves when it implements Leaves.
func (m *Machine) BeginWith(s *Spec, parent, wctx context.Context, wait bool, scr Scripts) *Acquisition {
	a := &Acquisition{m: m, Spec: s, Parent: parent, WaitCtx: wctx, told: parent, wait: wait, start: time.Now(), scr: scr}
	a.newOwner()
	if m.cfg.WaitStarted != nil {
		if v := m.cfg.WaitStarted(parent, s.Ref); v != nil && v != parent {
			a.told, a.WaitCtx = v, WithValues(wctx, v)
		}
	}
	return a
}

// newOwner gives a a fresh owner's field.
func (a *Acquisition) newOwner() {
	a.Owner = a.m.NewField()
	a.ownerArg = a.Owner
}

// Arg returns field as a call's argument: the owner's, boxed once.
func (a *Acquisition) Arg(field string) any {
	if field == a.Owner {
		return a.ownerArg
	}
	return field
}

// Args returns vals as a call's arguments, kept in the acquisition's own
// room while it lasts (see lease.Hold.Args).
func (a *Acquisition) Args(vals ...any) []any { return a.hold.Args(vals...) }

// Room returns the hold whose room keeps the arguments of the
// acquisition's calls (Args): a hold's Args are known to the compiler,
// where a function value's would make every call's arguments escape.
func (a *Acquisition) Room() *lease.Hold { return &a.hold }

// All returns what gives back everything an attempt of field may have
// left or taken.
func (a *Acquisition) All(field string) []call { return append(a.leaves(field), a.gives(field)...) }

// leaves returns what an attempt of field may leave in Redis even when
// refused.
func (a *Acquisition) leaves(field string) []call {
	if a.left != nil {
		return a.left(field)
	}
	if l, ok := a.scr.(Leaves); ok {
		return l.Left(a, field)
	}
	return nil
}

// gives returns what gives back what a granted attempt of field took.
func (a *Acquisition) gives(field string) []call {
	if a.Releases != nil {
		return a.Releases(field)
	}
	return []call{a.give(field)}
}

// give returns what gives back what a granted attempt of field took, for a
// primitive whose hold is on one slot.
func (a *Acquisition) give(field string) call {
	if a.Release != nil {
		return a.Release(field)
	}
	return a.scr.Release(a, field)
}

// Give is give, for a handoff's acceptor (cohort.Acceptor.Release).
func (a *Acquisition) Give(field string) call { return a.give(field) }

// Send sends the call build makes for the current owner, and leaves it
// when the wait ends (what the abandoned script left or took is given back
// once it answers). It returns the field it ran for and the script's
// reply; with no reply, it returns how long to wait before trying again,
// or the call's error (see unsure).
//
// While a ForceUnlock of the lock is in flight in this Client, the attempt
// waits for its script to answer before it is sent (a TryLock does not
// try: not acquired): the ForceUnlock may have woken this waiter, and its
// grant, sent after the script ran, is then trusted, so the waiter keeps
// its turn (at the head of a FairMutex's queue, or a waiting writer's
// place ahead of later readers) instead of being given back.
func (a *Acquisition) Send(build func(field string) call) (string, []int64, time.Duration, error) {
	field := a.Owner
	epoch, ok, err := a.m.wd.Unforced(a.WaitCtx, a.Spec.Ref, a.Spec.Covers, a.wait)
	if err != nil || !ok {
		return field, nil, RetryAfter, err
	}
	a.St = lease.Stamp{Sent: time.Now(), Epoch: epoch}
	k := build(field)
	k.Takes = true
	var late func(reply)
	if a.WaitCtx.Done() != nil { // else the call cannot be left
		late = func(r reply) {
			calls := a.leaves(field)
			if v, err := Took(r, a.Spec.Counts, nil); err == nil && len(v) > 0 && v[0] == 1 {
				calls = append(calls, a.gives(field)...)
			}
			a.m.Undo(r.Sent, a.Spec.Lease, calls...)
		}
	}
	r := a.m.tr.Do(a.WaitCtx, k, late)
	v, err := a.m.AcquiredAs(r, a.Spec.Counts, &a.took)
	if nr := NotReplicated(err); nr != nil {
		nr.Undo = a.m.UndoNow(a.WaitCtx, nil, a.gives(field)...) // WithReplicaAck: given back, and the call fails
		return field, nil, 0, err
	}
	if err != nil {
		d, uerr := a.m.unsure(err, a.wait, &a.Dirty)
		switch {
		case uerr == nil:
			a.last = err // the wait goes on
		case a.WaitCtx.Err() != nil && errors.Is(uerr, transport.ErrNotSent):
			// Not written (again), the wait having ended: it ends as
			// between attempts, with the context's error. What Redis
			// said to this call's last write (a redirect it was to
			// follow) is the last attempt's error; with none, the
			// attempt had no reply for as long as it waited (a
			// connection that never came).
			if re := redis.Error(nil); errors.As(uerr, &re) {
				a.last = re
			} else {
				a.unsent = time.Since(a.St.Sent)
			}
			return field, nil, 0, a.WaitCtx.Err()
		case a.WaitCtx.Err() != nil:
			a.unsent = time.Since(a.St.Sent) // the wait ended first
		}
		return field, nil, d, uerr
	}
	a.last = nil // Redis answered
	a.St.Sent = r.Sent
	a.Token = FenceToken(a.Spec, v)
	return field, v, 0, nil
}

// Grant makes the hold from the granted reply of the latest attempt, for
// field with count holds, renewed by renew (one call per slot: one, or a
// MultiLock's several) and released by what gives back a granted attempt
// (Release, or Releases). The hold is bound to Parent (it ends when
// Parent does) and carries the attempt's fencing token (Tokens, by name,
// for a fenced MultiLock); ends are run when it ends (by the caller, when
// there is no hold). Its lease counts from St, the stamp of the attempt's
// first script.
//
// A grant that cannot be trusted (its reply came after its lease could be
// trusted, or a ForceUnlock in this process came meanwhile: ErrUntrusted)
// is given back, and so is one whose Parent has ended or whose Client is
// closing. That give-back may reach Redis after a next attempt under the
// same owner: after an untrusted grant, the call goes on as a new owner.
func (a *Acquisition) Grant(field string, count int, renew []call, ends ...func() bool) (bool, time.Duration, error) {
	h := a.newHold(field, count)
	if a.Releases == nil && len(renew) == 1 {
		h.One = [2]call{renew[0], a.give(field)} // in the hold: no allocation
		h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	} else {
		h.Renew, h.Release = renew, a.gives(field)
	}
	for _, end := range ends {
		h.OnEnd(end)
	}
	hctx, err := a.m.grant(a.Spec, h, a.told, a.start, a.St)
	return a.Granted(field, hctx, err)
}

// GrantOne is Grant for a hold on one slot renewed by renew, with
// nothing else to run at its end: what a Mutex's grant needs, without
// the slices.
func (a *Acquisition) GrantOne(field string, count int, renew call) (bool, time.Duration, error) {
	h := a.newHold(field, count)
	h.One = [2]call{renew, a.give(field)}
	h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	hctx, err := a.m.grant(a.Spec, h, a.told, a.start, a.St)
	return a.Granted(field, hctx, err)
}

// newHold returns the hold a grant of field with count holds makes: the
// acquisition's own the first time.
func (a *Acquisition) newHold(field string, count int) *lease.Hold {
	h := &a.hold
	if a.holdUsed {
		h = new(lease.Hold)
	}
	a.holdUsed = true
	h.Ref, h.Field, h.FieldArg, h.Scope = a.Spec.Ref, field, a.Arg(field), scopeOf(a.Parent)
	h.Lease, h.Renewed, h.Token, h.Tokens = a.Spec.Lease, a.Spec.Renewed, a.Token, a.Tokens
	h.Parts, h.Covers, h.Parent, h.Count, h.Taken = a.Spec.Parts, a.Spec.Covers, a.Parent, count, time.Now()
	if a.m.cfg.HoldValues {
		h.Observe()
	}
	return h
}

// grant adds h, granted by a script stamped st, to the lease Keeper, and
// returns its context; see Acquisition.Grant. The observer is told with
// told, the wait's values.
func (m *Machine) grant(s *Spec, h *lease.Hold, told context.Context, start time.Time, st lease.Stamp) (context.Context, error) {
	parent := h.Parent
	giveUp := func(err error) (context.Context, error) {
		m.Cleanup(h.Lease, h.Release...)
		return nil, err
	}
	if lease.Expired(lease.Deadline(st.Sent, s.Lease)) {
		return giveUp(ErrUntrusted)
	}
	if err := parent.Err(); err != nil {
		return giveUp(err)
	}
	if err := m.wd.Add(h, st); err != nil {
		return giveUp(err)
	}
	var vals context.Context
	if m.cfg.Acquired != nil {
		vals = m.cfg.Acquired(told, parent, s.Ref, h.Taken.Sub(start), st.Handoff)
	}
	h.Started(vals)
	return h.Ctx, nil
}

// Stamp returns the stamp of a script of s's lock sent now.
func (m *Machine) Stamp(s *Spec) lease.Stamp {
	return lease.Stamp{Sent: time.Now(), Epoch: m.wd.Epoch(s.Ref, s.Covers)}
}

// Granted applies the outcome of a grant.
func (a *Acquisition) Granted(field string, hctx context.Context, err error) (bool, time.Duration, error) {
	if errors.Is(err, ErrUntrusted) {
		a.m.Sweep(a.Spec.Lease, a.All(field)...)
		a.newOwner()
		a.Dirty = false
		if a.Restart && a.wait {
			return false, 0, ErrNewOwner
		}
		return false, time.Millisecond, nil
	}
	a.HoldCtx, a.Won = hctx, err == nil
	return a.Won, 0, err
}

// Finish ends the call, which returns err, and returns the error the call
// is to return: when it failed, it gives back what its attempts may have
// left (after an attempt whose outcome is unknown), says why Redis did not
// answer when it did not (explain), and tells the observer
// (AcquireFailed) with that error.
func (a *Acquisition) Finish(err error) error {
	err = a.explain(err)
	if a.Won {
		return err
	}
	if a.Dirty {
		a.m.Sweep(a.Spec.Lease, a.All(a.Owner)...)
	}
	if err != nil && a.m.cfg.AcquireFailed != nil {
		a.m.cfg.AcquireFailed(a.told, a.Spec.Ref, time.Since(a.start), err)
	}
	return err
}

// explain returns err, the error the call ends with, saying why Redis gave
// no answer to the wait's latest attempts when the wait ended (its
// context, or TryLockFor's bound) before one came: the error of the latest
// one that failed (a refused or reset connection, a Redis loading its
// data), and how long the one the wait ended in had waited for its reply.
// A wait on an unreachable Redis then reads differently from a wait for a
// lock that stayed busy, whose attempts Redis answered: that one says who
// holds the lock and the lease left (Spec.Busy, one more read, only then).
// The result matches what err matched (the context's error,
// errs.NotAcquired), and that attempt's error.
func (a *Acquisition) explain(err error) error {
	if err == nil || a.WaitCtx.Err() == nil {
		return err
	}
	noReply := a.unsent >= noReplyNoted
	switch {
	case a.last != nil && noReply:
		return fmt.Errorf("%w (the last attempt had no reply within %v; the one before failed: %w)", err, a.unsent.Round(time.Millisecond), a.last)
	case a.last != nil:
		return fmt.Errorf("%w (the last attempt failed: %w)", err, a.last)
	case noReply:
		return fmt.Errorf("%w (the last attempt had no reply within %v)", err, a.unsent.Round(time.Millisecond))
	}
	if a.wait && a.Spec.Busy != nil && (errors.Is(err, errs.NotAcquired) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		if who := a.Spec.Busy.Busy(context.WithoutCancel(a.told)); who != "" {
			return fmt.Errorf("%w (%s)", err, who)
		}
	}
	return err
}

// noReplyNoted is how long an attempt must have waited for its reply when
// its wait ended for explain to say so (less is a round trip cut short).
const noReplyNoted = 50 * time.Millisecond

// FenceToken returns the token in a fenced lock's granted acquire reply
// ({1, count, token}), or 0.
func FenceToken(s *Spec, r []int64) int64 {
	if !s.Fenced || len(r) < 3 || r[0] != 1 {
		return 0
	}
	return r[2]
}

// Acquired returns the reply of an acquisition or re-entry script, which
// answers [1, count, ...] when it took the lock or permits (count: the
// owner's holds after it) and anything else when it did not. With
// WithReplicaAck, a reply that took something that fewer than k replicas
// acknowledged is returned as a *NotReplicatedError carrying it, for the
// caller to undo; WAIT's answer to a reply that took nothing is ignored.
func (m *Machine) Acquired(r reply) ([]int64, error) { return m.AcquiredAs(r, false, nil) }

// AcquiredAs is Acquired for a script whose replies are one integer when
// counts is set (see Took, and buf).
func (m *Machine) AcquiredAs(r reply, counts bool, buf *[3]int64) ([]int64, error) {
	v, err := Took(r, counts, buf)
	if err != nil {
		return nil, err
	}
	if len(v) >= 2 && v[0] == 1 {
		if err := m.cfg.Ack.unacked(r, v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// Took returns the reply of an acquisition or re-entry script as
// [1, count, ...] when it took the lock (count: the owner's holds after
// it), [0, pttl] when another owner holds it, [-1, 0] when a re-entry
// found its hold gone. With counts, the script answered one integer
// instead (lua/lock.lua without a fencing counter, whose reply Redis
// makes and the client reads at the least cost): the count (> 0), 0 for
// a hold gone, -2 - pttl (< 0) for another owner's; the table is then
// made in buf when it is given (no allocation; it is the caller's until
// its next use of buf).
func Took(r reply, counts bool, buf *[3]int64) ([]int64, error) {
	if !counts {
		return r.Int64Slice()
	}
	n, err := r.Int64()
	if err != nil {
		return nil, err
	}
	if buf == nil {
		buf = new([3]int64)
	}
	switch {
	case n > 0:
		buf[0], buf[1] = 1, n
	case n == 0:
		buf[0], buf[1] = -1, 0
	default:
		buf[0], buf[1] = 0, -2-n
	}
	return buf[:2:2], nil
}
