package transport

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// The lane path (see the package documentation for which calls take it).
//
// Calls go to a lane: one per master (one in all on a single node or
// Sentinel), and on a lane the calls that are ready at the same moment go
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
// caller's give-back (late), to undo what the script took. A release
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
// user's hooks see every command; with WithReplicaAck on a Cluster, those
// are the masters' own clients, whose hooks (added through OnNewNode, as
// redisotel adds its own) see them, not hooks on the ClusterClient alone.

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
)

// op is a Call on its way: queued on a lane, in a pipeline, then
// delivered to its caller or, when the caller left, to late.
type op struct {
	Call
	ctx   context.Context // its caller's values, never its end (hooks see them); nil: none
	r     Reply
	done  chan struct{} // closed once r is set for the caller; nil: async
	state atomic.Uint32 // opWaiting, opDelivered or opGone
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

const (
	opWaiting uint32 = iota
	opDelivered
	opGone
)

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
	var wait time.Duration
	if l.key.wait {
		wait = wholeMs(l.t.opt.AckTimeout)
	}
	l.t.run(node, batch, wait, false)
}

// run sends ops as one pipeline on node: each after ASKING with asking
// (ops the slot's migrating master answered ASK), and WAIT (for at most
// wait) last when wait > 0. The scripts that answered NOSCRIPT are sent
// again as EVAL in a pipeline of their own, whose WAIT has what is left
// of wait, so that an attempt waits in WAIT once. Then each Reply is
// delivered, or its Call is sent on: a redirect met on a master's own
// connection is followed (MOVED: follow; ASK: ask), and a Reply that
// refuses the Call for now is waited out within the call's bound (retry).
func (t *Transport) run(node redis.UniversalClient, ops []*op, wait time.Duration, asking bool) {
	cmds, r := t.exec(node, ops, false, asking, wait)
	var again []*op
	var againAt []int
	for i, cmd := range cmds {
		if ops[i].Script != nil && lua.IsNoScript(cmd.Err()) {
			notRun(&ops[i].Call)
			again, againAt = append(again, ops[i]), append(againAt, i)
		}
	}
	var r2 Reply
	var cmds2 []*redis.Cmd
	if len(again) > 0 {
		// Redis lost its script cache (a restart, SCRIPT FLUSH).
		rest := wait
		if wait > 0 {
			rest = max(wait-time.Since(r.Sent), time.Millisecond)
		}
		cmds2, r2 = t.exec(node, again, true, asking, rest)
	}
	own := t.cc != nil && node != t.rdb // a master's own connection
	var moved []*op
	asks := map[string][]*op{}
	for i, o := range ops {
		rr, cmd := r, cmds[i]
		for j, at := range againAt {
			if at == i {
				rr, cmd = r2, cmds2[j]
			}
		}
		rr.Cmd = cmd
		o.r = rr
		err := cmd.Err()
		ask, addr, redirected := redirect(err)
		switch {
		case err == nil:
			o.deliver(rr)
		case own && redirected && o.redirects < maxRedirects:
			o.redirects++
			if ask {
				asks[addr] = append(asks[addr], o)
			} else {
				moved = append(moved, o)
			}
		case notNow(err) || redirected:
			// A redirect not followed here: go-redis's cluster pipeline
			// followed as many as it does, or this try followed its
			// own; the slot map is settling.
			t.retry(o)
		default:
			o.deliver(rr)
		}
	}
	if len(moved) > 0 {
		// The slot moved (a failover, a migration), and a master's own
		// connection never makes go-redis reload its map: reload it,
		// then send the calls once more, to their masters now.
		t.workers.Add(1)
		go t.follow(moved)
	}
	for addr, group := range asks {
		// The slot is migrating, and its master no longer has the keys:
		// the master it migrates to runs the calls, after ASKING, and
		// WAIT there answers for them, with what is left of wait.
		rest := wait
		if wait > 0 {
			rest = max(wait-time.Since(r.Sent), time.Millisecond)
		}
		t.workers.Add(1)
		go t.ask(addr, node, group, rest)
	}
}

