package holds

import (
	"cmp"
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
// The same goes for the other calls that give back what Redis may keep
// for this Client: the release of the holds still live when the Client
// closes (Close passes on those refused, see KeepAll), and the undo of
// what an attempt nobody waits for took (Undo: an abandoned attempt's
// grant, a handoff nobody took, a sweep), kept until the lease that
// attempt set would have ended (lease.Deadline from its sending). Those
// scripts too act only on the owner field they name, so sending them
// again is harmless.
//
// Nothing waits for them: a release's return does not change. Once the
// Client closes, those still kept get Close's own bound (ReleaseTimeout
// from then), and are dropped after it.

// KeptEvery is how often the kept releases are sent again.
const KeptEvery = 100 * time.Millisecond

// KeptMax bounds how many releases are kept; a release refused beyond it
// is dropped, as it was before releases were kept.
const KeptMax = 4096

// kept is the set of releases no server has run yet.
type kept struct {
	mu   sync.Mutex
	rels map[any]*keptRelease // by key()
	live bool                 // the loop runs
}

// keptRelease is one release kept: its calls, sent again in order, and
// until when they are.
type keptRelease struct {
	calls []call
	hold  *lease.Hold // the hold released; nil for an undo
	until time.Time   // an undo's: when the lease it gives back would end
}

// key is what r is kept under: its hold, a release kept once however many
// times it is refused; an undo, by itself.
func (r *keptRelease) key() any {
	if r.hold != nil {
		return r.hold
	}
	return r
}

// inTime reports whether what r releases may still be held in Redis: its
// hold's local deadline, or the undo's, has not passed.
func (r *keptRelease) inTime() bool {
	if r.hold != nil {
		return r.hold.InTime()
	}
	return !lease.Expired(r.until)
}

// keptable reports whether err, a release's, says that no server ran it
// (or that it may have run, its reply lost), so that it is kept.
func keptable(err error) bool {
	return (transport.Refused(err) || errors.Is(err, transport.ErrNoReply)) && !errors.Is(err, redis.ErrClosed)
}

// keep keeps the release of h, whose give-back failed with err, when err
// says no server ran it and h's lease stands; it reports whether it did.
func (m *Machine) keep(h *lease.Hold, err error) bool {
	if !keptable(err) || len(h.Release) == 0 || !h.InTime() || !m.keepRelease(&keptRelease{calls: h.Release, hold: h}) {
		return false
	}
	m.log.Warn("redisync: a release reached no server; it is sent again until Redis answers it or its lease ends",
		"kind", h.Ref.Kind, "name", h.Ref.Name, "owner", h.Field, "error", err)
	return true
}

// KeepAll keeps the releases that the Client's Close sent for the holds
// still live and that failed (lease.Keeper.Close): those that reached no
// server are sent again within Close's bound. The others are logged.
func (m *Machine) KeepAll(failed []lease.Unreleased) {
	n, first := 0, error(nil)
	for _, u := range failed {
		if !m.keep(u.Hold, u.Err) {
			n++
			first = cmp.Or(first, u.Err)
		}
	}
	if n > 0 {
		m.log.Warn("redisync: could not release holds as the Client closed; Redis frees them when their leases end",
			"holds", n, "error", first)
	}
}

// keepUndo keeps calls, an undo that failed with err, when err says no
// server ran them and until has not passed; it reports whether it did.
func (m *Machine) keepUndo(calls []call, until time.Time, err error) bool {
	if !keptable(err) || len(calls) == 0 || lease.Expired(until) {
		return false
	}
	if !m.keepRelease(&keptRelease{calls: calls, until: until}) {
		return false
	}
	m.log.Warn("redisync: a release reached no server; it is sent again until Redis answers it or its lease ends",
		"script", scriptName(calls[0]), "key", keyOf(calls[0]), "error", err)
	return true
}

// keepRelease adds r to the kept releases (a release kept already is kept
// once), starting the loop that sends them again; false when there is no
// room, or the Client is closing with no loop to give it Close's bound.
func (m *Machine) keepRelease(r *keptRelease) bool {
	key := r.key()
	k := &m.kept
	k.mu.Lock()
	if _, ok := k.rels[key]; ok {
		k.mu.Unlock()
		return true
	}
	if len(k.rels) >= KeptMax {
		k.mu.Unlock()
		return false
	}
	if k.rels == nil {
		k.rels = map[any]*keptRelease{}
	}
	k.rels[key] = r
	start := !k.live
	k.live = true
	k.mu.Unlock()
	if start && !m.goKept() {
		k.mu.Lock()
		delete(k.rels, key)
		k.live = false
		k.mu.Unlock()
		return false
	}
	return true
}

// Kept returns how many releases are kept, not run yet.
func (m *Machine) Kept() int {
	m.kept.mu.Lock()
	defer m.kept.mu.Unlock()
	return len(m.kept.rels)
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
		rs := m.keptBatch()
		if rs == nil {
			return
		}
		m.sendKeptOnce(rs, by)
	}
}

// keptBatch returns the kept releases still in time, dropping the others;
// nil, and the loop is over, when none is left.
func (m *Machine) keptBatch() []*keptRelease {
	k := &m.kept
	k.mu.Lock()
	defer k.mu.Unlock()
	var rs []*keptRelease
	ended := 0
	for key, r := range k.rels {
		if !r.inTime() {
			delete(k.rels, key)
			ended++
			continue
		}
		rs = append(rs, r)
	}
	if ended > 0 {
		m.log.Warn("redisync: releases that reached no server within their lease; Redis freed those locks at the lease's end",
			"releases", ended)
	}
	if len(rs) == 0 {
		k.live = false
		return nil
	}
	return rs
}

// sendKeptOnce sends the calls of rs in one batch, within ReleaseTimeout
// and by (when set), and forgets the releases Redis answered.
func (m *Machine) sendKeptOnce(rs []*keptRelease, by time.Time) {
	ctx, cancel := context.WithTimeout(m.keptCtx, ReleaseTimeout)
	defer cancel()
	if !by.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, by)
		defer cancelBy()
	}
	var calls []call
	for _, r := range rs {
		calls = append(calls, r.calls...)
	}
	sent := time.Now()
	replies := m.tr.DoAll(ctx, calls)
	var done []*keptRelease
	i := 0
	for _, r := range rs {
		ok := true
		for range r.calls {
			ok = ok && keptAnswered(replies[i])
			i++
		}
		if ok {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		return
	}
	m.kept.mu.Lock()
	for _, r := range done {
		if m.kept.rels[r.key()] == r {
			delete(m.kept.rels, r.key())
		}
	}
	m.kept.mu.Unlock()
	for _, r := range done {
		if r.hold != nil {
			m.recorded(r.hold, sent) // for the repair after a failover (heal.go)
		}
	}
	m.log.Info("redisync: releases that had reached no server were sent again; Redis answered them", "releases", len(done))
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

// dropKept forgets every kept release, logged with why.
func (m *Machine) dropKept(why string) {
	k := &m.kept
	k.mu.Lock()
	n := len(k.rels)
	k.rels = nil
	k.live = false
	k.mu.Unlock()
	if n > 0 {
		m.log.Warn("redisync: could not send again releases that reached no server; Redis frees those locks when their leases end",
			"releases", n, "why", why)
	}
}

// keyOf names k's first key for the log.
func keyOf(k call) string {
	if len(k.Keys) == 0 {
		return ""
	}
	return k.Keys[0]
}
