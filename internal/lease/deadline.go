package lease

import (
	"sync/atomic"
	"time"
)

// margin is how long before a lease's expiry in Redis its holder is told it
// is lost: room for the difference between the two clocks' rates, for the
// timer's latency (up to 10ms measured under the race detector on a busy
// 2-core machine) and for the holder to react.
func margin(lease time.Duration) time.Duration {
	return max(lease/10, min(lease/2, 20*time.Millisecond))
}

// Deadline is when a lease set by a script sent at sent must be taken as
// lost. Redis counts expiries on a clock of whole milliseconds, so a PEXPIRE
// of n ms can expire as little as n-1 ms after it ran: the Deadline counts
// a millisecond less, then the margin.
func Deadline(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(lease - time.Millisecond - margin(lease))
}

// WholeMs rounds d up to whole milliseconds, the resolution of Redis's
// leases, so the local deadline and Redis count the same lease.
func WholeMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// dlStore is a hold's local deadline (see deadline), on the holds' clock
// (clock.go), readable without its lock, as the one number a moment's
// distance to now needs (clockAt.pos); 0 when the hold has none to watch
// (not yet registered, or ended), as in the zero dlStore.
type dlStore struct{ at atomic.Int64 }

// set sets the deadline t and returns it on the holds' clock.
func (d *dlStore) set(t time.Time) int64 { at := stamp(t).pos(); d.at.Store(at); return at }

func (d *dlStore) clear() { d.at.Store(0) }

// passed reports whether the deadline has passed.
func (d *dlStore) passed() bool {
	at := d.at.Load()
	return at != 0 && now().pos()-at >= 0
}

// left returns how long until the deadline passes (0 when it has, or when
// there is none).
func (d *dlStore) left() time.Duration {
	at := d.at.Load()
	if at == 0 {
		return 0
	}
	return time.Duration(max(0, at-now().pos()))
}

// Expired reports whether the deadline dl (see deadline) has passed on the
// holds' clock.
// dl carries the readings of a moment not later than now (see stamp).
func Expired(dl time.Time) bool {
	n := now()
	return stampAt(dl, n).since(n) >= 0
}
