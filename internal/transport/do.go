package transport

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// Do, DoAll and Async on the engine: a call goes to the node of its key's
// primary, each attempt on one connection, and what each attempt's reply
// says decides the next (retry.go). Calls of a batch to one node are
// written together.

// sendState is one call's way: how it is to be sent next, and its bounds.
type sendState struct {
	k         *Call
	eval      bool        // send the script whole (NOSCRIPT, or no digest)
	askAddr   string      // ASK: the node to send it to, after ASKING
	tries     int         // sends again after a pause
	again     int         // sends again after it was not written
	redirects int         // MOVED and ASK followed
	until     time.Time   // sends again after a refusal end before
	waitUntil time.Time   // WithReplicaAck: WAIT's timeout runs to then, once begun
	late      func(Reply) // its give-back, once its caller left (Do)
	first     *op         // the op its first attempt uses (Do's, allocated with it)
}

// reply returns o's outcome as a Reply.
func (s *sendState) reply(o *op) Reply {
	r := Reply{v: o.v, err: o.err, Sent: o.sent, Pipe: o.pipe, Acked: o.acked, WaitErr: o.waitErr, written: o.written, answered: o.answered}
	if r.err == nil {
		switch o.v.kind {
		case kindErr:
			r.err = RedisError(o.v.s)
		case kindNil:
			r.err = redis.Nil
		}
	}
	return r
}

// Do sends k and waits for its Reply or for ctx to end. When ctx ends
// after k was written, it returns a Reply whose error is ctx's (Gone set),
// and the Reply that comes later is handed to late (nil: nothing to give
// back), in a goroutine of its own; when ctx ends before k was written
// (queued behind other calls, waiting for a connection, or during the
// pause before a refused call is sent again; on a Cluster, while its slot
// map is read the first time), k is never written, and the Reply's error
// wraps ErrNotSent (see Reply.Gone). A Direct call whose ctx cannot end
// waits at most Options.ReleaseTimeout.
func (t *Transport) Do(ctx context.Context, k Call, late func(Reply)) Reply {
	t.calls.Add(1)
	defer t.calls.Add(-1)
	if k.Direct && ctx.Done() == nil {
		bound, cancel := context.WithTimeout(ctx, t.opt.ReleaseTimeout)
		defer cancel()
		ctx = bound
	}
	if err := t.awaitSlotMap(ctx, &k); err != nil {
		return Reply{err: err, Acked: -1}
	}
	if k.Script != nil && k.Script.Hash() == "" {
		t.learn(&k)
	}
	// The call's state, its Call and its first attempt's op in one
	// allocation.
	d := &doCall{k: k}
	s := &d.s
	*s = sendState{k: &d.k, until: t.retryBound(ctx), late: late, first: &d.o}
	for {
		n, err := t.route(s)
		if err != nil {
			return Reply{err: err, Acked: -1}
		}
		o, st := t.attempt(ctx, n, s, late)
		switch st {
		case rtDropped:
			return Reply{err: notSent(context.Cause(ctx), "its caller left before it was written"), Acked: -1}
		case rtGone:
			return Reply{err: ctxErr(ctx), Gone: true, Acked: -1, written: true}
		}
		switch t.next(s, o, n, false) {
		case stepDone:
			return s.reply(o)
		case stepPause:
			if err := t.pause(ctx, s, o); err != nil {
				return Reply{err: err, Acked: -1}
			}
		}
	}
}

// ctxErr returns ctx's error, or DeadlineExceeded when its deadline cut a
// read before its Done was closed.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// attempt sends s's call once on n: its op, with its outcome set (rtDone),
// or how its caller left (rtDropped, rtGone; its outcome then goes to
// t.afterGone, and on to late).
func (t *Transport) attempt(ctx context.Context, n *node, s *sendState, late func(Reply)) (*op, int) {
	if len(t.opt.Hooks) > 0 {
		return t.attemptHooked(ctx, n, s, late)
	}
	return t.send(ctx, n, s, nil)
}

// doCall is what one Do allocates: its Call, its state, and its first
// attempt's op.
type doCall struct {
	k Call
	s sendState
	o op
}

// onGone hands o's outcome, its caller gone, to afterGone with o's state
// and give-back (o.gone when send was given none).
func (t *Transport) onGone(o *op) { t.afterGone(o.ds, o, o.ds.late) }

// send is attempt without hooks, gone getting the op's outcome if its
// caller leaves after its write (nil: afterGone, then s.late).
func (t *Transport) send(ctx context.Context, n *node, s *sendState, gone func(*op)) (*op, int) {
	wait := t.opt.acks() && s.k.Takes
	if wait && s.waitUntil.IsZero() {
		s.waitUntil = time.Now().Add(t.opt.AckTimeout)
	}
	pub := t.opt.publish()
	for {
		var o *op
		if s.first != nil {
			o, s.first = s.first, nil
			o.acked = -1
		} else {
			o = newOp()
		}
		o.ds = s
		if o.gone = gone; gone == nil {
			o.gone = t.goneFn
		}
		if ctx.Err() != nil {
			return o, rtDropped // its caller left before it was written: never written
		}
		c, err := n.pick(ctx, wait)
		if err != nil {
			o.err, o.again = err, true
			return o, rtDone
		}
		if !wait && c.claim(o) {
			var err error
			c.wbuf, err = s.encode(c.wbuf[:0], o, pub)
			if err != nil {
				c.unclaim(o)
				o.err = notSent(err, "it cannot be encoded")
				return o, rtDone
			}
			if st := c.roundTrip(ctx, o); st != rtStale {
				return o, st
			}
			continue // nothing written: another connection
		}
		buf, err := s.encode(make([]byte, 0, encodeSize), o, pub)
		if err != nil {
			o.err = notSent(err, "it cannot be encoded")
			return o, rtDone
		}
		o.buf = buf
		var write, ok bool
		if wait {
			write, ok = c.enqueue([]*op{o, t.waitOp(s.waitTimeout(), o)})
		} else {
			write, ok = c.enqueue1(o)
		}
		if !ok {
			continue // it failed or was retired meanwhile: another one
		}
		if write {
			t.write(ctx, c)
		}
		return o, await(ctx, o)
	}
}

