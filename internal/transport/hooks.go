package transport

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The hooks' seam (Options.Hooks): go-redis's redis.Hook shape, run around
// the engine's own calls as go-redis runs a client's hooks around its
// commands. ProcessHook runs around each attempt of a call alone (a
// *redis.Cmd of its command and arguments, as go-redis would send it:
// EVALSHA or EVAL; the innermost next is the engine's send, which sets the
// Cmd's result or error), ProcessPipelineHook around each attempt of a
// batch's calls to one node (those a hook leaves out of next are not
// written; the others are, together), DialHook around each dial (dial.go).
// A hook sees its caller's context values, never its end: the caller
// leaves when its context ends whatever the hook does, and a call not
// written by then is never written (a next called later sends nothing).
// What a hook makes of a call's result or error is the call's Reply; an
// error of its own is never sent again by the engine (one that reads as
// Redis's refusal, a redis.Error, is handled as that refusal).
//
// Hooks cost a goroutine per attempt; without hooks there is none of it.

// hookRun is one run of the hooks for a call or a batch: whether its
// caller left, whether an engine send is under way, and what each call's
// sends did.
type hookRun struct {
	mu       sync.Mutex
	left     bool
	finished bool
	inSend   bool
	sendDone chan struct{}
	wrote    []bool // by call: a send of it was written
	last     []*op  // by call: its last send's op
}

// settle returns call x's op o once its send ended with st: told why when
// its caller left before it was written, or, when the caller left after,
// the op its outcome comes with (by got), kept as the call's last.
func (h *hookRun) settle(ctx context.Context, x int, o *op, st int, got chan *op) *op {
	switch st {
	case rtDropped:
		o.err = notSent(context.Cause(ctx), "its caller left before it was written")
	case rtGone:
		o = <-got
		h.mu.Lock()
		h.last[x] = o
		h.mu.Unlock()
	}
	return o
}

// leave is the caller leaving (its context ended) while the hooks run for
// its call j, whose proxy op is p: rtDone when the run finished meanwhile
// (p's outcome is set), rtGone when a send of the call was written (the
// run's end hands its outcome on), rtDropped when none was (none will be).
func (h *hookRun) leave(p *op, j int) int {
	h.mu.Lock()
	if h.finished && !h.left {
		h.mu.Unlock()
		<-p.done // the run's end finished p
		return rtDone
	}
	// (Finished after the caller left another call of the run: its end
	// handed the outcomes on, as for this one.)
	h.left = true
	for h.inSend {
		ch := h.sendDone
		h.mu.Unlock()
		<-ch // the engine's send sees the same context end: at once
		h.mu.Lock()
	}
	w := h.wrote[j]
	h.mu.Unlock()
	if w {
		return rtGone
	}
	return rtDropped
}

// begin starts an engine send, or reports that the caller left (then
// nothing is sent).
func (h *hookRun) begin() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.left {
		return false
	}
	h.inSend = true
	h.sendDone = make(chan struct{})
	return true
}

// end ends an engine send, ops having been sent for the calls at js, with
// the outcomes sts (rtDone: the op's outcome is set; rtGone: it was
// written, its caller left).
func (h *hookRun) end(js []int, ops []*op, sts []int) {
	h.mu.Lock()
	for i, j := range js {
		o := ops[i]
		if sts[i] == rtGone || sts[i] == rtDone && o.written {
			h.wrote[j] = true
		}
		if sts[i] != rtGone {
			// (One whose caller left is the call's last once its
			// outcome came: settle. Until then its reader writes it,
			// while a hook that returned without waiting for its next
			// may already be reading the run's last.)
			h.last[j] = o
		}
	}
	h.inSend = false
	close(h.sendDone)
	h.mu.Unlock()
}

// finish ends the run: it reports whether the caller left.
func (h *hookRun) finish() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finished = true
	return h.left
}

