package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// WithReplicaAck makes every acquisition count only once at least k
// replicas of the lock's Redis node have it. After each first acquisition
// and each re-entry of every primitive (Mutex, FairMutex, RWMutex read and
// write, Semaphore), redisync sends WAIT k timeout on the same connection,
// in the same pipeline (one round trip) as the script; WAIT answers once k
// replicas have acknowledged every write that connection made, or when
// timeout has passed. If fewer than k acknowledged, the acquisition is
// undone in Redis (a first acquisition is released whole, a re-entry is
// taken back; that release itself is not waited for) before the call
// returns an error wrapping ErrNotReplicated that names the lock; the hold's
// context is never handed out. Each watchdog renewal batch is followed by
// WAIT the same way (one per node on a Cluster): a renewal that is not
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
// between the primary and the replica). An attempt that finds the lock held
// sends WAIT too, and waits up to timeout when the connection's earlier
// writes are not yet acknowledged or fewer than k replicas are connected.
// Unlock, ForceUnlock, SetPermits and the other calls that are not
// acquisitions do not wait: a release that a failover loses leaves a lock
// that its lease frees, delaying the next holder but never admitting two.
// Keep timeout well below the lease, and below the redis client's
// ReadTimeout (go-redis reads a pipeline's replies under ReadTimeout, WAIT
// included): New refuses a timeout that is not. rdb must be a
// *redis.Client (single node or Sentinel failover) or a *redis.ClusterClient,
// so that WAIT goes on the connection of the lock's node; New refuses other
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
		c.ack = replicaAck{k: k, timeout: timeout}
		return nil
	}
}

// replicaAck is WithReplicaAck's setting; k == 0 means off.
type replicaAck struct {
	k       int
	timeout time.Duration
}

// on reports whether acquisitions wait for replicas.
func (a replicaAck) on() bool { return a.k > 0 }

// checkAck refuses a WithReplicaAck that cannot work on c's redis client.
func (c *Client) checkAck() error {
	if !c.ack.on() {
		return nil
	}
	var read time.Duration
	switch r := c.rdb.(type) {
	case *redis.Client:
		read = r.Options().ReadTimeout
	case *redis.ClusterClient:
		read = r.Options().ReadTimeout
	default:
		return fmt.Errorf("%w: WithReplicaAck needs a *redis.Client or *redis.ClusterClient (WAIT must go on the lock's node's connection), not %T", ErrInvalid, c.rdb)
	}
	if read > 0 && c.ack.timeout >= read {
		return fmt.Errorf("%w: WithReplicaAck: timeout %v is not below the redis client's ReadTimeout %v", ErrInvalid, c.ack.timeout, read)
	}
	return nil
}

// node returns the client whose pipelines reach the master serving key on
// one connection: on a Cluster the master's own client, otherwise rdb
// itself (a *redis.Client pipelines on one connection).
func (c *Client) node(ctx context.Context, key string) (redis.UniversalClient, error) {
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return c.rdb, nil
}

// pipe sends what queue queues and then WAIT, in one pipeline on node's
// one connection, and returns WAIT's reply: how many replicas acknowledged
// every write of that connection.
func (a replicaAck) pipe(ctx context.Context, node redis.UniversalClient, queue func(redis.Pipeliner)) (int64, error) {
	p := node.Pipeline()
	queue(p)
	// Pipeliner has no Wait method: WAIT numreplicas timeout-ms.
	w := p.Do(ctx, "wait", a.k, wholeMs(a.timeout).Milliseconds())
	_, _ = p.Exec(ctx) // errors are read per command
	return w.Int64()
}

