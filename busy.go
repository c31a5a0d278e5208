package redisync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A wait that ends while its lock is busy (its context's deadline, a
// cancellation, TryLockFor's bound) says who holds the lock and the lease
// left, in one more read made only then (holds.Spec.Busy): the types below
// give each primitive's spec that read without an allocation per handle.
// The read is bounded by busyReadTimeout: the wait has ended, and a Redis
// that has gone silent meanwhile delays its answer by that much at most;
// a read that fails or does not answer in time adds nothing to the error.
type (
	mutexBusy    Mutex
	fairBusy     FairMutex
	rwBusy       RWMutex
	semBusy      Semaphore
	multiBusy    MultiLock
	electionBusy Election
)

// busyReadTimeout bounds the read of a busy lock's holders once its wait
// has ended (Client.busyRead overrides it).
const busyReadTimeout = 50 * time.Millisecond

// busyCtx bounds a busy read of c's.
func busyCtx(ctx context.Context, c *Client) (context.Context, context.CancelFunc) {
	d := busyReadTimeout
	if c.busyRead > 0 {
		d = c.busyRead
	}
	return context.WithTimeout(ctx, d)
}

func (b *mutexBusy) Busy(ctx context.Context) string {
	ctx, cancel := busyCtx(ctx, b.c)
	defer cancel()
	hs, err := (*Mutex)(b).Holders(ctx)
	return busyText(hs, err, "hold", false)
}

func (b *fairBusy) Busy(ctx context.Context) string {
	ctx, cancel := busyCtx(ctx, b.c)
	defer cancel()
	hs, err := (*FairMutex)(b).Holders(ctx)
	return busyText(hs, err, "hold", false)
}

func (b *rwBusy) Busy(ctx context.Context) string {
	ctx, cancel := busyCtx(ctx, b.c)
	defer cancel()
	hs, err := (*RWMutex)(b).Holders(ctx)
	return busyText(hs, err, "hold", true)
}

func (b *semBusy) Busy(ctx context.Context) string {
	ctx, cancel := busyCtx(ctx, b.c)
	defer cancel()
	hs, err := (*Semaphore)(b).Holders(ctx)
	if len(hs) == 0 {
		return "" // no permit held: too few permits (or never set, which the error says)
	}
	return busyText(hs, err, "permit", false)
}

func (b *multiBusy) Busy(ctx context.Context) string {
	m := (*MultiLock)(b)
	ctx, cancel := busyCtx(ctx, m.c)
	defer cancel()
	byName, err := m.holders(ctx)
	if err != nil {
		return ""
	}
	var parts []string
	for _, n := range m.names {
		if hs := byName[n]; len(hs) > 0 {
			parts = append(parts, strconv.Quote(n)+" "+busyText(hs, nil, "hold", false))
		}
	}
	if len(parts) == 0 {
		return "none of its names is held now: they were freed meanwhile"
	}
	return strings.Join(parts, "; ")
}

func (b *electionBusy) Busy(ctx context.Context) string {
	ctx, cancel := busyCtx(ctx, b.c)
	defer cancel()
	st, err := (*Election)(b).read(ctx)
	switch {
	case err != nil:
		return ""
	case st.Term == 0:
		return "nobody leads now: the leadership ended meanwhile"
	}
	return fmt.Sprintf("led by %q (term %d, %s)", st.Value, st.Term, leaseLeft(st.pttl))
}

// busyShown is how many holders a busy wait's error names; it counts the
// others.
const busyShown = 3

// busyText describes hs, who holds a lock, for the error of a wait that
// ended while it was busy ("" when they could not be read: err); unit is
// what Holder.Count counts; rw says which holds write and which read.
func busyText(hs []Holder, err error, unit string, rw bool) string {
	if err != nil {
		return ""
	}
	if len(hs) == 0 {
		return "no holder now: it was freed meanwhile"
	}
	var b strings.Builder
	b.WriteString("held by ")
	for i, h := range hs {
		if i == busyShown {
			fmt.Fprintf(&b, "; and %d more", len(hs)-busyShown)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		units := unit
		if h.Count != 1 {
			units += "s"
		}
		side := ""
		switch {
		case rw && h.Write:
			side = "write, "
		case rw:
			side = "read, "
		}
		fmt.Fprintf(&b, "client %s (%s%d %s, %s)", h.ClientID, side, h.Count, units, leaseLeft(h.Lease))
	}
	return b.String()
}

// leaseLeft describes the lease left of a hold, for a message.
func leaseLeft(d time.Duration) string {
	if d < 0 {
		return "no lease: its key has no expiry"
	}
	return "lease " + d.Round(time.Millisecond).String() + " left"
}
