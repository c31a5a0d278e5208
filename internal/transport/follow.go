package transport

import (
	"context"
	"fmt"
	"net"

	"github.com/redis/go-redis/v9"
)

// Where the primary is. The engine keeps its connections, so a failover
// must move them: it never writes to a server it knows is no longer the
// primary, however long that server still answers as one (a planned
// Sentinel failover's old primary does for about 10s, until the Sentinels
// demote it). It learns a switch
//
//   - from the switches (switch.go): on a Sentinel failover client the
//     watcher, which the engine keeps running while it has connections
//     there, reads the replication id behind go-redis's own command
//     connections, which move as soon as the Sentinels announce the new
//     primary (+switch-master): a new id is a new primary, and the
//     engine's connections to any other server are retired (no new call;
//     closed once the calls in flight on them are answered); on a
//     Cluster, the slots the watcher saw move are routed to their new
//     master at once;
//   - from each connection it opens: INFO replication says the server's
//     role and replication id before the connection takes a call. A
//     server that is no primary, or whose id was a primary's that
//     switched away, is not written to; a new primary's id retires the
//     connections to the old one (and is told as a switch, "redial");
//   - from READONLY: the server is a replica now; its connections are
//     retired, the switch is told, and the call goes to the primary now
//     (retry.go); on a Cluster, MOVED (slotmap.go);
//   - on a Sentinel failover client, from go-redis's own dials: New adds a
//     dial hook to the client (followHook), and when go-redis connects to
//     another server than the engine's connections (it does once the
//     Sentinels announced a new primary, which its dialer asks them for),
//     those connections are retired at once: the engine writes to the new
//     primary no later than go-redis's own command connections do.

// follow registers the engine's listener of the switches, and on a
// Sentinel failover client its dial hook.
func (t *Transport) follow() {
	t.OnSwitch(t.switched)
	if c, ok := t.rdb.(*redis.Client); ok && t.dialer.sentinel {
		c.AddHook(followHook{t})
	}
}

// followHook is the dial hook New adds to a Sentinel failover client: it
// tells the engine the server each of go-redis's new connections reached
// (dialedTo). It runs nothing else.
type followHook struct{ t *Transport }

func (h followHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := next(ctx, network, addr)
		if err == nil && nc != nil && nc.RemoteAddr() != nil {
			h.t.dialedTo(nc.RemoteAddr().String())
		}
		return nc, err
	}
}

func (followHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (followHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dialedTo is go-redis's failover client having connected to remote: the
// engine's connections to another server are retired (the Sentinels'
// primary is remote now), and the switch is told.
func (t *Transport) dialedTo(remote string) {
	t.mu.Lock()
	drained := t.drained
	t.mu.Unlock()
	if drained {
		return
	}
	var from string
	moved := false
	t.single.retire(func(c *conn) bool {
		if c.remote == "" || c.remote == remote {
			return false
		}
		moved = true
		t.forget(c.replID)
		if c.replID != "" {
			from = c.replID
		}
		return true
	})
	if moved {
		t.opt.Log.Info("redisync: go-redis connected to another primary; the engine follows", "to", remote)
		t.Switched(Switch{From: Server{ReplID: from}, Cause: "redial"})
	}
}

// switched moves the engine's calls after s.
func (t *Transport) switched(s Switch) {
	if t.cc != nil {
		if s.To.Addr != "" && s.Slots != nil {
			t.setSlots(s.Slots, s.To.Addr)
		} else {
			t.reloadSlots()
		}
		return
	}
	t.forget(s.From.ReplID)
	to, from := s.To.ReplID, s.From.ReplID
	t.single.retire(func(c *conn) bool {
		switch {
		case to != "":
			if c.replID == to {
				return false
			}
			t.forget(c.replID)
			return true
		case from != "" && c.replID != "" && c.replID != from && !t.isOld(c.replID):
			// Its server was a primary, not the one that stopped
			// being one, when it was dialled: it may be the new
			// primary, dialled since the switch was reported (this
			// listener runs after its report), and is kept.
			return false
		}
		return true
	})
}

// forget records id as a primary's that switched away.
func (t *Transport) forget(id string) {
	if id == "" {
		return
	}
	t.mu.Lock()
	if t.old == nil {
		t.old = map[string]bool{}
	}
	t.old[id] = true
	t.mu.Unlock()
}

// isOld reports whether id was a primary's that switched away.
func (t *Transport) isOld(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.old[id]
}

// open dials a connection for n and checks that its server is a primary
// (see the file's comment).
func (t *Transport) open(n *node) (*conn, error) {
	if t.dialer.sentinel {
		t.watching.Do(func() { t.unwatch = t.WatchSwitches() })
	}
	nc, rd, hs, err := t.dialer.open(t.life, n.addr)
	if err != nil {
		return nil, err
	}
	if hs.known && (!hs.primary || t.isOld(hs.replID)) {
		_ = nc.Close()
		if t.cc != nil {
			t.reloadSlots()
		}
		return nil, fmt.Errorf("%w (%v answers as a replica, or as the primary it was before a failover)", ErrNotPrimary, n)
	}
	c := newConn(n, nc, rd, t.dialer.isTLS(nc), hs.replID)
	if t.single != nil && hs.replID != "" {
		var from string
		for _, o := range n.all() {
			if o.usable() && o.replID != "" && o.replID != hs.replID {
				from = o.replID
				t.forget(o.replID)
				o.retire()
			}
		}
		if from != "" {
			t.opt.Log.Info("redisync: a new connection found another primary", "from", from, "to", hs.replID)
			t.Switched(Switch{From: Server{ReplID: from}, To: Server{ReplID: hs.replID}, Cause: "redial"})
		}
	}
	return c, nil
}

// readOnly handles READONLY from n: its server is a replica now.
func (t *Transport) readOnly(n *node) {
	if n == nil {
		return
	}
	if t.cc != nil {
		n.retire(nil)
		t.reloadSlots()
		return
	}
	var from string
	n.retire(func(c *conn) bool {
		t.forget(c.replID)
		if c.replID != "" {
			from = c.replID
		}
		return true
	})
	t.Switched(Switch{From: Server{ReplID: from}, Cause: "readonly"})
}

// credentialsChanged retires every connection: the next ones authenticate
// with the streaming provider's new credentials.
func (t *Transport) credentialsChanged() {
	t.mu.Lock()
	ns := t.allNodes()
	t.mu.Unlock()
	for _, n := range ns {
		n.retire(nil)
	}
}
