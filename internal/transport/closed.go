package transport

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The user's go-redis client closed. The engine's connections are its own,
// but they are the client's to end: once the client is closed, redisync's
// calls fail (not sent, wrapping redis.ErrClosed) and its connections are
// closed, as the client's own commands fail. The engine asks the client at
// most every closedEvery while it picks connections for calls: a PING with
// a context already cancelled, which go-redis answers without any I/O
// (redis.ErrClosed once it is closed; the context's error otherwise). The
// client's hooks see that PING.

// closedEvery bounds how often the engine asks whether the client closed.
const closedEvery = 100 * time.Millisecond

// closedWatch is what the engine knows of the client's Close.
type closedWatch struct {
	next   atomic.Int64 // UnixNano of the next look
	closed atomic.Bool
}

// rdbClosed reports whether the user's client is closed, looking again at
// most every closedEvery; the first time it is seen closed, the engine's
// connections are closed.
func (t *Transport) rdbClosed() bool {
	w := &t.rdbWatch
	if w.closed.Load() {
		return true
	}
	now := time.Now().UnixNano()
	next := w.next.Load()
	if now < next || !w.next.CompareAndSwap(next, now+int64(closedEvery)) {
		return false
	}
	if !isClosed(t.rdb, t.cc) {
		return false
	}
	if w.closed.CompareAndSwap(false, true) {
		t.opt.Log.Warn("redisync: the redis client was closed: redisync's calls fail from now on")
		t.mu.Lock()
		ns := t.allNodes()
		t.mu.Unlock()
		for _, n := range ns {
			for _, c := range n.all() {
				c.fail(redis.ErrClosed)
			}
		}
	}
	return true
}

// isClosed asks rdb whether it is closed, without any I/O.
func isClosed(rdb redis.UniversalClient, cc *redis.ClusterClient) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var err error
	if cc != nil {
		var m *redis.Client
		if m, err = cc.MasterForKey(ctx, "redisync"); err == nil {
			err = m.Ping(ctx).Err()
		}
	} else {
		err = rdb.Ping(ctx).Err()
	}
	return errors.Is(err, redis.ErrClosed)
}
