package transport

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// The lane path (see the package documentation for which calls take it).
//
// Calls go to a lane: one per master (one in all on a single node or
// Sentinel; two per master with WithReplicaAck), and on a lane the calls that are ready at the same moment go
// out together, as one pipeline; a Call that finds a lane idle goes out at
// once, so batching never adds a wait to a lone call. While a pipeline is
// in flight, the calls that come wait for it and go out together in the
// next one. A lane has a second worker (a lane whose pipelines end with
// WAIT has up to eight), which sends them without waiting any longer once
// that pipeline has been out for laneStall, so one pipeline waiting on a
// slow Reply does not hold up the calls that come after it.
//
// Its callers wait for their Reply or for their context, whichever comes
// first, without a goroutine of their own: a caller whose context ends
// leaves, and the worker that reads the Reply later hands it to the
// caller's give-back (late), to undo what the script took; a call whose
// caller left before its pipeline went out is not sent (op.leave), and
// the queue sheds such calls as it grows (compactAt). A release
// waits at most Options.ReleaseTimeout, even on a silent link (see do).
//
// Each pipeline runs its scripts as EVALSHA and sends again as EVAL those
// that answered NOSCRIPT; with WithReplicaAck, the calls that take
// something go on the lock's master's own connection followed by one WAIT
// for the whole pipeline (the EVAL resend's WAIT has what is left of the
// timeout: an attempt waits in WAIT once). Without the option go-redis's
// cluster pipeline follows MOVED and ASK itself; on a master's own
// connection the transport does: a MOVED reloads the cluster client's slot
// map and sends the Call once more, to the new master; an ASK (the slot is
// being migrated and its master no longer has the key) sends ASKING and
// the Call, and WAIT after them, on the connection of the master the slot
// is migrating to. A Reply by which Redis refused the Call for now
// (TRYAGAIN: a script on keys of a migrating slot some of which are on
// the other side; CLUSTERDOWN; LOADING) has the Call sent again, after a
// pause, within the call's bound (see op.until). The publish
// command a script takes is read when it is sent (see publish), and each
// Reply carries when its pipeline was sent: the time a lease it set is
// counted from. Pipelines go through the redis client's Pipeline, so the
// user's hooks see every command: on a Cluster, the cluster client's
// pipelines run both its hooks and those of each node's client; with
// WithReplicaAck the calls that take something go on the masters' own
// clients, whose hooks (added through OnNewNode, as redisotel adds its
// own) see them, not hooks on the ClusterClient alone.

// Bounds of a lane: workers (pipelines in flight at once; more on a lane
// whose pipelines end with WAIT, each of which may be out for the whole
// WithReplicaAck timeout, which bounds the extra latency of every
// attempt), calls per pipeline, how long a pipeline is out before another
// one goes out beside it, and how long an idle worker stays.
const (
	laneWorkers     = 2
	laneWaitWorkers = 8
	laneBatch       = 2000
	laneStall       = 2 * time.Millisecond
	laneIdle        = 10 * time.Second
	laneCompact     = 4 * laneBatch
)

// op is a Call on its way: queued on a lane, in a pipeline, then
// delivered to its caller or, when the caller left, to late.
type op struct {
	Call
	ctx   context.Context // its caller's values, never its end (hooks see them); nil: none
	r     Reply
	done  chan struct{} // closed once r is set for the caller; nil: async
	state atomic.Uint32 // opWaiting, opSent, opDelivered, opGone or opDropped
	late  func(Reply)   // when the caller left: gives back what it took
	// until bounds the sending again of a Call that Redis refused for now
	// (notNow): the caller's deadline, at most Options.ReleaseTimeout after the
	// Call was made; tries counts those sends.
	until time.Time
	tries int
	// redirects counts the MOVED and ASK replies followed in this try.
	redirects int
	// answered: its send of the caller's own (sendAside) was counted
	// answered on its lane.
	answered atomic.Bool
}

// The states of an op: its caller waits for it, not sent yet (waiting)
// or sent (sent); its Reply was delivered to its caller (delivered); its
// caller left once it was sent, or nobody waits (an Async op): its Reply
// goes to late (gone); its caller left before it was sent: it is not
// sent, and late is not called (dropped).
const (
	opWaiting uint32 = iota
	opSent
	opDelivered
	opGone
	opDropped
)

// take marks o sent, when it is about to be written, and reports whether
// it is to be: not when its caller left before (dropped).
func (o *op) take() bool {
	return o.done == nil || o.state.CompareAndSwap(opWaiting, opSent) || o.state.Load() != opDropped
}