// exec sends ops as one pipeline on node, as EVAL with eval, each after
// ASKING with asking, followed by WAIT for at most wait when wait > 0,
// and returns each op's command and the pipeline's Reply (time sent,
// WAIT's answer).
func (t *Transport) exec(node redis.UniversalClient, ops []*op, eval, asking bool, wait time.Duration) ([]*redis.Cmd, Reply) {
	// The pipeline carries its first call's context values (the user's
	// hooks see them: a span to join), never its end.
	ctx := ops[0].ctx
	if ctx == nil {
		ctx = context.Background()
	}
	pub := t.opt.publish()
	p := node.Pipeline()
	if t.cc != nil && node == t.rdb && len(ops) > 1 {
		// go-redis's cluster pipeline sends a node's whole batch again
		// when its first command answers TRYAGAIN (LOADING, ...), also
		// the commands of the batch it is already sending elsewhere
		// after an ASK: two goroutines then read replies into one
		// command (a data race), and a script may run twice. A one-key
		// command first, which a migrating slot never answers TRYAGAIN,
		// keeps it from doing so; the transport sends such calls again
		// itself (retry).
		p.Exists(ctx, ops[0].Keys[0])
	}
	cmds := make([]*redis.Cmd, len(ops))
	unknown := false // a script does not know its digest (FIPS 140-only mode)
	for i, o := range ops {
		args := o.Args
		copied := false
		for j, a := range o.Args {
			if _, ok := a.(publishArg); ok {
				if !copied {
					args, copied = slices.Clone(o.Args), true
				}
				args[j] = pub
			}
		}
		unknown = unknown || o.Script != nil && o.Script.Hash() == ""
		if asking {
			p.Do(ctx, "asking")
		}
		switch {
		case o.Script == nil:
			cmds[i] = p.Do(ctx, args...)
		case eval:
			cmds[i] = o.Script.PipeEval(ctx, p, o.Keys, args...)
		default:
			cmds[i] = o.Script.Pipe(ctx, p, o.Keys, args...)
		}
	}
	if unknown {
		t.learn(ops[0].Keys[0])
	}
	var w *redis.Cmd
	if wait > 0 {
		// Pipeliner has no Wait method: WAIT numreplicas timeout-ms.
		w = p.Do(ctx, "wait", t.opt.AckReplicas, wholeMs(wait).Milliseconds())
	}
	r := Reply{Sent: time.Now(), Pipe: t.pipes.Add(1), Acked: -1}
	_, _ = p.Exec(ctx) // errors are read per command
	if w != nil {
		r.Acked, r.WaitErr = w.Int64()
	}
	return cmds, r
}

// deliver hands o its reply: to its caller, or to late once the caller
// has gone.
func (o *op) deliver(r Reply) {
	o.r = r
	if o.state.CompareAndSwap(opWaiting, opDelivered) {
		close(o.done)
		return
	}
	if o.late != nil {
		if o.done == nil { // async: nobody waits, and then must not block
			o.late(r)
			return
		}
		go o.late(r)
	}
}

// maxRedirects bounds the MOVED and ASK replies one try of a Call follows.
const maxRedirects = 3

// redirect reads a MOVED or ASK reply: ask tells which, addr is where the
// slot (MOVED) or the key (ASK) is now.
func redirect(err error) (ask bool, addr string, ok bool) {
	if err == nil {
		return false, "", false
	}
	f := strings.Fields(err.Error()) // MOVED|ASK <slot> <addr>
	if len(f) != 3 || f[0] != "MOVED" && f[0] != "ASK" {
		return false, "", false
	}
	return f[0] == "ASK", f[2], true
}

// follow has the cluster client reload its slot map after ops met MOVED
// on a master's own connection, waits (at most slotReload) until the map
// sends each op's key where its Reply said, and sends ops again.
func (t *Transport) follow(ops []*op) {
	defer t.workers.Add(-1)
	ctx := context.Background()
	deadline := time.Now().Add(slotReload)
	for {
		t.cc.ReloadState(ctx)
		moved := true
		for _, o := range ops {
			_, addr, _ := redirect(o.r.Err())
			m, err := t.cc.MasterForKey(ctx, o.Keys[0])
			moved = moved && err == nil && m.Options().Addr == addr
		}
		if moved || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.submit(ops...)
}

// ask sends ops, which from (a master's own connection) answered ASK
// addr, to the master at addr, each after ASKING, and WAIT (for at most
// wait) after them on that same connection: the slot is migrating there,
// the slot map does not change until the migration ends, and meanwhile
// the keys from no longer has are served there, to a connection that
// says ASKING.
func (t *Transport) ask(addr string, from redis.UniversalClient, ops []*op, wait time.Duration) {
	defer t.workers.Add(-1)
	node := t.nodeAt(addr, from)
	if node == nil {
		for _, o := range ops {
			o.deliver(o.r)
		}
		return
	}
	t.run(node, ops, wait, true)
}

// nodeAt returns a client of the master at addr: the cluster client's own
// when it lists that master; otherwise (a master that serves no slot yet,
// receiving its first) one of the transport's, made with like's options
// (like is a master's client of the cluster client, nil when it is not one).
func (t *Transport) nodeAt(addr string, like redis.UniversalClient) *redis.Client {
	var mu sync.Mutex
	var found *redis.Client
	_ = t.cc.ForEachMaster(context.Background(), func(_ context.Context, c *redis.Client) error {
		if c.Options().Addr == addr {
			mu.Lock()
			found = c
			mu.Unlock()
		}
		return nil
	})
	if found != nil {
		return found
	}
	lc, ok := like.(*redis.Client)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.own[addr]
	if c == nil && t.own != nil { // nil once drained
		opt := *lc.Options()
		opt.Addr = addr
		c = redis.NewClient(&opt)
		t.own[addr] = c
	}
	return c
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

// slotReload bounds the wait for a reloaded slot map after MOVED.
const slotReload = time.Second
