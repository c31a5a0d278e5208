package transport

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// One pipeline of a lane, or of a redirect: its scripts as EVALSHA, those
// that answered NOSCRIPT again as EVAL, WAIT last with WithReplicaAck, and
// each Reply delivered to its caller, or to its give-back once the caller
// has left, or its Call sent on (redirect.go, retry.go).

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
			refused(&ops[i].Call)
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
	pub := t.opt.publishValue()
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
		trackWrites(&o.Call, cmds[i], false)
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
	if o.state.CompareAndSwap(opSent, opDelivered) || o.state.CompareAndSwap(opWaiting, opDelivered) {
		close(o.done)
		return
	}
	if o.late != nil && o.state.Load() == opGone {
		if o.done == nil { // async: nobody waits, and then must not block
			o.late(r)
			return
		}
		go o.late(r)
	}
}