// waited reports whether o's caller still waits for it.
func (o *op) waited() bool {
	st := o.state.Load()
	return st == opWaiting || st == opSent
}

// leave is o's caller leaving as its context ends with err: the Reply it
// returns, or false when o's Reply was delivered meanwhile (then o.done
// is closed). A call not sent yet never is (dropped): its error wraps
// ErrNotSent, and late is not called.
func (o *op) leave(err error) (Reply, bool) {
	if o.state.CompareAndSwap(opWaiting, opDropped) {
		return Reply{err: notSent(err, "its caller left before it was sent"), Acked: -1}, true
	}
	if o.state.CompareAndSwap(opSent, opGone) {
		return Reply{err: err, Gone: true, Acked: -1}, true
	}
	return Reply{}, false
}

type laneKey struct {
	addr string // the master's address; "" off a Cluster
	wait bool   // its pipelines end with WAIT (WithReplicaAck)
}

// lane is where the calls to one node go, in pipelines.
type lane struct {
	t    *Transport
	key  laneKey
	mu   sync.Mutex
	node redis.UniversalClient // what its pipelines are made on
	// queue holds the calls not yet sent; workers and idle count the
	// lane's worker goroutines and those of them waiting for calls.
	queue   []*op
	workers int
	most    int // workers at most: laneWorkers, or laneWaitWorkers
	idle    int
	sending int       // pipelines in flight: workers' and callers' own
	sentAt  time.Time // when the latest of them was sent
	kick    chan struct{}
	// compactAt is the queue's length at which the ops dropped in it
	// (their callers left) are taken out: a Redis that answers nothing
	// does not make the queue grow with the calls of callers who left.
	compactAt int
}

// submit queues ops on their lanes: the ops of one lane together, in
// their order, so that calls sent together go out in as few pipelines as
// their lanes allow.
func (t *Transport) submit(ops ...*op) {
	if len(ops) == 1 {
		if l, err := t.lane(&ops[0].Call); err != nil {
			ops[0].deliver(Reply{err: err, Acked: -1})
		} else {
			l.queueOps(ops)
		}
		return
	}
	var order []*lane
	byLane := map[*lane][]*op{}
	for _, o := range ops {
		l, err := t.lane(&o.Call)
		if err != nil {
			o.deliver(Reply{err: err, Acked: -1})
			continue
		}
		if _, ok := byLane[l]; !ok {
			order = append(order, l)
		}
		byLane[l] = append(byLane[l], o)
	}
	for _, l := range order {
		l.queueOps(byLane[l])
	}
}

// lane returns the lane of k: its key's master on a Cluster, with WAIT
// when k takes something and WithReplicaAck is on.
func (t *Transport) lane(k *Call) (*lane, error) {
	key := laneKey{wait: t.opt.acks() && k.Takes}
	node := t.rdb
	if t.cc != nil {
		m, err := t.cc.MasterForKey(context.Background(), k.Keys[0])
		if err != nil {
			return nil, err
		}
		key.addr = m.Options().Addr
		if key.wait {
			node = m // WAIT answers for the writes of its own connection
		}
	}
	t.mu.Lock()
	l := t.lanes[key]
	if l == nil {
		most := laneWorkers
		if key.wait {
			most = laneWaitWorkers
		}
		l = &lane{t: t, key: key, node: node, most: most, kick: make(chan struct{}, most)}
		t.lanes[key] = l
	}
	t.mu.Unlock()
	if node != t.rdb {
		l.mu.Lock()
		l.node = node // the cluster client may have replaced the node's client
		l.mu.Unlock()
	}
	return l, nil
}

// queueOps queues ops on l and wakes or starts a worker for them.
func (l *lane) queueOps(ops []*op) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, ops...)
	if len(l.queue) >= l.compactAt {
		l.queue = slices.DeleteFunc(l.queue, func(o *op) bool { return o.state.Load() == opDropped })
		l.compactAt = max(2*len(l.queue), laneCompact)
	}
	switch {
	case l.idle > 0:
		select {
		case l.kick <- struct{}{}:
		default:
		}
	case l.workers < l.most:
		l.workers++
		l.t.workers.Add(1)
		go l.work()
	}
}

// sendDirect sends o from its caller's goroutine if l is idle (nothing
// queued, nothing in flight), reporting whether it did. o may be on its
// way again when it returns (a redirect, a Reply that said "not now").
func (l *lane) sendDirect(o *op) bool {
	node, ok := l.claim()
	if !ok {
		return false
	}
	l.sendClaimed(node, o)
	return true
}

