package transport

import (
	"context"
	"sync"
	"sync/atomic"
)

// A Cluster's slot map, read once before a call is routed. go-redis reads
// it on first use, in the goroutine that asks, with its own read timeout
// whatever the caller's context says (go-redis's contexts bound reads only
// with ContextTimeoutEnabled), and the transport asks for it, and go-redis
// again, before a call is written: a Client's first call on a Cluster
// whose seed master was paused waited twice the read timeout, its
// context long over (TestClusterFirstCallOnStalledSeed). So until the map
// is read, a call waits for it as long as its context lasts, while one
// goroutine reads it, and leaves unsent when its context ends.

// slotMap tracks the reading of a Cluster's slot map.
type slotMap struct {
	read    atomic.Bool // read once: go-redis keeps it, and reloads it itself
	mu      sync.Mutex
	reading *slotRead // the read under way; nil: none
}

// slotRead is one read of the slot map: done is closed when it ends, with
// err its error.
type slotRead struct {
	done chan struct{}
	err  error
}

// awaitSlotMap returns once the cluster client has read its slot map
// (at once, after the first time), or when ctx ends (a direct call's
// context that cannot end: after Options.ReleaseTimeout), or when a read
// fails: then its error says the call was not sent. The map is read by
// k's key.
func (t *Transport) awaitSlotMap(ctx context.Context, k *Call) error {
	sm := &t.slots
	if t.cc == nil || sm.read.Load() || len(k.Keys) == 0 {
		return nil
	}
	key := k.Keys[0]
	if ctx.Done() == nil && k.Direct {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.opt.ReleaseTimeout)
		defer cancel()
	}
	sm.mu.Lock()
	r := sm.reading
	if r == nil {
		r = &slotRead{done: make(chan struct{})}
		sm.reading = r
		go func() {
			_, err := t.cc.MasterForKey(context.Background(), key)
			sm.mu.Lock()
			r.err = err
			sm.read.Store(err == nil)
			sm.reading = nil
			sm.mu.Unlock()
			close(r.done)
		}()
	}
	sm.mu.Unlock()
	select {
	case <-r.done:
		if r.err != nil {
			return notSent(r.err, "the Cluster's slot map could not be read")
		}
		return nil
	case <-ctx.Done():
		return notSent(ctx.Err(), "the Cluster's slot map is still being read")
	}
}
