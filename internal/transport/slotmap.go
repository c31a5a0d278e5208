package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/keys"
)

// A Cluster's slot map, the engine's own: which master serves each slot,
// read with CLUSTER SLOTS through the user's cluster client, its masters'
// addresses mapped as go-redis maps them (a loopback address a remote
// node reports is taken for that node's host: Options().NodeAddress is
// what Redis said, Addr what go-redis dials). A MOVED reply sets its slot
// at once (to the address it names, as go-redis follows one) and has the
// whole map read again in the background; a switch the watcher learns
// sets the slots it covers (follow.go).
//
// The map is read before the first call is routed, in one goroutine: a
// call waits for it as long as its context lasts, and leaves unsent when
// its context ends (a Client's first call on a Cluster whose seed master
// was paused).

// slotMap is a Cluster's slot map.
type slotMap struct {
	slots   [16384]atomic.Pointer[node]
	read    atomic.Bool // read once
	mu      sync.Mutex
	reading *slotRead // the read under way; nil: none
	last    time.Time // when the last read began
}

// slotRead is one read of the slot map: done is closed when it ends, with
// err its error.
type slotRead struct {
	done chan struct{}
	err  error
}

// route returns the node s's call goes to: the node its ASK named, its
// slot's master on a Cluster, the primary elsewhere.
func (t *Transport) route(s *sendState) (*node, error) {
	if t.single != nil {
		return t.single, nil
	}
	if s.askAddr != "" {
		if n := t.nodeAt(s.askAddr); n != nil {
			return n, nil
		}
		return nil, notSent(errClosed, "the transport is closed")
	}
	if len(s.k.Keys) == 0 {
		return nil, notSent(fmt.Errorf("redisync: a call without keys on a Cluster"), "it has no key to route it by")
	}
	slot := keys.Slot(s.k.Keys[0])
	if n := t.slots.slots[slot].Load(); n != nil {
		return n, nil
	}
	t.reloadSlots()
	return nil, notSent(fmt.Errorf("redisync: no master serves slot %d", slot), "its slot has no master")
}

// awaitSlotMap returns once the slot map was read (at once, after the
// first time), or when ctx ends, or when a read fails: then its error says
// the call was not sent.
func (t *Transport) awaitSlotMap(ctx context.Context, k *Call) error {
	sm := &t.slots
	if t.cc == nil || sm.read.Load() {
		return nil
	}
	r := t.readSlots()
	select {
	case <-r.done:
		if r.err != nil {
			return notSent(r.err, "the Cluster's slot map could not be read")
		}
		return nil
	case <-ctx.Done():
		return notSent(context.Cause(ctx), "the Cluster's slot map is still being read")
	}
}

// readSlots starts a read of the slot map, unless one is under way, and
// returns it.
func (t *Transport) readSlots() *slotRead {
	sm := &t.slots
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.reading != nil {
		return sm.reading
	}
	r := &slotRead{done: make(chan struct{})}
	sm.reading, sm.last = r, time.Now()
	t.workers.Add(1)
	go func() {
		defer t.workers.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), 2*t.dialer.timeout)
		r.err = t.loadSlots(ctx)
		cancel()
		sm.mu.Lock()
		sm.reading = nil
		sm.mu.Unlock()
		if r.err == nil {
			sm.read.Store(true)
		}
		close(r.done)
	}()
	return r
}

// reloadSlots reads the slot map again, in the background, at most every
// slotReloadEvery.
func (t *Transport) reloadSlots() {
	sm := &t.slots
	sm.mu.Lock()
	recent := time.Since(sm.last) < slotReloadEvery
	sm.mu.Unlock()
	if !recent {
		t.readSlots()
	}
}

// slotReloadEvery bounds how often the slot map is read again.
const slotReloadEvery = 100 * time.Millisecond

// loadSlots reads CLUSTER SLOTS and sets the map from it.
func (t *Transport) loadSlots(ctx context.Context) error {
	ranges, err := t.cc.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	mapped := t.nodeAddrs(ctx)
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		addr := r.Nodes[0].Addr
		if a, ok := mapped[addr]; ok {
			addr = a
		}
		n := t.nodeAt(addr)
		if n == nil {
			return errClosed
		}
		for s := max(r.Start, 0); s <= min(r.End, 16383); s++ {
			t.slots.slots[s].Store(n)
		}
	}
	return nil
}

// nodeAddrs returns the cluster client's masters' addresses as dialled,
// by the address Redis names them by.
func (t *Transport) nodeAddrs(ctx context.Context) map[string]string {
	var mu sync.Mutex
	out := map[string]string{}
	_ = t.cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		o := c.Options()
		if o.NodeAddress != "" && o.NodeAddress != o.Addr {
			mu.Lock()
			out[o.NodeAddress] = o.Addr
			mu.Unlock()
		}
		return nil
	})
	return out
}

// moved sets slot's master to the one at addr (a MOVED reply's), and has
// the map read again.
func (t *Transport) moved(slot int, addr string) {
	if t.cc == nil {
		return
	}
	if n := t.nodeAt(addr); n != nil {
		t.slots.slots[slot].Store(n)
	}
	t.reloadSlots()
}

// setSlots sets the master of the slots of rs to the one at addr.
func (t *Transport) setSlots(rs []SlotRange, addr string) {
	n := t.nodeAt(addr)
	if n == nil {
		return
	}
	for _, r := range rs {
		for s := max(r.First, 0); s <= min(r.Last, 16383); s++ {
			t.slots.slots[s].Store(n)
		}
	}
}
