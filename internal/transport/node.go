package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A node is the engine's side of one primary: a few shared connections,
// each call going on the first one that is idle (its caller then writes
// and reads it itself: conn.roundTrip) or has fewer than pileUnder calls
// (it is pipelined there), on the least loaded otherwise; and
// connections of their own for the calls followed by WAIT, which blocks its
// connection until the replicas answer (up to the WithReplicaAck timeout),
// so that it never holds up another call. Connections are dialled on
// demand, one at a time per kind, in the background: a caller that finds
// none waits for the dial as long as its context lasts, one that finds
// them all busy pipelines on the least loaded meanwhile.

// pileUnder is the load under which a call joins the first shared
// connection that has one, rather than an idle one further on: the calls
// in flight on one connection are written together (measured: about one
// call a write when they were spread over two, and 7–11% more pairs/s at
// 16 and 64 goroutines once they piled on the first), while a batch of
// that many or more (a renewal round) still leaves the next call to
// another connection.
const pileUnder = 64

// How many connections a node keeps: shared, and for WAIT.
const (
	nodeConnsDefault = 2
	waitConns        = 8
)

// nodeConns is nodeConnsDefault; a variable for the benchmarks that
// compare counts.
var nodeConns = func() int {
	if n, err := strconv.Atoi(os.Getenv("REDISYNC_ENGINE_CONNS")); err == nil && n > 0 {
		return n
	}
	return nodeConnsDefault
}()

// ErrClosed is what the error of a call sent after the transport was
// drained wraps (with ErrNotSent).
var ErrClosed = errors.New("redisync: the Client is closed")

// errClosed is ErrClosed.
var errClosed = ErrClosed

// node is one primary's connections.
type node struct {
	t    *Transport
	addr string // as dialled; "": the client's own (single node, Sentinel)

	mu      sync.Mutex
	conns   []*conn
	waits   []*conn
	dialing [2]*dialing
	closed  bool
	dialErr error // the last dial's error; nil once one worked
}

// dialing is a dial under way: done is closed when it ends, with err.
type dialing struct {
	done chan struct{}
	err  error
}

// pick returns the connection for a call (wait: one followed by WAIT), or
// an error wrapping ErrNotSent when there is none and ctx ends first, or
// the dial failed.
func (n *node) pick(ctx context.Context, wait bool) (*conn, error) {
	kind, most := 0, nodeConns
	if wait {
		kind, most = 1, waitConns
	}
	if n.t.rdbClosed() {
		return nil, notSent(redis.ErrClosed, "the redis client is closed")
	}
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, notSent(errClosed, "the transport is closed")
		}
		list := n.conns
		if wait {
			list = n.waits
		}
		var best *conn
		live := 0
		for _, c := range list {
			if !c.usable() {
				continue
			}
			live++
			l := c.load.Load()
			if l == 0 || !wait && l < pileUnder {
				n.mu.Unlock()
				return c, nil
			}
			if best == nil || l < best.load.Load() {
				best = c
			}
		}
		if live < most && n.dialing[kind] == nil {
			d := &dialing{done: make(chan struct{})}
			n.dialing[kind] = d
			n.t.workers.Add(1)
			go n.dial(kind, d)
		}
		d := n.dialing[kind]
		n.mu.Unlock()
		if best != nil && !(wait && d != nil) {
			return best, nil
		}
		// No connection yet, or all of WAIT's are blocked in a WAIT and
		// another is being dialled: behind one, a call would wait for
		// that WAIT's timeout on top of its own.
		if d == nil {
			continue // a connection failed meanwhile: look again
		}
		select {
		case <-d.done:
			if d.err != nil {
				return nil, d.err
			}
		case <-ctx.Done():
			n.mu.Lock()
			last := n.dialErr
			n.mu.Unlock()
			if last != nil {
				return nil, fmt.Errorf("redisync: %w (no connection to Redis; the last dial: %w): %w", ErrNotSent, last, context.Cause(ctx))
			}
			return nil, notSent(context.Cause(ctx), "no connection to Redis yet")
		}
	}
}

// dial dials a connection of kind (0: shared, 1: WAIT's) and adds it.
func (n *node) dial(kind int, d *dialing) {
	defer n.t.workers.Add(-1)
	gen := n.t.dialer.gen.Load()
	c, err := n.t.open(n)
	n.mu.Lock()
	n.dialing[kind] = nil
	n.dialErr = err
	switch {
	case err != nil:
		d.err = notSent(err, "could not connect")
	case n.closed:
		d.err = notSent(errClosed, "the transport is closed")
	case kind == 0:
		n.conns = append(n.conns, c)
		if len(n.conns) < nodeConns {
			// The next one at once: a batch on the first (a renewal
			// round) must not have a lone call wait behind it.
			d2 := &dialing{done: make(chan struct{})}
			n.dialing[kind] = d2
			n.t.workers.Add(1)
			go n.dial(kind, d2)
		}
	default:
		c.wait = true
		n.waits = append(n.waits, c)
	}
	closed := n.closed
	n.mu.Unlock()
	if err == nil && closed {
		_ = c.nc.Close()
	}
	if err == nil && !closed && n.t.dialer.gen.Load() != gen {
		// The credentials changed while it was dialled, perhaps after
		// it authenticated with the old ones, and the retiring missed
		// it: the next connection authenticates with the new ones.
		c.retire()
	}
	close(d.done)
}

// remove forgets c, which failed or was retired.
func (n *node) remove(c *conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.conns = without(n.conns, c)
	n.waits = without(n.waits, c)
}

func without(cs []*conn, c *conn) []*conn {
	for i, x := range cs {
		if x == c {
			return append(cs[:i:i], cs[i+1:]...)
		}
	}
	return cs
}

// all returns the node's connections.
func (n *node) all() []*conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append(append([]*conn(nil), n.conns...), n.waits...)
}

// retire retires the connections for which which says so (nil: all).
func (n *node) retire(which func(*conn) bool) {
	for _, c := range n.all() {
		if which == nil || which(c) {
			c.retire()
		}
	}
}

// load returns the calls queued or in flight on the node.
func (n *node) load() int {
	l := 0
	for _, c := range n.all() {
		l += int(c.load.Load())
	}
	return l
}

// close closes the node's connections: what is still in flight on them
// fails.
func (n *node) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	for _, c := range n.all() {
		c.fail(errClosed)
	}
}

func (n *node) String() string {
	if n.addr == "" {
		return "the primary"
	}
	return fmt.Sprintf("the primary at %s", n.addr)
}
