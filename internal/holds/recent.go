package holds

import (
	"sync"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// RecentMax bounds how many releases a Client remembers for the repair
// after a failover (see heal.go): the newest are kept, as a failover loses
// the releases of its last moments only.
const RecentMax = 1024

// released is one hold released in Redis a moment ago: the calls that give
// up what Redis may still keep of it (the hold's release calls, owner
// checked and harmless when it is gone), kept as long as its lease could
// have kept it in Redis.
type released struct {
	ref   lease.Ref
	field string
	one   call   // h.Release[0], copied: the hold itself is not kept
	more  []call // h.Release when it has several calls (a MultiLock across slots)
	at    time.Time
	until time.Time // at + the hold's lease
	seq   uint64
	route int  // the route of its first call's key (Config.Route), once the healer has asked; -1 before
	waitr bool // sent again once for a waiter of this Client (heal.go)
}

// recent is the bounded record of a Client's recent releases: a ring of
// at most RecentMax, each kept for its hold's lease at most. Adding is an
// append under a mutex, without allocation once the ring is full.
type recent struct {
	mu   sync.Mutex
	ring []released
	next int       // where the next one goes once the ring is full
	seq  uint64    // of the newest added
	last time.Time // the latest until of any record
	live bool      // the healer runs (heal.go)
}

// add records h, released by a script sent at; it reports whether the
// healer must be started.
func (r *recent) add(h *lease.Hold, at time.Time) (start bool) {
	e := released{ref: h.Ref, field: h.Field, at: at, until: at.Add(h.Lease), route: -1}
	switch len(h.Release) {
	case 0:
		return false
	case 1:
		e.one = h.Release[0]
	default:
		e.more = h.Release
	}
	r.mu.Lock()
	r.seq++
	e.seq = r.seq
	if e.until.After(r.last) {
		r.last = e.until
	}
	if len(r.ring) < RecentMax {
		r.ring = append(r.ring, e)
	} else {
		r.ring[r.next] = e
		r.next = (r.next + 1) % RecentMax
	}
	start = !r.live
	r.live = true
	r.mu.Unlock()
	return start
}

// routes returns one key of each route the records within their lease
// at now are on (Config.Route of the first key of each of a record's
// calls: a MultiLock's are one per Cluster slot; a single primary has one
// route), and the seq of the newest record. It copies no record.
func (r *recent) routes(now time.Time, route func(string) int) (map[int]string, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[int]string
	for i := range r.ring {
		e := &r.ring[i]
		if !now.Before(e.until) {
			continue
		}
		key := e.key()
		if key == "" {
			continue
		}
		if out == nil {
			out = map[int]string{}
		}
		if e.route < 0 {
			e.route = route(key)
		}
		out[e.route] = key
		for _, k := range e.rest() {
			if len(k.Keys) > 0 {
				out[route(k.Keys[0])] = k.Keys[0]
			}
		}
	}
	return out, r.seq
}

// calls returns the calls of the records within their lease at now, up
// to seq upto (those routes saw), that again picks.
func (r *recent) calls(now time.Time, route func(string) int, upto uint64, again func(route int, seq uint64) bool) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for i := range r.ring {
		e := &r.ring[i]
		if e.seq <= upto && now.Before(e.until) && e.key() != "" && e.picked(route, again) {
			out = append(out, e.calls()...)
		}
	}
	return out
}

// picked reports whether again picks e on one of its routes: the route of
// each of its calls (a MultiLock's are one per slot,
// and a failover of any of their masters may lose its release there).
func (e *released) picked(route func(string) int, again func(route int, seq uint64) bool) bool {
	if e.route < 0 {
		e.route = route(e.key())
	}
	if again(e.route, e.seq) {
		return true
	}
	for _, k := range e.rest() {
		if len(k.Keys) > 0 && again(route(k.Keys[0]), e.seq) {
			return true
		}
	}
	return false
}

// sinceSwitch returns the calls of the records within their lease at now
// made from before ahead of the last switch (switchedAt: zero when none)
// of the primary of one of their keys.
func (r *recent) sinceSwitch(now time.Time, before time.Duration, switchedAt func(key string) time.Time) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for i := range r.ring {
		e := &r.ring[i]
		if !now.Before(e.until) {
			continue
		}
		for _, k := range e.calls() {
			if len(k.Keys) == 0 {
				continue
			}
			if at := switchedAt(k.Keys[0]); !at.IsZero() && e.at.After(at.Add(-before)) {
				out = append(out, e.calls()...)
				break
			}
		}
	}
	return out
}

// rest returns e's calls after its first: those of a hold on names in
// several Cluster slots.
func (e *released) rest() []call {
	if len(e.more) < 2 {
		return nil
	}
	return e.more[1:]
}

// key returns the key e's route is known by: its first call's first key.
func (e *released) key() string {
	k := e.one
	if e.more != nil {
		k = e.more[0]
	}
	if len(k.Keys) == 0 {
		return ""
	}
	return k.Keys[0]
}

// forWaiter returns the calls of the records of ref not yet sent again for
// a waiter whose lease would end after the holder's, left, and marks them
// sent: a holder that took the lock after the release has a lease that
// ends after the released one's would have (with the same lease), while
// the released hold itself, kept by a failover, ends before.
func (r *recent) forWaiter(ref lease.Ref, now time.Time, left time.Duration) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	if left >= r.last.Sub(now) {
		return nil // the common case under contention: no scan
	}
	var out []call
	for i := range r.ring {
		e := &r.ring[i]
		if e.ref == ref && !e.waitr && left < e.until.Sub(now) {
			e.waitr = true
			out = append(out, e.calls()...)
		}
	}
	return out
}

// calls returns what gives back what Redis may keep of e's hold.
func (e *released) calls() []call {
	if e.more != nil {
		return e.more
	}
	return []call{e.one}
}
