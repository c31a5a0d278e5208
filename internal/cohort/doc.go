// Package cohort keeps a client's cohort hand-overs: a Mutex whose last
// hold is released while another goroutine of the same client waits for it
// is handed to that waiter instead of being freed, announced to every client and raced for. The lock is never
// free in between, so to every other client, Redisson included, it just
// has a holder.
//
// Most handoffs are made in memory, with no round trip: the Redis owner
// field stays as it is (one field for several local holders in turn, each
// with a hold of its own here), the watchdog goes on renewing it, and the
// new holder's hold keeps the lease's real deadline (when the script that
// last set it was sent). Exclusion is unchanged: Redis sees one owner, this
// Client, hold the lock throughout, and within the Client one hold lives
// at a time, the next granted only after the last one ended. A handoff
// that needs something only Redis can give is one script instead
// (lua/handoff.lua): a new fencing token (WithFencing), an acknowledgement
// by replicas (WithReplicaAck), a fresh fixed lease (WithLease), and the
// end of a run, which checks whether another client waits.
//
// A run of local handoffs is bounded, so that waiters in other clients get
// their turn: after Run handoffs in a row, or once Time has
// passed since the run's first, the lock is released for real, with its
// unlock message, if another client listens on its channel; this client's
// own waiters then hold back for Yield, so that a waiter of another
// client takes it.
//
// This package keeps the bookkeeping only: the waiters that can be handed a
// lock (Queue.Join, in arrival order, behind those that take no hand-over:
// Blocking), the pick of one (Claim), the outcome delivered to it (Settle,
// Handed), the runs per lock and the yields that end them (Yielding,
// ChanYielding, which the subscription consults before it wakes anyone). The
// owner sends the scripts and makes the holds. It imports only the lease
// and transport packages (a Stamp, a Call).
package cohort
