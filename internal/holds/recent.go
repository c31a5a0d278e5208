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
	waitr bool // sent again once for a waiter of this Client (heal.go)
}

// recent is the bounded record of a Client's recent releases: a ring of
// at most RecentMax, each kept for its hold's lease at most. Adding is an
// append under a mutex, without allocation once the ring is full.
type recent struct {
	mu   sync.Mutex
	ring []released
	next int    // where the next one goes once the ring is full
	seq  uint64 // of the newest added
	live bool   // the healer runs (heal.go)
}

// add records h, released by a script sent at; it reports whether the
// healer must be started.
func (r *recent) add(h *lease.Hold, at time.Time) (start bool) {
	e := released{ref: h.Ref, field: h.Field, at: at, until: at.Add(h.Lease)}
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

// since returns the records still within their lease at now whose seq is
// above after, oldest first.
func (r *recent) since(now time.Time, after uint64) []released {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []released
	n := len(r.ring)
	for i := range n {
		e := r.ring[(r.next+i)%n]
		if e.seq > after && now.Before(e.until) {
			out = append(out, e)
		}
	}
	return out
}

// forWaiter returns the calls of the records of ref not yet sent again for
// a waiter whose lease would end after the holder's, left, and marks them
// sent: a holder that took the lock after the release has a lease that
// ends after the released one's would have (with the same lease), while
// the released hold itself, kept by a failover, ends before.
func (r *recent) forWaiter(ref lease.Ref, now time.Time, left time.Duration) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
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
