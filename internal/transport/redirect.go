package transport

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redirects met on a master's own connection (WithReplicaAck on a
// Cluster: go-redis's cluster pipeline follows them itself otherwise): a
// MOVED reloads the cluster client's slot map and sends the Call again to
// the slot's new master (follow); an ASK sends ASKING and the Call to the
// master the slot is migrating to (ask). Each try of a Call follows at
// most maxRedirects of them.

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

// slotReload bounds the wait for a reloaded slot map after MOVED.
const slotReload = time.Second
