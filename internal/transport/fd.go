package transport

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// The full-duplex path. A call sent alone (Do) goes on go-redis's
// full-duplex auto-pipeline: one connection per node, held by a writer and
// a reader goroutine, on which a command is written as soon as it comes,
// while others are in flight (never held behind another call's reply), the
// calls that came while a write was under way are written together, and
// one wakeup of the reader delivers every reply it read. The user's
// hooks run for each command (as process hooks), with the caller's
// context values. Redis runs the replies' commands in order on that
// connection, so two calls of one Client never overtake each other there.
// On a Cluster, go-redis keeps one such connection per master, on the
// master's own client, whose hooks run (not the ClusterClient's: a hook
// meant to see every command goes on each node, through OnNewNode, as
// redisotel adds its own); a command whose reply is MOVED, ASK or refuses
// it for now (TRYAGAIN, CLUSTERDOWN, LOADING) is run again through the
// cluster client, which follows it, off the connection's reader.
//
// What stays on the pipelined lanes (lane.go): the calls that wait for
// replicas (WAIT answers for its own connection's writes), and the calls
// sent in batches (DoAll, Async: renewals, give-backs, a MultiLock's
// slots), which would hold the one connection up for everyone behind
// them: measured on a 3-master Cluster on loopback, 10,000 renewals took
// as long in the cluster client's pipelines as on the full-duplex
// connections (130-290 ms, the same Redis CPU), but a lone call sent
// meanwhile waited 1-6 ms beside the pipelines, and 15-24 ms (in two runs
// of three) behind the batch on its master's connection.
//
// A call never waits for room in go-redis's queue: its context would not
// end that wait (go-redis's hooks must see the caller's values, never its
// end), so the calls whose callers left are bounded instead, well below
// that queue's size (left.go), and a call waits for room there, with its
// context, and leaves unsent when it ends.

// fd returns the redis client's full-duplex auto-pipeliner, made on first
// use (go-redis keeps one per client, for all its users, closed with the
// client); nil when the redis client cannot make one.
func (t *Transport) fd() *redis.AutoPipeliner {
	t.fdOnce.Do(func() {
		// On a Cluster, go-redis runs one full-duplex child per master,
		// on that master's own client (its hooks run, the ClusterClient's
		// do not: see the package documentation), routes each command by
		// its slot when it is submitted, and has a MOVED or ASK reply, or
		// one that refused the command for now, run again through the
		// cluster client, which follows it.
		type fullDuplex interface {
			AsyncAutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
		}
		a, ok := t.rdb.(fullDuplex)
		if !ok {
			return
		}
		ap, err := a.AsyncAutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
		if err != nil {
			t.opt.Log.Warn("redisync: no full-duplex auto-pipeline; calls go in pipelines", "error", err)
			return
		}
		// go-redis's queue holds its window, and as many are in flight
		// before it: the calls whose callers left are kept well below
		// (on a Cluster, each master's: see leftOf).
		t.left.max = fdMaxLeft
		if w := ap.Config().FullDuplexWindow; w > 0 && w < fdMaxLeft {
			t.left.max = int32(w)
		}
		t.ap = ap
	})
	return t.ap
}

// fdCall is a call on the full-duplex path: its command on its way, and
// what it needs to be sent again (NOSCRIPT, a reply that refused it for
// now).
type fdCall struct {
	t     *Transport
	k     Call
	ctx   context.Context // the command's: the caller's values, never its end
	sent  time.Time
	cmd   *redis.Cmd
	f     redis.AutoFuture
	until time.Time // see op.until
	tries int
	// gone: its caller left; a reply that refuses it is not sent again
	// but handed to late (nothing ran).
	gone bool
	// refused: the call stands refused (a reply that said "not now"),
	// not in flight: its caller left during the pause before its next
	// send, so it is not sent again.
	refused bool
}

// submit writes c's command (EVAL with eval, or while the script does not
// know its digest, EVALSHA otherwise).
func (c *fdCall) submit(eval bool) {
	k := c.k
	n := 1
	if k.Script != nil {
		n = 3 + len(k.Keys)
	}
	args := make([]any, 0, n+len(k.Args))
	if k.Script != nil {
		switch sha := k.Script.Hash(); {
		case eval || sha == "":
			if sha == "" {
				c.t.learn(k.Keys[0])
			}
			args = append(args, "eval", k.Script.Source())
		default:
			args = append(args, "evalsha", sha)
		}
		args = append(args, len(k.Keys))
		for _, key := range k.Keys {
			args = append(args, key)
		}
	}
	for _, a := range k.Args {
		if _, ok := a.(publishArg); ok {
			a = c.t.opt.publishValue()
		}
		args = append(args, a)
	}
	c.sent = time.Now()
	c.cmd = redis.NewCmd(c.ctx, args...)
	trackWrites(&k, c.cmd, true)
	c.f = c.t.ap.Submit(c.ctx, c.cmd)
}

