package holds

import (
	"context"
	"errors"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// Acquisition is one call's first acquisition of a lock under a fresh
// owner, across the attempts of its wait. It owns the owner's field (a new
// one after a grant it could not trust), notes when an attempt's outcome is
// unknown, and gives back what the call's attempts may have left in Redis
// when the call fails. Every primitive's first acquisition runs through it.
type Acquisition struct {
	m       *Machine
	Spec    *Spec
	Parent  context.Context // the hold is bound to it
	WaitCtx context.Context // the wait ends with it
	wait    bool
	start   time.Time
	Owner   string
	St      lease.Stamp // of the latest attempt
	Dirty   bool        // an attempt's outcome is unknown: sweep the owner if the call fails
	Won     bool
	Token   int64           // the fencing token of the latest attempt's grant
	HoldCtx context.Context // the hold's context, once won

	// left returns what an attempt of field may leave in Redis even
	// when refused (a queue entry); release gives up what a granted one
	// took (the hold's release script). A primitive whose hold spans
	// several slots (MultiLock) sets releases instead, one call per slot.
	left     func(field string) []call
	Release  func(field string) call
	Releases func(field string) []call
	// restart: after a grant it could not trust, the wait starts again
	// as the new owner (ErrNewOwner) instead of going on, because the
	// owner's channel changes with it (FairMutex).
	Restart bool
}

// Begin starts the first acquisition of s's lock for a hold bound to
// parent, waiting (if wait) as long as wctx lasts: left and release are
// as the Acquisition's fields say (left may be nil).
func (m *Machine) Begin(s *Spec, parent, wctx context.Context, wait bool, left func(string) []call, release func(string) call) *Acquisition {
	if left == nil {
		left = func(string) []call { return nil }
	}
	return &Acquisition{m: m, Spec: s, Parent: parent, WaitCtx: wctx, wait: wait, start: time.Now(),
		Owner: m.NewField(), left: left, Release: release}
}

// All returns what gives back everything an attempt of field may have
// left or taken.
func (a *Acquisition) All(field string) []call { return append(a.left(field), a.gives(field)...) }

// gives returns what gives back what a granted attempt of field took.
func (a *Acquisition) gives(field string) []call {
	if a.Releases != nil {
		return a.Releases(field)
	}
	return []call{a.Release(field)}
}

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
	r := a.m.tr.Do(a.WaitCtx, k, func(r reply) {
		calls := a.left(field)
		if v, err := r.Int64Slice(); err == nil && len(v) > 0 && v[0] == 1 {
			calls = append(calls, a.gives(field)...)
		}
		a.m.Undo(calls...)
	})
	v, err := a.m.Acquired(r)
	if nr := NotReplicated(err); nr != nil {
		nr.Undo = a.m.UndoNow(a.WaitCtx, a.gives(field)...) // WithReplicaAck: given back, and the call fails
		return field, nil, 0, err
	}
	if err != nil {
		d, err := a.m.unsure(err, a.wait, &a.Dirty)
		return field, nil, d, err
	}
	a.St.Sent = r.Sent
	a.Token = FenceToken(a.Spec, v)
	return field, v, 0, nil
}

// Grant makes the hold from the granted reply of the latest attempt, for
// field with count holds (see Machine.Grant). A grant it cannot trust was
// given back, but that give-back may reach Redis after a next attempt
// under the same owner: the call goes on as a new owner.
func (a *Acquisition) Grant(field string, count int, renew call, ends ...func() bool) (bool, time.Duration, error) {
	hctx, err := a.m.Grant(a.Spec, a.Parent, field, count, a.Token, a.start, a.St, renew, a.Release(field), ends...)
	return a.Granted(field, hctx, err)
}

// GrantAll is Grant for a hold on several slots (see Machine.GrantAll),
// with one renew call per slot and a fenced MultiLock's tokens by name;
// a.St must be the stamp of the attempt's first script.
func (a *Acquisition) GrantAll(field string, count int, tokens map[string]int64, renew []call) (bool, time.Duration, error) {
	hctx, err := a.m.GrantAll(a.Spec, a.Parent, field, count, a.Token, tokens, a.start, a.St, renew, a.gives(field))
	return a.Granted(field, hctx, err)
}

// Granted applies the outcome of a grant.
func (a *Acquisition) Granted(field string, hctx context.Context, err error) (bool, time.Duration, error) {
	if errors.Is(err, ErrUntrusted) {
		a.m.Sweep(a.Spec.Lease, a.All(field)...)
		a.Owner, a.Dirty = a.m.NewField(), false
		if a.Restart && a.wait {
			return false, 0, ErrNewOwner
		}
		return false, time.Millisecond, nil
	}
	a.HoldCtx, a.Won = hctx, err == nil
	return a.Won, 0, err
}

// Finish ends the call, which returns err: when it failed, it gives back
// what its attempts may have left (after an attempt whose outcome is
// unknown), and tells the observer (AcquireFailed).
func (a *Acquisition) Finish(err error) {
	if a.Won {
		return
	}
	if a.Dirty {
		a.m.Sweep(a.Spec.Lease, a.All(a.Owner)...)
	}
	if err != nil && a.m.cfg.AcquireFailed != nil {
		a.m.cfg.AcquireFailed(a.Parent, a.Spec.Ref, time.Since(a.start), err)
	}
}
