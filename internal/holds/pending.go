package holds

import (
	"errors"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// pending is a release that is not a hold's last, under the hold's lock,
// which Release hands to ReleaseBy in its context: when the release's
// caller leaves before the reply (ReleaseTimeout), left is set and the
// hold's lock stays held until the reply comes; late applies the reply
// then, as Release would have, and releases the lock. The scripts set
// counts rather than add to them, so the order they land in matters: with
// the lock kept until the reply, no later script through the hold can be
// overtaken by this one.
type pending struct {
	m        *Machine
	h        *lease.Hold
	count, n int  // the hold's count before the release, and how many it gives up
	left     bool // the caller left: late releases the hold's lock
}

type pendingKey struct{}

func (p *pending) late(r reply) {
	h := p.h
	defer h.Mu.Unlock()
	n, err := r.Int64()
	switch {
	case err != nil && errors.Is(err, transport.ErrNoReply):
		// Written, its reply lost: it may have run. The release scripts
		// set the count the hold has after them, so counting it done is
		// right either way (the next release sets the count again, and
		// a last one frees the lock).
		h.Count = p.count - p.n
	case err != nil:
		// Its outcome is unknown; the next script through the hold
		// sets the count again.
	case n == 0:
		p.m.Lose(h, true)
	case n == 1:
		h.Count = p.count - p.n
		p.m.wd.Extend(h, r.Sent)
	}
}