// proxyOp returns the op a caller waits on while the hooks run for call j.
func proxyOp(h *hookRun, j int) *op {
	p := newOp()
	p.done = make(chan struct{}, 1)
	p.state.Store(opPending)
	p.leaveFn = func() int { return h.leave(p, j) }
	return p
}

// attemptHooked is attempt through the hooks' ProcessHook.
func (t *Transport) attemptHooked(ctx context.Context, n *node, s *sendState, late func(Reply)) (*op, int) {
	h := &hookRun{wrote: make([]bool, 1), last: make([]*op, 1)}
	p := proxyOp(h, 0)
	hctx := context.WithoutCancel(ctx)
	cmd := redis.NewCmd(hctx, cmdArgs(s.k, s.eval, t.opt.publish())...)
	final := func(_ context.Context, c redis.Cmder) error {
		if !h.begin() {
			err := notSent(context.Cause(ctx), "its caller left before it was written")
			c.SetErr(err)
			return err
		}
		got := make(chan *op, 1)
		o, st := t.send(ctx, n, s, func(o *op) { got <- o })
		h.end([]int{0}, []*op{o}, []int{st})
		fillCmd(c, h.settle(ctx, 0, o, st, got))
		return c.Err()
	}
	process := final
	for i := len(t.opt.Hooks) - 1; i >= 0; i-- {
		if w := t.opt.Hooks[i].ProcessHook(process); w != nil {
			process = w
		}
	}
	t.workers.Add(1)
	t.active.Add(1)
	go func() {
		defer t.workers.Add(-1)
		defer t.active.Add(-1)
		_ = process(hctx, cmd)
		h.mu.Lock()
		last := h.last[0]
		h.mu.Unlock()
		outcome(p, cmd, last)
		if !h.finish() {
			p.finish()
			return
		}
		if h.wrote[0] {
			t.afterGone(s, p, late)
		}
	}()
	return p, await(ctx, p)
}

// sendBatchHooked is sendBatch through the hooks' ProcessPipelineHook,
// once for the calls to each node.
func (t *Transport) sendBatchHooked(ctx context.Context, ss []sendState, idx []int) []*op {
	ops, groups := t.group(ss, idx)
	for _, g := range groups {
		t.pipelineHooked(ctx, g, ss, idx, ops)
	}
	return ops
}

