package redisync

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// WithHooks has hooks run around redisync's own calls to Redis, as go-redis
// runs a client's hooks around its commands: ProcessHook around each call
// sent alone (a *redis.Cmd of its command, EVALSHA or EVAL with the
// script's keys and arguments, whose result and error the hook sees and may
// change), ProcessPipelineHook around each batch sent to one server
// (renewals, a MultiLock's slots), and DialHook around each connection
// redisync dials. A hook sees its caller's context values (a span to
// join), never its end: the caller leaves when its context ends, whatever
// the hook does, and a call not written to Redis by then never is.
//
// redisync sends its scripts on connections of its own, dialled from the
// redis client given to New (see docs/engine.md): the hooks added to that
// client (redisotel's among them) see its subscriptions and the commands
// of Inspect, not the scripts. Pass them here to see the scripts too;
// extra/redisyncotel gives a span per call without a hook.
func WithHooks(hooks ...redis.Hook) Option {
	return func(c *Client) error {
		for _, h := range hooks {
			if h == nil {
				return fmt.Errorf("%w: nil hook", ErrInvalid)
			}
		}
		c.hooks = append(c.hooks, hooks...)
		return nil
	}
}

// warnUnrun logs the options of rdb that redisync's own connections cannot
// run (docs/engine.md): OnConnect takes go-redis's own connection, and a
// Limiter wraps go-redis's own commands.
func (c *Client) warnUnrun(rdb redis.UniversalClient) {
	var onConnect, limiter bool
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		onConnect, limiter = o.OnConnect != nil, o.Limiter != nil
	case *redis.ClusterClient:
		o := r.Options()
		onConnect = o.OnConnect != nil
	}
	if onConnect {
		c.log.Warn("redisync: the redis client's OnConnect does not run on redisync's own connections (see docs/engine.md)")
	}
	if limiter {
		c.log.Warn("redisync: the redis client's Limiter does not limit redisync's own calls (see docs/engine.md)")
	}
}