// step waits for c's reply as long as wctx lasts (its error when it ends
// first) and reports whether c is done: a reply that answered NOSCRIPT has
// it sent again whole, and one that refused the call for now within its
// bound, unless its caller has gone, after a pause, which ends with wctx
// (then c stands refused).
func (c *fdCall) step(wctx context.Context) (bool, error) {
	if err := c.f.WaitContext(wctx); err != nil && wctx.Err() != nil && errors.Is(err, wctx.Err()) {
		return false, err
	}
	err := c.cmd.Err()
	switch {
	case c.k.Script != nil && lua.IsNoScript(err):
		// Sent whole at once, its caller gone or not (as on the lanes):
		// a release that is not the last one must run, to be counted.
		refused(&c.k)
		c.submit(true)
		return false, nil
	case c.gone || c.k.Once || !(notNow(err) || isRedirect(err)):
		// Its caller gone, a refusal goes to late as it is: nothing ran.
		return true, nil
	}
	pause := min(notNowPause<<min(c.tries, 8), notNowMaxPause)
	if !time.Now().Add(pause).Before(c.until) {
		return true, nil
	}
	c.tries++
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wctx.Done():
		// The caller leaves at once, and the call, refused, is not
		// sent again: nothing ran, nothing to give back.
		c.refused = true
		return false, wctx.Err()
	}
	refused(&c.k)
	c.submit(false)
	return false, nil
}

func (c *fdCall) reply() Reply { return Reply{Cmd: c.cmd, Sent: c.sent, Acked: -1} }

// isRedirect reports a MOVED or ASK go-redis did not follow (it ran out
// of redirects): the call is sent again, as for a reply refusing it for
// now.
func isRedirect(err error) bool {
	_, _, ok := redirect(err)
	return ok
}

// doFD is Do on the full-duplex path.
func (t *Transport) doFD(ctx context.Context, k Call, late func(Reply)) Reply {
	wctx := ctx
	if ctx.Done() == nil && k.Direct {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, t.opt.ReleaseTimeout)
		defer cancel()
	}
	lf := t.leftOf(&k)
	if lf.full() {
		if err := lf.admit(wctx); err != nil {
			return Reply{err: err, Acked: -1}
		}
	}
	c := &fdCall{t: t, k: k, ctx: context.WithoutCancel(ctx), until: t.retryBound(ctx)}
	c.submit(false)
	for {
		done, err := c.step(wctx)
		if done {
			return c.reply()
		}
		if err != nil && c.refused {
			return Reply{err: notSent(err, "refused by Redis, not sent again"), Acked: -1}
		}
		if err != nil {
			// The caller leaves; the call goes on, and its reply goes
			// to late, to give back what it took. It counts among the
			// calls whose callers left (see fdLeft) until its reply.
			c.gone = true
			lf.add(1)
			t.workers.Add(1)
			go func() {
				defer t.workers.Add(-1)
				for done, _ := c.step(context.Background()); !done; done, _ = c.step(context.Background()) {
				}
				lf.add(-1)
				if late != nil {
					late(c.reply())
				}
			}()
			return Reply{err: err, Gone: true, Acked: -1}
		}
	}
}

// leftOf returns the count of the calls whose callers left that k counts
// among: the Transport's; on a Cluster, that of k's master (go-redis has a
// queue for each), so that a master that stopped answering leaves the
// calls to the others alone.
func (t *Transport) leftOf(k *Call) *left {
	if t.cc == nil {
		return &t.left
	}
	m, err := t.cc.MasterForKey(context.Background(), k.Keys[0])
	if err != nil {
		return &t.left
	}
	addr := m.Options().Addr
	if l, ok := t.lefts.Load(addr); ok {
		return l.(*left)
	}
	l, _ := t.lefts.LoadOrStore(addr, &left{max: t.left.max})
	return l.(*left)
}
