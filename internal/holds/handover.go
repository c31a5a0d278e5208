package holds

import (
	"errors"

	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/errs"
)

// The Mutex's cohort hand-over: which local waiter a lock is handed to, and
// the bounds of a run, are internal/cohort's; the hand-over itself (in
// memory, or by lua/handoff.lua) is Mutex.Unlock's (reentrant.go).

// ErrHandoffLeft is a handoff's outcome when its releaser left before the
// reply (a release is bounded by ReleaseTimeout): the script may still
// run, and what it grants is given back then, so the receiver must not
// adopt it; it waits on as a new owner.
var ErrHandoffLeft = errors.New("redisync: the releaser left before the handoff's reply")

// GiveBackHandoff gives back what a handoff nobody took may have granted:
// at once when it was granted, by a sweep when its outcome is unknown.
// Either way through Undo: a give-back that reached no server is kept
// (kept.go) until the lease the handoff set would have ended.
func (m *Machine) GiveBackHandoff(h *cohort.Handoff) {
	switch {
	case errors.Is(h.Err, errs.NotReplicated):
		// given back already
	case h.Err != nil:
		m.Sweep(h.Acc.Lease, h.Release)
	case h.Granted:
		if !m.bgStart() {
			m.Undo(h.St.Sent, h.Acc.Lease, h.Release) // closing: no background work
			return
		}
		go func() {
			defer m.bg.Done()
			m.Undo(h.St.Sent, h.Acc.Lease, h.Release)
		}()
	}
}