// sendAside is sendDirect from a goroutine of its own, for a caller that
// may leave before the Reply (it waits for o.done, or leaves). The send
// is counted answered (see answered) by the caller once woken by the
// Reply, else by that goroutine once the send is done.
func (l *lane) sendAside(o *op) bool {
	node, ok := l.claim()
	if ok {
		go func() {
			l.send(node, []*op{o})
			l.answered(o)
		}()
	}
	return ok
}

// answered ends the count of o's own send on l (sendAside), once: the
// first of its caller and its sender to Call it. Calls that came
// meanwhile go out now.
func (l *lane) answered(o *op) {
	if o.answered.CompareAndSwap(false, true) {
		l.sent()
	}
}

// claim counts a send of a caller's own on l if l is idle (nothing queued,
// nothing in flight), reporting whether it was, and returns the node to
// send it on; sendClaimed sends it.
func (l *lane) claim() (redis.UniversalClient, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) > 0 || l.sending > 0 {
		return nil, false
	}
	l.sending++
	l.sentAt = time.Now()
	return l.node, true
}

// sendClaimed sends o, claimed on l, on node.
func (l *lane) sendClaimed(node redis.UniversalClient, o *op) {
	l.send(node, []*op{o})
	l.sent()
}

// sent ends the count of a caller's own send on l.
func (l *lane) sent() {
	l.mu.Lock()
	l.sending--
	if len(l.queue) > 0 {
		// Calls came meanwhile: the worker waiting for this send
		// sends them now.
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
}

// work is a worker of l: it sends what is queued, a pipeline at a time,
// until l has been idle for laneIdle or the client closes. While another
// pipeline is in flight, it waits until that one has been out for
// laneStall (see stall).
func (l *lane) work() {
	defer l.t.workers.Add(-1)
	idle := time.NewTimer(laneIdle)
	defer idle.Stop()
	closing := false
	for {
		l.mu.Lock()
		for {
			// Nothing queued: wait for calls, at most laneIdle. Calls
			// queued while a pipeline is in flight: wait for its stall.
			empty, d := len(l.queue) == 0, laneIdle
			if empty {
				l.idle++
			} else if d = l.stall(time.Now()); d == 0 || closing {
				break
			}
			l.mu.Unlock()
			idle.Reset(d)
			timedOut := false
			select {
			case <-l.kick:
			case <-idle.C:
				timedOut = true
			case <-l.t.closed:
				closing = true
			}
			l.mu.Lock()
			if empty {
				l.idle--
				if (timedOut || closing) && len(l.queue) == 0 {
					l.workers--
					l.mu.Unlock()
					return
				}
			}
		}
		n := min(len(l.queue), laneBatch)
		batch := l.queue[:n:n]
		l.queue = l.queue[n:]
		if len(l.queue) == 0 {
			l.queue = nil
		}
		node := l.node
		l.sending++
		l.sentAt = time.Now()
		l.mu.Unlock()
		l.send(node, batch)
		l.mu.Lock()
		l.sending--
		l.mu.Unlock()
	}
}

// stall returns how long l's calls wait before another pipeline may go
// out: 0 when none is in flight or the latest has been out for laneStall.
func (l *lane) stall(now time.Time) time.Duration {
	if l.sending == 0 {
		return 0
	}
	return max(0, laneStall-now.Sub(l.sentAt))
}

// send sends batch as one pipeline on node, with WAIT last on a wait
// lane, and hands on the replies (see run).
func (l *lane) send(node redis.UniversalClient, batch []*op) {
	// The calls whose callers left before they were sent are not sent
	// (batch is the lane's own: filtered in place).
	n := 0
	for _, o := range batch {
		if o.take() {
			batch[n] = o
			n++
		}
	}
	if n == 0 {
		return
	}
	batch = batch[:n]
	var wait time.Duration
	if l.key.wait {
		wait = wholeMs(l.t.opt.AckTimeout)
	}
	l.t.run(node, batch, wait, false)
}

// learn has the scripts learn their digests from the node that serves key,
// in the background (FIPS 140-only mode; see lua.Learn): until then they
// are sent whole.
func (t *Transport) learn(key string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.opt.ReleaseTimeout)
		defer cancel()
		node, ok := t.rdb.(*redis.Client)
		if t.cc != nil {
			m, err := t.cc.MasterForKey(ctx, key)
			node, ok = m, err == nil
		}
		if ok {
			lua.Learn(ctx, node)
		}
	}()
}
