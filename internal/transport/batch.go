package transport

import (
	"context"
	"slices"
	"time"
)

// Batches (DoAll, Async): the calls to one node's connection are written
// together, in their order, after which each reply decides its call's
// next step as a lone call's does (retry.go); the calls sent again go
// together again, after one pause for those Redis refused for now.

// doAll is DoAll with until bounding the sending again of refused calls.
func (t *Transport) doAll(ctx context.Context, calls []Call, until time.Time) []Reply {
	rs := make([]Reply, len(calls))
	if len(calls) == 0 {
		return rs
	}
	if err := t.awaitSlotMap(ctx, &calls[0]); err != nil {
		for i := range rs {
			rs[i] = Reply{err: err, Acked: -1}
		}
		return rs
	}
	ss := make([]sendState, len(calls))
	for i := range calls {
		ss[i] = sendState{k: &calls[i], until: until}
	}
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		ops := t.sendBatch(ctx, ss, todo)
		var again, paused []int
		last := map[int]*op{}
		for j, i := range todo {
			o := ops[j]
			st := rtDone
			if o.state.Load() != opDone {
				st = await(ctx, o)
			}
			switch st {
			case rtDropped:
				rs[i] = Reply{err: notSent(context.Cause(ctx), "its caller left before it was written"), Acked: -1}
				continue
			case rtGone:
				rs[i] = Reply{err: ctxErr(ctx), Gone: true, Acked: -1, written: true}
				continue
			}
			switch t.next(&ss[i], o, nil, false) {
			case stepDone:
				rs[i] = ss[i].reply(o)
			case stepAgain:
				again = append(again, i)
			case stepPause:
				paused = append(paused, i)
				last[i] = o
			}
		}
		if len(paused) > 0 {
			if err := t.pause(ctx, &ss[paused[0]], last[paused[0]]); err != nil {
				for _, i := range paused {
					rs[i] = Reply{err: err, Acked: -1}
				}
				paused = nil
			} else {
				for _, i := range paused[1:] {
					ss[i].tries++
				}
			}
		}
		todo = append(again, paused...)
		slices.Sort(todo)
	}
	return rs
}

// batchGroup is the calls of a batch to one node's connection.
type batchGroup struct {
	n    *node
	wait bool
	at   []int // indices in idx
}

// sendBatch sends the calls ss[i] for i in idx, those to one node's
// connection together (with WithReplicaAck, the calls that take something
// on a connection of their own, followed by one WAIT), and returns their
// ops, in idx's order: an op that could not be sent has its outcome set.
func (t *Transport) sendBatch(ctx context.Context, ss []sendState, idx []int) []*op {
	if len(t.opt.Hooks) > 0 {
		return t.sendBatchHooked(ctx, ss, idx)
	}
	ops, groups := t.group(ss, idx)
	for _, g := range groups {
		t.sendGroup(ctx, g, ss, idx, ops, nil)
	}
	return ops
}

// group routes the calls ss[i] for i in idx to their nodes, and returns
// them grouped by node (and, with WithReplicaAck, by whether WAIT follows
// them), with ops set for the calls that could not be routed.
func (t *Transport) group(ss []sendState, idx []int) ([]*op, []*batchGroup) {
	ops := make([]*op, len(idx))
	var groups []*batchGroup
	for j, i := range idx {
		s := &ss[i]
		n, err := t.route(s)
		if err != nil {
			ops[j] = failedOp(err)
			continue
		}
		wait := t.opt.acks() && s.k.Takes
		var g *batchGroup
		for _, x := range groups {
			if x.n == n && x.wait == wait {
				g = x
				break
			}
		}
		if g == nil {
			g = &batchGroup{n: n, wait: wait}
			groups = append(groups, g)
		}
		g.at = append(g.at, j)
	}
	return ops, groups
}

// sendGroup writes the calls of g together on one connection of g's
// node, each op made by mk (nil: newOp), set in ops.
func (t *Transport) sendGroup(ctx context.Context, g *batchGroup, ss []sendState, idx []int, ops []*op, mk func(j int) *op) {
	pub := t.opt.publish()
	for {
		c, err := g.n.pick(ctx, g.wait)
		if err != nil {
			for _, j := range g.at {
				o := mkOp(mk, j)
				o.err, o.again = err, true
				o.state.Store(opDone)
				ops[j] = o
			}
			return
		}
		batch := make([]*op, 0, len(g.at)+1)
		var members []*op
		var waitUntil time.Time
		for _, j := range g.at {
			s := &ss[idx[j]]
			o := mkOp(mk, j)
			if o.gone == nil {
				o.gone = func(o *op) { t.afterGone(s, o, nil) }
			}
			buf, err := s.encode(make([]byte, 0, encodeSize), o, pub)
			if err != nil {
				o.err = notSent(err, "it cannot be encoded")
				o.state.Store(opDone)
				ops[j] = o
				continue
			}
			o.buf = buf
			ops[j] = o
			batch = append(batch, o)
			if g.wait {
				if s.waitUntil.IsZero() {
					s.waitUntil = time.Now().Add(t.opt.AckTimeout)
				}
				if waitUntil.IsZero() || s.waitUntil.Before(waitUntil) {
					waitUntil = s.waitUntil
				}
				members = append(members, o)
			}
		}
		if len(batch) == 0 {
			return
		}
		if len(members) > 0 {
			batch = append(batch, t.waitOp(time.Until(waitUntil), members...))
		}
		write, ok := c.enqueue(batch)
		if !ok {
			continue // it failed or was retired meanwhile: another one
		}
		if write {
			t.write(ctx, c)
		}
		return
	}
}

func mkOp(mk func(int) *op, j int) *op {
	if mk == nil {
		return newOp()
	}
	return mk(j)
}

// failedOp returns an op that was not sent, for err.
func failedOp(err error) *op {
	o := newOp()
	o.err, o.again = err, true
	o.state.Store(opDone)
	return o
}
