package redisync

import (
	"errors"

	"github.com/redisync-go/redisync/internal/cohort"
)

// The Mutex's cohort hand-over: which local waiter a lock is handed to, and
// the bounds of a run, are internal/cohort's; the hand-over itself (in
// memory, or by lua/handoff.lua) is Mutex.Unlock's (reentrant.go).

// errHandoffLeft is a handoff's outcome when its releaser left before the
// reply (a release is bounded by releaseTimeout): the script may still
// run, and what it grants is given back then, so the receiver must not
// adopt it; it waits on as a new owner.
var errHandoffLeft = errors.New("redisync: the releaser left before the handoff's reply")

// giveBackHandoff gives back what a handoff nobody took may have granted:
// at once when it was granted, by a sweep when its outcome is unknown.
func (c *Client) giveBackHandoff(h *cohort.Handoff) {
	switch {
	case errors.Is(h.Err, ErrNotReplicated):
		// given back already
	case h.Err != nil:
		c.sweep(h.Acc.Lease, h.Release)
	case h.Granted:
		if !c.bgStart() {
			c.undo(h.Release) // closing: no background work
			return
		}
		go func() {
			defer c.bg.Done()
			c.undo(h.Release)
		}()
	}
}

// subCounter names how lua/handoff.lua counts the subscribers of a channel
// published with pub: on the lock's node for sharded pub/sub and on a
// single node; not at all ("any": others are assumed to wait) for classic
// pub/sub on a Cluster, whose subscribers may be on any node.
func (c *Client) subCounter(pub string) string {
	switch {
	case pub == "spublish":
		return "shardnumsub"
	case isCluster(c.rdb):
		return "any"
	}
	return "numsub"
}
