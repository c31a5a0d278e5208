package redisync

import (
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/transport"
)

// WithReplicaAck makes every acquisition count only once at least k replicas
// of the lock's Redis node have it. After each first acquisition and each
// re-entry of every primitive (Mutex, FairMutex, RWMutex read and write,
// Semaphore, MultiLock), redisync sends WAIT k timeout on the same
// connection, in the same pipeline (one round trip) as the script; WAIT
// answers once k replicas have acknowledged every write that connection
// made, or when timeout has passed. If fewer than k acknowledged, the
// acquisition is undone in Redis (a first acquisition is released whole, a
// re-entry is taken back; the replicas' acknowledgement of that undo is not
// waited for) before the call returns an error wrapping ErrNotReplicated
// that names the lock; the hold's context is never handed out. (A call whose
// context ends during the undo returns then, and the undo still goes out; an
// undo that fails, Redis unreachable, leaves what it took to its lease. The
// error's text says which.) Each watchdog renewal batch is followed by WAIT
// the same way (one per node on a Cluster): a renewal that is not
// acknowledged counts as a failed renewal, so a holder whose writes stop
// reaching the replicas is told (its context is cancelled with ErrLeaseLost)
// before the lease of its last acknowledged renewal could run out.
//
// What it guarantees: when Lock (or any acquisition) returns a hold, k
// replicas had the lock at that moment, so a failover that promotes one of
// them keeps the lock with its holder. What it does not: WAIT is not
// consensus. Redis may still promote a replica that did not acknowledge (with
// k smaller than the number of replicas, or after the acknowledging replica
// failed too), and a replica can lose an acknowledged write in a restart
// without persistence; then the lock is lost as without this option. Use
// Sentinel (which promotes the most up-to-date replica it can reach) or
// Cluster failover with k equal to the number of replicas for the strongest
// form; where a lost lock must never let two holders act, make the protected
// resource check a fencing token as well.
//
// Cost and bounds: timeout bounds the extra latency of an acquisition
// attempt (on a healthy replica WAIT answers in about one round trip
// between the primary and the replica), also while other attempts on the
// same node wait in WAIT, up to eight pipelines at once per node and
// Client (beyond, an attempt waits for one of them). An attempt that finds
// the lock held sends WAIT too, and waits up to timeout when the
// connection's earlier writes are not yet acknowledged or fewer than k
// replicas are connected.
// Unlock, ForceUnlock, SetPermits and the other calls that are not
// acquisitions do not wait: a release that a failover loses is sent again
// by its Client once it sees the new primary (or, when that process is
// gone, its lease frees the lock), delaying the next holder but never
// admitting two. Waiting would add a WAIT of up to timeout to every
// Unlock, for what the resend repairs within a second.
// Keep timeout well below the lease. WAIT goes on a connection of
// redisync's own to the lock's primary, after the scripts it answers for,
// so that it holds up no other call (docs/engine.md); the redis client's
// ReadTimeout does not bound it. rdb must be a *redis.Client (single node
// or Sentinel failover) or a *redis.ClusterClient; New refuses other
// clients. k ≤ 0 or timeout ≤ 0 is refused too (ErrInvalid).
func WithReplicaAck(k int, timeout time.Duration) Option {
	return func(c *Client) error {
		switch {
		case k <= 0:
			return fmt.Errorf("%w: WithReplicaAck: %d replicas is not positive", ErrInvalid, k)
		case timeout <= 0:
			return fmt.Errorf("%w: WithReplicaAck: timeout %v is not positive", ErrInvalid, timeout)
		case timeout < time.Millisecond:
			return fmt.Errorf("%w: WithReplicaAck: timeout %v is below WAIT's resolution of 1ms", ErrInvalid, timeout)
		}
		c.ack = holds.Ack{K: k, Timeout: timeout}
		return nil
	}
}

// checkAck refuses a WithReplicaAck that cannot work on c's redis client.
func (c *Client) checkAck() error {
	if !c.ack.On() {
		return nil
	}
	if _, ok := transport.ReadTimeout(c.rdb); !ok {
		return fmt.Errorf("%w: WithReplicaAck needs a *redis.Client or *redis.ClusterClient (WAIT must go on the lock's node's connection), not %T", ErrInvalid, c.rdb)
	}
	return nil
}