// pipelineHooked runs the hooks' ProcessPipelineHook for g's calls, in a
// goroutine: the caller waits on their proxy ops, set in ops.
func (t *Transport) pipelineHooked(ctx context.Context, g *batchGroup, ss []sendState, idx []int, ops []*op) {
	h := &hookRun{wrote: make([]bool, len(g.at)), last: make([]*op, len(g.at))}
	hctx := context.WithoutCancel(ctx)
	pub := t.opt.publish()
	cmds := make([]redis.Cmder, len(g.at))
	proxies := make([]*op, len(g.at))
	where := make(map[redis.Cmder]int, len(g.at))
	for x, j := range g.at {
		s := &ss[idx[j]]
		cmds[x] = redis.NewCmd(hctx, cmdArgs(s.k, s.eval, pub)...)
		where[cmds[x]] = x
		proxies[x] = proxyOp(h, x)
		ops[j] = proxies[x]
	}
	final := func(_ context.Context, sub []redis.Cmder) error {
		if !h.begin() {
			err := notSent(context.Cause(ctx), "its caller left before it was written")
			for _, c := range sub {
				c.SetErr(err)
			}
			return err
		}
		xs := make([]int, 0, len(sub))
		for _, c := range sub {
			if x, ok := where[c]; ok {
				xs = append(xs, x)
			}
		}
		got := make([]chan *op, len(xs))
		sent := make([]*op, len(xs))
		sg := &batchGroup{n: g.n, wait: g.wait}
		for _, x := range xs {
			sg.at = append(sg.at, g.at[x])
		}
		tmp := make([]*op, len(idx))
		t.sendGroup(ctx, sg, ss, idx, tmp, func(j int) *op {
			o := newOp()
			for y, x := range xs {
				if g.at[x] == j {
					got[y] = make(chan *op, 1)
					ch := got[y]
					o.gone = func(o *op) { ch <- o }
				}
			}
			return o
		})
		for y, x := range xs {
			sent[y] = tmp[g.at[x]]
		}
		sts := make([]int, len(xs))
		for y, o := range sent {
			sts[y] = rtDone
			if o.state.Load() != opDone {
				sts[y] = await(ctx, o)
			}
		}
		h.end(xs, sent, sts)
		var first error
		for y, x := range xs {
			fillCmd(cmds[x], h.settle(ctx, x, sent[y], sts[y], got[y]))
			if first == nil {
				first = cmds[x].Err()
			}
		}
		return first
	}
	process := final
	for i := len(t.opt.Hooks) - 1; i >= 0; i-- {
		if w := t.opt.Hooks[i].ProcessPipelineHook(process); w != nil {
			process = w
		}
	}
	t.workers.Add(1)
	t.active.Add(1)
	go func() {
		defer t.workers.Add(-1)
		defer t.active.Add(-1)
		_ = process(hctx, cmds)
		h.mu.Lock()
		last := append([]*op(nil), h.last...)
		h.mu.Unlock()
		for x, p := range proxies {
			outcome(p, cmds[x].(*redis.Cmd), last[x])
		}
		if !h.finish() {
			for _, p := range proxies {
				p.finish()
			}
			return
		}
		for x, p := range proxies {
			if h.wrote[x] {
				t.afterGone(&ss[idx[g.at[x]]], p, nil)
			}
		}
	}()
}

// fillCmd sets cmd's result from o's outcome, as go-redis would.
func fillCmd(cmd redis.Cmder, o *op) {
	c := cmd.(*redis.Cmd)
	switch {
	case o.err != nil:
		c.SetErr(o.err)
	case o.v.kind == kindErr:
		c.SetErr(RedisError(o.v.s))
	case o.v.kind == kindNil:
		c.SetErr(redis.Nil)
	default:
		c.SetErr(nil)
		c.SetVal(o.v.any())
	}
}

// outcome sets p's outcome from cmd, after the hooks ran (last: the op of
// the engine's last send, nil when none was made).
func outcome(p *op, cmd *redis.Cmd, last *op) {
	if last != nil {
		p.sent, p.pipe, p.written, p.answered = last.sent, last.pipe, last.written, last.answered
		p.acked, p.waitErr, p.again = last.acked, last.waitErr, last.again
	}
	err := cmd.Err()
	_, redisErr := err.(redis.Error)
	switch {
	case err == nil:
		p.v, p.err = fromAny(cmd.Val()), nil
	case errors.Is(err, redis.Nil):
		p.v, p.err = value{kind: kindNil}, nil
	case redisErr:
		// Redis's refusal, or one a hook made up: handled as Redis's.
		p.v, p.err = value{kind: kindErr, s: err.Error()}, nil
	default:
		p.err = err
		if last == nil || last.err != err {
			// The hooks' own error: not the engine's to send again.
			p.again, p.answered = false, false
		}
	}
}

// fromAny is the value of a go-redis result.
func fromAny(v any) value {
	switch v := v.(type) {
	case nil:
		return value{kind: kindNil}
	case int64:
		return value{kind: kindInt, n: v}
	case string:
		return value{kind: kindStr, s: v}
	case []any:
		ints := make([]int64, len(v))
		for i, e := range v {
			n, ok := e.(int64)
			if !ok {
				return value{kind: kindArr, arr: v}
			}
			ints[i] = n
		}
		return value{kind: kindInts, ints: ints}
	case error:
		return value{kind: kindErr, s: v.Error()}
	}
	return value{kind: kindStr, s: ""}
}