// runScript runs script, an acquisition or re-entry script, and returns its
// reply. The scripts answer [1, count, ...] when they took the lock or
// permits (count: the owner's holds after the script) and anything else
// when they did not.
//
// With WithReplicaAck, WAIT follows the script in one pipeline on the
// connection to the key's master (the script is resent whole after a
// NOSCRIPT). A reply that took something but that fewer than k replicas
// acknowledged is returned as a *notReplicatedError carrying it, for the
// caller to undo; WAIT's answer to a reply that took nothing is ignored.
func (c *Client) runScript(ctx context.Context, script *lua.Script, keys []string, args ...any) ([]int64, error) {
	if !c.ack.on() {
		return script.Run(ctx, c.rdb, keys, args...).Int64Slice()
	}
	node, err := c.node(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	var cmd *redis.Cmd
	acked, werr := c.ack.pipe(ctx, node, func(p redis.Pipeliner) { cmd = script.Pipe(ctx, p, keys, args...) })
	if moved := c.moved(ctx, keys[0], cmd.Err()); moved != nil {
		node = moved // the slot moved (a failover, a migration): once more, there
		acked, werr = c.ack.pipe(ctx, node, func(p redis.Pipeliner) { cmd = script.Pipe(ctx, p, keys, args...) })
	}
	if lua.IsNoScript(cmd.Err()) {
		acked, werr = c.ack.pipe(ctx, node, func(p redis.Pipeliner) { cmd = script.PipeEval(ctx, p, keys, args...) })
	}
	r, err := cmd.Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(r) >= 2 && r[0] == 1 && (werr != nil || acked < int64(c.ack.k)) {
		return nil, &notReplicatedError{reply: r, acked: acked, ack: c.ack, err: werr}
	}
	return r, nil
}

// notReplicatedError reports an acquisition or re-entry that fewer than k
// replicas acknowledged within the timeout. reply is the script's.
type notReplicatedError struct {
	reply []int64
	acked int64
	ack   replicaAck
	err   error // WAIT's own error, if it failed
}

func (e *notReplicatedError) Error() string {
	undone := "" // a renewal's
	if e.reply != nil {
		undone = "; the acquisition was undone"
	}
	if e.err != nil {
		return fmt.Sprintf("redisync: not replicated: WAIT failed (%v)%s", e.err, undone)
	}
	return fmt.Sprintf("redisync: not replicated: %d of %d replicas acknowledged within %v%s",
		e.acked, e.ack.k, e.ack.timeout, undone)
}

func (e *notReplicatedError) Unwrap() []error {
	if e.err != nil {
		return []error{ErrNotReplicated, e.err}
	}
	return []error{ErrNotReplicated}
}

// count is the owner's hold count after the script that was not
// acknowledged: what undoing a re-entry takes back from.
func (e *notReplicatedError) count() int { return int(e.reply[1]) }

// notReplicated returns err's *notReplicatedError, or nil.
func notReplicated(err error) *notReplicatedError {
	var nr *notReplicatedError
	if errors.As(err, &nr) {
		return nr
	}
	return nil
}

// renewAcked pipelines the renewal of hs followed by WAIT, on each master's
// connection (one pipeline per node on a Cluster, sent concurrently), as
// EVALSHA or, with eval, as EVAL. It returns each renewal's command and,
// per hold, nil when its node's WAIT met k, else why not.
func (w *watchdog) renewAcked(ctx context.Context, hs []*hold, eval, resent bool) ([]*redis.Cmd, []error) {
	c := w.c
	cmds := make([]*redis.Cmd, len(hs))
	nacks := make([]error, len(hs))
	groups := map[redis.UniversalClient][]int{}
	var order []redis.UniversalClient
	for i, h := range hs {
		node, err := c.node(ctx, h.renew.keys[0])
		if err != nil {
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(err)
			continue
		}
		if _, ok := groups[node]; !ok {
			order = append(order, node)
		}
		groups[node] = append(groups[node], i)
	}
	send := func(node redis.UniversalClient) {
		idx := groups[node]
		acked, werr := c.ack.pipe(ctx, node, func(p redis.Pipeliner) {
			for _, i := range idx {
				cmds[i] = hs[i].renew.pipe(ctx, p, eval)
			}
		})
		if werr == nil && acked < int64(c.ack.k) {
			werr = &notReplicatedError{acked: acked, ack: c.ack}
		}
		if werr != nil {
			for _, i := range idx {
				nacks[i] = werr
			}
		}
	}
	if len(order) == 1 {
		send(order[0])
	} else {
		var wg sync.WaitGroup
		for _, node := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(node)
			}()
		}
		wg.Wait()
	}
	// A slot that moved (a failover, a migration): the renewals that met
	// MOVED are sent once more, once the slot map has followed.
	var again []int
	for i, cmd := range cmds {
		if cmd != nil && cmd.Err() != nil && isMoved(cmd.Err()) {
			again = append(again, i)
		}
	}
	if len(again) == 0 || resent {
		return cmds, nacks
	}
	c.reloadSlots(ctx, hs[again[0]].renew.keys[0], cmds[again[0]].Err())
	sub := make([]*hold, len(again))
	for j, i := range again {
		sub[j] = hs[i]
	}
	cmds2, nacks2 := w.renewAcked(ctx, sub, eval, true)
	for j, i := range again {
		cmds[i], nacks[i] = cmds2[j], nacks2[j]
	}
	return cmds, nacks
}

// moved returns, when err is a MOVED or ASK reply to a command on key sent
// to a master's connection directly, the master that serves key once the
// cluster client's slot map has followed the move; nil otherwise.
func (c *Client) moved(ctx context.Context, key string, err error) redis.UniversalClient {
	if err == nil || !isMoved(err) || !c.reloadSlots(ctx, key, err) {
		return nil
	}
	node, nerr := c.node(ctx, key)
	if nerr != nil {
		return nil
	}
	return node
}

// reloadSlots has the cluster client reload its slot map after err, a
// MOVED or ASK reply about key, and waits (at most slotReload) until the
// map names the node the reply names; it reports whether it does. A
// command sent to a node's own connection never makes go-redis reload it.
func (c *Client) reloadSlots(ctx context.Context, key string, err error) bool {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		return false
	}
	f := strings.Fields(err.Error()) // MOVED <slot> <addr>
	if len(f) < 3 {
		return false
	}
	deadline := time.Now().Add(slotReload)
	for {
		cc.ReloadState(ctx)
		if node, err := cc.MasterForKey(ctx, key); err == nil && node.Options().Addr == f[2] {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slotReload bounds the wait for a reloaded slot map after MOVED.
const slotReload = time.Second
