package holds

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// Releases that reached no server are kept. A release, or the give-back
// of a hold that ended, that no server ran (a connection refused while
// the primary is down, no primary known yet, a replica's READONLY,
// LOADING, CLUSTERDOWN: see transport.Refused) would leave the lock held
// in Redis until its lease ends, although the server is back, or a
// replica promoted, a second later. So the hold is kept here, and its
// release calls (owner-checked, harmless once the hold is gone: a field
// is new with each owner) are sent again every KeptEvery, in one batch
// for all the holds kept, until Redis answers them or the hold's lease
// would have ended (its local deadline, on the holds' clock: after it,
// Redis has freed the lock itself). So is a release written whose reply
// was lost (transport.ErrNoReply: its connection failed after the write,
// or stayed silent past its liveness): it may have run, and sending it
// again is harmless for the same reason; the transport never does it
// itself. A release whose reply did not come within its bound while its
// connection lives (a paused Redis) is not kept: its reply may still
// come, and the failover repair (heal.go) sends it again when the
// primary changes.
//
// Nothing waits for them: a release's return does not change. Once the
// Client closes, those still kept get Close's own bound (ReleaseTimeout
// from then), and are dropped after it.

// KeptEvery is how often the kept releases are sent again.
const KeptEvery = 100 * time.Millisecond

// KeptMax bounds how many holds are kept; a release refused beyond it is
// dropped, as it was before releases were kept.
const KeptMax = 4096

// kept is the set of holds whose release no server has run yet.
type kept struct {
	mu    sync.Mutex
	holds map[*lease.Hold]struct{}
	live  bool // the loop runs
}

// keep keeps h, whose give-back failed with err, when err says no server
// ran it and h's lease stands; it reports whether it did.
func (m *Machine) keep(h *lease.Hold, err error) bool {
	if !transport.Refused(err) && !errors.Is(err, transport.ErrNoReply) || errors.Is(err, redis.ErrClosed) || len(h.Release) == 0 || !h.InTime() {
		return false
	}
	k := &m.kept
	k.mu.Lock()
	if _, ok := k.holds[h]; ok {
		k.mu.Unlock()
		return true
	}
	if len(k.holds) >= KeptMax {
		k.mu.Unlock()
		return false
	}
	if k.holds == nil {
		k.holds = map[*lease.Hold]struct{}{}
	}
	k.holds[h] = struct{}{}
	start := !k.live
	k.live = true
	k.mu.Unlock()
	if start && !m.goKept() {
		// Closing, with no loop to give it Close's bound.
		k.mu.Lock()
		delete(k.holds, h)
		k.live = false
		k.mu.Unlock()
		return false
	}
	m.log.Warn("redisync: a release reached no server; it is sent again until Redis answers it or its lease ends",
		"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
	return true
}

// Kept returns how many holds are kept, their release not run yet.
func (m *Machine) Kept() int {
	m.kept.mu.Lock()
	defer m.kept.mu.Unlock()
	return len(m.kept.holds)
}

// goKept starts sendKept, counted as background work and as the loop
// Machine.Close stops; false once Close has begun.
func (m *Machine) goKept() bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.bgClosed {
		return false
	}
	m.bg.Add(1)
	m.keptLoop.Add(1)
	go func() {
		defer m.bg.Done()
		defer m.keptLoop.Done()
		m.sendKept()
	}()
	return true
}

// stopKept ends the loop that sends the kept releases again (at Close's
// deadline), and waits until it has: its round in flight leaves at once.
func (m *Machine) stopKept() {
	m.keptCancel()
	m.keptLoop.Wait()
}

// sendKept is the loop that sends the kept releases again, started by the
// first kept; it ends when none is left, or with the Client (once Close's
// bound has passed, or Machine.Close stopped it). While it runs it wants
// the primary's switches learned (transport.WatchSwitches: one INFO per
// primary every transport.SwitchEvery), so that a Cluster client's slot
// map learns the replica promoted in place of a master that refuses
// connections (nothing else tells it: a dial refused is no MOVED), and it
// sends them at once on a switch.
func (m *Machine) sendKept() {
	t := time.NewTicker(KeptEvery)
	defer t.Stop()
	switched := make(chan struct{}, 1)
	if m.tr != nil {
		defer m.tr.WatchSwitches()()
		defer m.tr.OnSwitch(func(transport.Switch) {
			select {
			case switched <- struct{}{}:
			default:
			}
		})()
	}
	closed := m.closed
	var by time.Time // once the Client closes: the bound
	for {
		select {
		case <-t.C:
		case <-switched:
		case <-closed:
			closed, by = nil, time.Now().Add(ReleaseTimeout)
		case <-m.keptCtx.Done():
		}
		if m.keptCtx.Err() != nil || !by.IsZero() && !time.Now().Before(by) {
			m.dropKept("the Client closed")
			return
		}
		hs := m.keptBatch()
		if hs == nil {
			return
		}
		m.sendKeptOnce(hs, by)
	}
}

// keptBatch returns the holds kept whose lease stands, dropping the
// others; nil, and the loop is over, when none is left.
func (m *Machine) keptBatch() []*lease.Hold {
	k := &m.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	var hs []*lease.Hold
	ended := 0
	for h := range k.holds {
		if !h.InTime() {
			delete(k.holds, h)
			ended++
			continue
		}
		hs = append(hs, h)
	}
	if ended > 0 {
		m.log.Warn("redisync: releases that reached no server within their lease; Redis freed those locks at the lease's end",
			"holds", ended)
	}
	if len(hs) == 0 {
		k.live = false
		return nil
	}
	return hs
}

// sendKeptOnce sends the release calls of hs in one batch, within
// ReleaseTimeout and by (when set), and forgets the holds Redis answered.
func (m *Machine) sendKeptOnce(hs []*lease.Hold, by time.Time) {
	ctx, cancel := context.WithTimeout(m.keptCtx, ReleaseTimeout)
	defer cancel()
	if !by.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, by)
		defer cancelBy()
	}
	var calls []call
	for _, h := range hs {
		calls = append(calls, h.Release...)
	}
	sent := time.Now()
	rs := m.tr.DoAll(ctx, calls)
	var done []*lease.Hold
	i := 0
	for _, h := range hs {
		ok := true
		for range h.Release {
			ok = ok && keptAnswered(rs[i])
			i++
		}
		if ok {
			done = append(done, h)
		}
	}
	if len(done) == 0 {
		return
	}
	m.kept.mu.Lock()
	for _, h := range done {
		delete(m.kept.holds, h)
	}
	m.kept.mu.Unlock()
	for _, h := range done {
		m.recorded(h, sent) // for the repair after a failover (heal.go)
	}
	m.log.Info("redisync: releases that had reached no server were sent again; Redis answered them", "holds", len(done))
}

// keptAnswered reports whether r, a kept release's reply, came from a
// server that ran it (or refused it for good: another type under the
// key). A refusal for now, a connection that failed, a reply that did
// not come in time: not yet, and it is sent again.
func keptAnswered(r reply) bool {
	err := r.Err()
	if err == nil {
		return true
	}
	var re redis.Error
	return !r.Refused() && errors.As(err, &re)
}

// dropKept forgets every kept hold, logged with why.
func (m *Machine) dropKept(why string) {
	k := &m.kept
	k.mu.Lock()
	n := len(k.holds)
	k.holds = nil
	k.live = false
	k.mu.Unlock()
	if n > 0 {
		m.log.Warn("redisync: could not send again releases that reached no server; Redis frees those locks when their leases end",
			"holds", n, "why", why)
	}
}
