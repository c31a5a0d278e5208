package holds

import (
	"context"
	"strings"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// The releaser heals what a failover lost. Replication is asynchronous: a
// release the old primary ran in its last moment may never reach the
// replica promoted in its place, which then keeps the released hold until
// its lease runs out (30s by default), nobody renewing it. A Client knows
// what it released a moment ago (recent.go): when it sees the primary of
// a released lock change (a new primary's replication id, or a slot
// served by another master), it sends those releases again. Each is the
// hold's own give-back script, owner-checked and harmless when the hold
// is gone, and a released hold's field is never used again (a field is
// new with each owner; one handed over in memory was never released in
// Redis, so it is not recorded): a release that did reach the new primary,
// or a lock another owner has taken meanwhile, is left as it is.

// HealEvery is how often the healer asks who serves the locks released
// within their lease (one INFO per primary); it asks nothing while there
// are none.
const HealEvery = 250 * time.Millisecond

// healHot is how long after a change of primary the releases recorded
// since are sent again too: a release can be answered by the old primary
// after the healer has seen the new one.
const healHot = 2 * time.Second

// healLastFor bounds the healer's last round, at Close.
const healLastFor = time.Second

// Primary says which server is the primary serving a key: ID names it (a
// new ID after a failover, or when a Cluster slot moves to another
// master). Err: not known now (the primary unreachable, or in the middle
// of the switch). The transport answers it (Transport.Primaries).
type Primary = transport.Primary

// Primaries returns the primary of each key, in order.
type Primaries func(ctx context.Context, keys []string) []Primary

// healer is the state of the healer's loop (owned by it).
type healer struct {
	ids  map[int]string    // the ID last seen of each route (Config.Route)
	hot  map[int]time.Time // routes that changed, until when their new releases are resent
	last uint64            // seq of the newest record the loop has seen
	told bool              // said that the server refuses to say who serves
}

// recorded notes that h was released in Redis by a script sent at (a last
// release, or a give-back, that answered), for the repair after a
// failover. It is the one call the release paths make; it costs an append
// to a bounded ring.
func (m *Machine) recorded(h *lease.Hold, at time.Time) {
	if m.cfg.Primaries == nil || at.IsZero() {
		return // a hand-over in memory sends nothing: the field lives on
	}
	if m.recent.add(h, at) {
		if !m.Go(m.heal) {
			m.recent.mu.Lock()
			m.recent.live = false
			m.recent.mu.Unlock()
		}
	}
}

// Kick asks the healer to look at once (the subscription came back, say,
// perhaps from another server).
func (m *Machine) Kick() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// heal is the healer's loop, started by the first release recorded; it
// ends with the Client.
func (m *Machine) heal() {
	hs := &healer{ids: map[int]string{}, hot: map[int]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a round ends with the Client
		select {
		case <-m.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(HealEvery)
	defer t.Stop()
	for {
		select {
		case <-m.closed:
			m.healLast()
			return
		case <-t.C:
		case <-m.kick:
		}
		m.healRound(ctx, hs, time.Now())
	}
}

// healLast is the healer's last round, as the Client closes: a switch
// that came since the last round (up to HealEvery before Close) would
// otherwise leave the releases the old primary answered to their leases,
// with no Client left to send them again. It asks Redis nothing (a
// question through go-redis is not bounded by its context while Redis is
// silent): it sends again the releases within their lease made from
// healHot before the last switch of their primary that the transport was
// told (by its watcher, a MOVED, a READONLY) to now, and takes healLastFor
// at most.
func (m *Machine) healLast() {
	again := m.recent.sinceSwitch(time.Now(), healHot, m.tr.SwitchedAt)
	if len(again) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), healLastFor)
	defer cancel()
	m.resend(ctx, again)
}

// healRound asks who serves the locks of the records within their lease
// (one key per route), and sends again the records of every route whose
// primary changed, and on a route that changed a moment ago the records
// added since the last round.
func (m *Machine) healRound(ctx context.Context, hs *healer, now time.Time) {
	route := m.cfg.Route
	if route == nil {
		route = func(string) int { return 0 }
	}
	routes, newest := m.recent.routes(now, route)
	if len(routes) == 0 {
		return
	}
	ids := make([]int, 0, len(routes))
	ks := make([]string, 0, len(routes))
	for id, k := range routes {
		ids, ks = append(ids, id), append(ks, k)
	}
	ctx, cancel := context.WithTimeout(ctx, ReleaseTimeout)
	defer cancel()
	changed := map[int]bool{}
	told := map[string]bool{} // new primaries logged: one line each, not one per slot
	for i, p := range m.cfg.Primaries(ctx, ks) {
		if p.Err != nil {
			if !hs.told && refused(p.Err) {
				hs.told = true
				m.log.Warn("redisync: the server refuses INFO, so this Client cannot see a failover and send again the releases it lost (a waiter of the Client still does); allow INFO to its user",
					"key", ks[i], "error", p.Err)
			}
			continue
		}
		route := ids[i]
		prev, seen := hs.ids[route]
		hs.ids[route] = p.ID
		if !seen || prev != p.ID {
			changed[route] = true
			if seen {
				hs.hot[route] = now.Add(healHot)
			}
			if seen && !told[p.ID] {
				told[p.ID] = true
				m.log.Info("redisync: the primary changed; sending again the releases it may have lost",
					"key", ks[i], "primary", p.ID)
			}
		}
	}
	again := m.recent.calls(now, route, newest, func(route int, seq uint64) bool {
		return changed[route] || (seq > hs.last && now.Before(hs.hot[route]))
	})
	hs.last = newest
	for r, until := range hs.hot {
		if !now.Before(until) {
			delete(hs.hot, r)
		}
	}
	if len(again) > 0 {
		m.resend(ctx, again)
	}
}

// refused reports whether err is the server's refusal to say who it is
// (an ACL without INFO, or a server or proxy without the command), which
// does not pass as a failover's errors do.
func refused(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") || strings.HasPrefix(msg, "ERR unknown command")
}

// HealFor sends again, at once and in the background, the releases of
// ref this Client made within their lease and has not yet sent again for
// a waiter: a waiter of this Client found the lock held, with left of its
// lease, perhaps by one of them that a failover lost (one whose lease
// would have ended later than left). The calls are owner-checked: they
// free the lock only when one of them still holds it, and its channel
// wakes the waiter then.
func (m *Machine) HealFor(ref lease.Ref, left time.Duration) {
	if m.cfg.Primaries == nil || left <= 0 {
		return
	}
	calls := m.recent.forWaiter(ref, time.Now(), left)
	if len(calls) == 0 {
		return
	}
	m.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ReleaseTimeout)
		defer cancel()
		m.resend(ctx, calls)
	})
}

// resend sends calls, release scripts, again; failures are logged in one
// line (a primary that refuses writes for a moment would refuse them
// all), and the lease frees those locks at its end.
func (m *Machine) resend(ctx context.Context, calls []call) {
	failed, first, script := 0, error(nil), ""
	for i, r := range m.tr.DoAll(ctx, calls) {
		if err := r.Err(); err != nil {
			if failed++; first == nil {
				first, script = err, scriptName(calls[i])
			}
		}
	}
	if failed > 0 {
		m.log.Warn("redisync: could not send again releases a failover may have lost; their leases free them",
			"failed", failed, "of", len(calls), "script", script, "error", first)
	}
}