// write has the caller write what is queued on c (enqueue said so): itself
// when its context has a deadline (the write's) or cannot end, a writer
// goroutine otherwise.
func (t *Transport) write(ctx context.Context, c *conn) {
	dl, ok := ctx.Deadline()
	if ok || ctx.Done() == nil {
		c.write(dl)
		return
	}
	t.workers.Add(1)
	go c.writeLoop()
}

// await waits for o's outcome, or for ctx to end: then the caller leaves
// (rtDropped: o is never written; rtGone: its outcome goes to o.gone).
func await(ctx context.Context, o *op) int {
	select {
	case <-o.done:
		return rtDone
	case <-ctx.Done():
		if o.leaveFn != nil {
			return o.leaveFn()
		}
		switch dropped, gone := o.leave(); {
		case dropped:
			return rtDropped
		case gone:
			return rtGone
		}
		<-o.done
		return rtDone
	}
}

// encode appends the command of s's call to b for o: after ASKING when
// it follows an ASK.
func (s *sendState) encode(b []byte, o *op, pub string) ([]byte, error) {
	if s.askAddr != "" {
		b = appendCommand(b, "asking")
		o.skip = 1
	}
	return appendCall(b, s.k, s.eval, pub)
}

// waitTimeout returns how long the WAIT after s's call waits: what is left
// of the WithReplicaAck timeout since its first attempt's WAIT, at least a
// millisecond (an attempt waits in WAIT once).
func (s *sendState) waitTimeout() time.Duration {
	return time.Until(s.waitUntil)
}

// waitOp returns the WAIT that follows members on their connection.
func (t *Transport) waitOp(d time.Duration, members ...*op) *op {
	g := &ackGroup{members: members}
	for _, m := range members {
		m.ack = g
	}
	w := &op{wait: true, ack: g, acked: -1} // d ≤ 0: what was left of the timeout is spent
	w.buf = appendCommand(nil, "wait", t.opt.AckReplicas, wholeMs(max(d, time.Millisecond)).Milliseconds())
	return w
}

// afterGone handles o's outcome once its caller left: a script Redis no
// longer had is sent again whole (a release that is not the last one must
// run, to be counted), in the background; then late gets the Reply.
func (t *Transport) afterGone(s *sendState, o *op, late func(Reply)) {
	t.workers.Add(1)
	defer t.workers.Add(-1)
	for t.next(s, o, nil, true) == stepAgain {
		n, err := t.route(s)
		if err != nil {
			break
		}
		ctx, cancel := background(time.Now().Add(t.opt.ReleaseTimeout))
		var st int
		o, st = t.sendGone(ctx, n, s)
		cancel()
		if st != rtDone {
			break
		}
	}
	if late != nil {
		late(s.reply(o))
	}
}

// sendGone sends s's call again for a caller who left, and waits for its
// outcome (with hooks, through them).
func (t *Transport) sendGone(ctx context.Context, n *node, s *sendState) (*op, int) {
	got := make(chan *op, 1)
	var o *op
	var st int
	if len(t.opt.Hooks) > 0 {
		o, st = t.attemptHooked(ctx, n, s, nil)
	} else {
		o, st = t.send(ctx, n, s, func(o *op) { got <- o })
	}
	if st == rtGone {
		return <-got, rtDone
	}
	return o, st
}

// DoAll sends calls and waits for all their replies, or for ctx to end (the
// replies still missing then carry ctx's error; those written go on, and a
// script Redis no longer had is sent again whole). Calls to one node are
// written together, in order.
func (t *Transport) DoAll(ctx context.Context, calls []Call) []Reply {
	t.calls.Add(1)
	defer t.calls.Add(-1)
	return t.doAll(ctx, calls, t.retryBound(ctx))
}

// Async sends calls, in order, without waiting; then (nil: nothing) is
// called with each Reply, in a goroutine of the transport's: it must not
// block for long. Their replies are waited for as long as their
// connections last; a refused call is sent again within
// Options.ReleaseTimeout.
func (t *Transport) Async(then func(Call, Reply), calls ...Call) {
	if len(calls) == 0 {
		return
	}
	t.workers.Add(1)
	t.active.Add(1)
	go func() {
		defer t.workers.Add(-1)
		defer t.active.Add(-1)
		rs := t.doAll(context.Background(), calls, time.Now().Add(t.opt.ReleaseTimeout))
		if then != nil {
			for i, r := range rs {
				then(calls[i], r)
			}
		}
	}()
}

// learn has the scripts learn their digests from the primary that serves
// k's key, in the background (FIPS 140-only mode; see lua.Learn): until
// then they are sent whole. lua.Learn runs one attempt at a time, and
// none for a second after one failed.
func (t *Transport) learn(k *Call) {
	t.workers.Add(1)
	go func() {
		defer t.workers.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), t.opt.ReleaseTimeout)
		defer cancel()
		node, ok := t.rdb.(*redis.Client)
		if t.cc != nil && len(k.Keys) > 0 {
			m, err := t.cc.MasterForKey(ctx, k.Keys[0])
			node, ok = m, err == nil
		}
		if ok {
			lua.Learn(ctx, node)
		}
	}()
}
