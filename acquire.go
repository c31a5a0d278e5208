package redisync

import (
	"context"
	"errors"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// acquisition is one call's first acquisition of a lock under a fresh
// owner, across the attempts of its wait. It owns the owner's field (a new
// one after a grant it could not trust), notes when an attempt's outcome is
// unknown, and gives back what the call's attempts may have left in Redis
// when the call fails. Every primitive's first acquisition runs through it.
type acquisition struct {
	c       *Client
	s       *spec
	hparent context.Context // the hold is bound to it
	wctx    context.Context // the wait ends with it
	wait    bool
	start   time.Time
	owner   string
	st      lease.Stamp // of the latest attempt
	dirty   bool        // an attempt's outcome is unknown: sweep the owner if the call fails
	won     bool
	token   int64           // the fencing token of the latest attempt's grant
	hctx    context.Context // the hold's context, once won

	// left returns what an attempt of field may leave in Redis even
	// when refused (a queue entry); release gives up what a granted one
	// took (the hold's release script). A primitive whose hold spans
	// several slots (MultiLock) sets releases instead, one call per slot.
	left     func(field string) []call
	release  func(field string) call
	releases func(field string) []call
	// restart: after a grant it could not trust, the wait starts again
	// as the new owner (errNewOwner) instead of going on, because the
	// owner's channel changes with it (FairMutex).
	restart bool
}

func (c *Client) acquisition(s *spec, parent, wctx context.Context, wait bool, left func(string) []call, release func(string) call) *acquisition {
	if left == nil {
		left = func(string) []call { return nil }
	}
	return &acquisition{c: c, s: s, hparent: parent, wctx: wctx, wait: wait, start: time.Now(),
		owner: c.newField(), left: left, release: release}
}

// all returns what gives back everything an attempt of field may have
// left or taken.
func (a *acquisition) all(field string) []call { return append(a.left(field), a.gives(field)...) }

// gives returns what gives back what a granted attempt of field took.
func (a *acquisition) gives(field string) []call {
	if a.releases != nil {
		return a.releases(field)
	}
	return []call{a.release(field)}
}

// send sends the call build makes for the current owner, and leaves it
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
func (a *acquisition) send(build func(field string) call) (string, []int64, time.Duration, error) {
	field := a.owner
	epoch, ok, err := a.c.wd.Unforced(a.wctx, a.s.ref, a.s.covers, a.wait)
	if err != nil || !ok {
		return field, nil, retryAfter, err
	}
	a.st = lease.Stamp{Sent: time.Now(), Epoch: epoch}
	k := build(field)
	k.Takes = true
	r := a.c.tr.Do(a.wctx, k, func(r reply) {
		calls := a.left(field)
		if v, err := r.Int64Slice(); err == nil && len(v) > 0 && v[0] == 1 {
			calls = append(calls, a.gives(field)...)
		}
		a.c.undo(calls...)
	})
	v, err := a.c.acquired(r)
	if nr := notReplicated(err); nr != nil {
		nr.undo = a.c.undoNow(a.wctx, a.gives(field)...) // WithReplicaAck: given back, and the call fails
		return field, nil, 0, err
	}
	if err != nil {
		d, err := a.c.unsure(err, a.wait, &a.dirty)
		return field, nil, d, err
	}
	a.st.Sent = r.Sent
	a.token = fenceToken(a.s, v)
	return field, v, 0, nil
}

// grant makes the hold from the granted reply of the latest attempt, for
// field with count holds (see Client.grant). A grant it cannot trust was
// given back, but that give-back may reach Redis after a next attempt
// under the same owner: the call goes on as a new owner.
func (a *acquisition) grant(field string, count int, renew call, ends ...func() bool) (bool, time.Duration, error) {
	hctx, err := a.c.grant(a.s, a.hparent, field, count, a.token, a.start, a.st, renew, a.release(field), ends...)
	return a.granted(field, hctx, err)
}

// grantAll is grant for a hold on several slots (see Client.grantAll),
// with one renew call per slot and a fenced MultiLock's tokens by name;
// a.st must be the stamp of the attempt's first script.
func (a *acquisition) grantAll(field string, count int, tokens map[string]int64, renew []call) (bool, time.Duration, error) {
	hctx, err := a.c.grantAll(a.s, a.hparent, field, count, a.token, tokens, a.start, a.st, renew, a.gives(field))
	return a.granted(field, hctx, err)
}

// granted applies the outcome of a grant.
func (a *acquisition) granted(field string, hctx context.Context, err error) (bool, time.Duration, error) {
	if errors.Is(err, errUntrusted) {
		a.c.sweep(a.s.lease, a.all(field)...)
		a.owner, a.dirty = a.c.newField(), false
		if a.restart && a.wait {
			return false, 0, errNewOwner
		}
		return false, time.Millisecond, nil
	}
	a.hctx, a.won = hctx, err == nil
	return a.won, 0, err
}

// finish ends the call, which returns err: when it failed, it gives back
// what its attempts may have left (after an attempt whose outcome is
// unknown), and tells the observer (AcquireFailed).
func (a *acquisition) finish(err error) {
	if a.won {
		return
	}
	if a.dirty {
		a.c.sweep(a.s.lease, a.all(a.owner)...)
	}
	if err != nil && a.c.obs.AcquireFailed != nil {
		a.c.obs.AcquireFailed(a.hparent, HoldEvent{Kind: a.s.ref.Kind, Name: a.s.ref.Name, Wait: time.Since(a.start), Cause: err})
	}
}
