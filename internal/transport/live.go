package transport

import (
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// A connection's liveness. A call has its own context, but a connection
// that stays silent with calls in flight (a link that drops bytes without
// closing, a middlebox gone) would hold every call written after them, and
// no reply would ever free them. So a connection on which Redis answers
// nothing for the user's client's ReadTimeout (go-redis's default 3s),
// while calls are in flight, is taken for dead: it is closed, and its
// calls are told so (ErrNoReply, ErrNotSent), as go-redis fails a command
// after its ReadTimeout. A ReadTimeout below zero (go-redis's "no
// timeout") sets none. WAIT's connections wait the WithReplicaAck timeout
// more. A paused Redis longer than that loses the engine's connections,
// not its calls' outcomes: they are told.

// liveness returns the liveness of rdb's connections: its ReadTimeout; 0:
// none.
func liveness(rdb redis.UniversalClient) time.Duration {
	var d time.Duration
	switch r := rdb.(type) {
	case *redis.Client:
		d = r.Options().ReadTimeout
	case *redis.ClusterClient:
		d = r.Options().ReadTimeout
	}
	switch {
	case d == 0:
		return 3 * time.Second // go-redis's default
	case d < 0:
		return 0
	}
	return d
}

// live returns c's liveness (see the file's comment); 0: none.
func (c *conn) live() time.Duration {
	d := c.n.t.live
	if d > 0 && c.wait {
		d += c.n.t.opt.AckTimeout
	}
	return d
}

// silent is the error of a connection that stayed silent for d.
func silent(d time.Duration) error {
	return fmt.Errorf("redisync: Redis answered nothing on the connection for %v (the redis client's ReadTimeout): %w", d, os.ErrDeadlineExceeded)
}
