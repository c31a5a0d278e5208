package holds

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/lease"
)

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

func (m *Machine) Stamp(s *Spec) lease.Stamp {
	return lease.Stamp{Sent: time.Now(), Epoch: m.wd.Epoch(s.Ref, s.Covers)}
}

// grant turns a first acquisition, made by a script sent at sent, into a
// hold of field bound to parent (it ends when parent does), with fencing
// token token (0: none). renew and
// release are the hold's scripts. It gives the acquisition back and fails
// when it cannot be trusted (ErrUntrusted), when parent
// has ended, or when the client is closed. ends are run when the hold ends;
// when there is no hold, the caller runs them.
func (m *Machine) Grant(s *Spec, parent context.Context, field string, count int, token int64, start time.Time, st lease.Stamp,
	renew, release call, ends ...func() bool) (context.Context, error) {
	h := m.newHold(s, parent, field, count, token, ends)
	h.One = [2]call{renew, release}
	h.Renew, h.Release = h.One[:1:1], h.One[1:2:2]
	return m.grantHold(s, h, start, st)
}

// grantAll is grant for a hold on several slots: renew and release have
// one call per slot, and st is the stamp of the attempt's first script
// (its leases count from then). tokens are a fenced MultiLock's, by name.
func (m *Machine) GrantAll(s *Spec, parent context.Context, field string, count int, token int64, tokens map[string]int64,
	start time.Time, st lease.Stamp, renew, release []call, ends ...func() bool) (context.Context, error) {
	h := m.newHold(s, parent, field, count, token, ends)
	h.Tokens = tokens
	h.Renew, h.Release = renew, release
	return m.grantHold(s, h, start, st)
}

func (m *Machine) newHold(s *Spec, parent context.Context, field string, count int, token int64, ends []func() bool) *lease.Hold {
	h := &lease.Hold{
		Ref: s.Ref, Field: field, Scope: scopeOf(parent), Lease: s.Lease, Renewed: s.Renewed, Token: token,
		Parts: s.Parts, Covers: s.Covers, Parent: parent, Count: count, Taken: time.Now(),
		Mu: lease.NewHoldLock(),
	}
	for _, end := range ends {
		h.OnEnd(end)
	}
	return h
}

// grantHold is grant's and grantAll's common part.
func (m *Machine) grantHold(s *Spec, h *lease.Hold, start time.Time, st lease.Stamp) (context.Context, error) {
	sent, parent := st.Sent, h.Parent
	giveUp := func(err error) (context.Context, error) {
		m.Cleanup(h.Lease, h.Release...)
		return nil, err
	}
	if lease.Expired(lease.Deadline(sent, s.Lease)) {
		return giveUp(ErrUntrusted)
	}
	if err := parent.Err(); err != nil {
		return giveUp(err)
	}
	if err := m.wd.Add(h, st); err != nil {
		return giveUp(err)
	}
	h.OnEnd(context.AfterFunc(parent, func() {
		if m.wd.End(h, lease.EndParent, context.Cause(parent)) {
			m.GiveBack(h)
		}
	}))
	if m.cfg.Acquired != nil {
		m.cfg.Acquired(h.Parent, s.Ref, h.Taken.Sub(start), st.Handoff)
	}
	return h.Ctx, nil
}
