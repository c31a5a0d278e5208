package main

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/redisync-go/redisync"
)

// lib is one library in one configuration.
type lib struct {
	name string
	fair bool // grants in arrival order by design
	// new makes n independent clients (as n processes would have), each
	// with its own connections; cnt counts the requests they send.
	new func(o instOpts) (inst, error)
}

// instOpts says how many clients to make and how to name their connections.
type instOpts struct {
	addr  string
	addrs []string // a Redis Cluster's nodes, instead of addr
	n     int
	cnt   *counter // nil: not counted
	name  string   // CLIENT SETNAME of every connection; default bench-c<i>
	link  *link    // the link latency's proxies; nil: loopback
}

func (o instOpts) clientName(i int) string {
	if o.name != "" {
		return o.name
	}
	return "bench-c" + itoa(i)
}

// inst is a library's clients for one run.
type inst interface {
	locker(client int, name string) locker // one per goroutine
	close()
}

// locker is one goroutine's handle on one lock.
type locker interface {
	// lock waits until held; it returns ctx's error when ctx ends. Other
	// errors (a peer's "gave up after N tries") are counted by the caller,
	// which tries again, as a user's retry loop would.
	lock(ctx context.Context) error
	unlock() error
}

// peerTTL is the lease given to peers without a watchdog (redsync's default).
const peerTTL = 8 * time.Second

// newGoRedisFor is newGoRedis, or a cluster client of o.addrs.
func newGoRedisFor(o instOpts, cnt *counter, name string) redis.UniversalClient {
	if o.addrs == nil {
		return newGoRedis(o.addr, o.link, cnt, name)
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.addrs, ClientName: name, Dialer: o.link.goRedisDialer()})
	if cnt != nil {
		// On each node's client, as go-redis's redisotel adds its hooks:
		// the commands sent on a master's full-duplex connection run the
		// node's hooks only, not the ClusterClient's.
		rdb.OnNewNode(func(node *redis.Client) { node.AddHook(cnt) })
	}
	return rdb
}

// newGoRedis makes a go-redis client of addr, through lk's proxy when lk is
// not nil, counted by cnt when cnt is not nil.
func newGoRedis(addr string, lk *link, cnt *counter, name string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ClientName: name, Dialer: lk.goRedisDialer()})
	if cnt != nil {
		rdb.AddHook(cnt)
	}
	return rdb
}

func allLibs() []lib {
	libs := []lib{
		{name: "redisync Mutex", new: newRedisync(mutexOf, nil)},
	}
	libs = append(libs, fairLibs()...) // FairMutex, when it has landed (fair.go)
	libs = append(libs,
		lib{name: "redsync (defaults)", new: newRedsync()},
		lib{name: "redsync (1ms retry)", new: newRedsync(redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(1<<30))},
		lib{name: "redislock (100ms retry)", new: newRedislock(redislock.LinearBackoff(100 * time.Millisecond))},
		lib{name: "redislock (1ms retry)", new: newRedislock(redislock.LinearBackoff(time.Millisecond))},
		lib{name: fdName, new: newRedislockFD(redislock.LinearBackoff(time.Millisecond))},
		lib{name: "rueidislock (defaults)", new: newRueidislock(0)},
		lib{name: "rueidislock (KeyMajority 1)", new: newRueidislock(1)},
	)
	return libs
}

// ---- redisync ----

// rsMutex is what Mutex and FairMutex have in common.
type rsMutex interface {
	Lock(ctx context.Context) (context.Context, error)
	Unlock(ctx context.Context) error
}

func mutexOf(c *redisync.Client, name string) rsMutex { return c.Mutex(name) }

type rsInst struct {
	rdbs []redis.UniversalClient
	cs   []*redisync.Client
	mk   func(*redisync.Client, string) rsMutex
}

func newRedisync(mk func(*redisync.Client, string) rsMutex, opts []redisync.Option) func(instOpts) (inst, error) {
	return func(o instOpts) (inst, error) {
		n, cnt := o.n, o.cnt
		in := &rsInst{mk: mk}
		for i := range n {
			rdb := newGoRedisFor(o, cnt, o.clientName(i))
			c, err := redisync.New(rdb, opts...)
			if err != nil {
				return nil, err
			}
			in.rdbs = append(in.rdbs, rdb)
			in.cs = append(in.cs, c)
		}
		return in, nil
	}
}

func (in *rsInst) locker(i int, name string) locker { return &rsLocker{m: in.mk(in.cs[i], name)} }
func (in *rsInst) close() {
	for i := range in.cs {
		_ = in.cs[i].Close()
		_ = in.rdbs[i].Close()
	}
}

type rsLocker struct {
	m rsMutex
	h context.Context
}

func (l *rsLocker) lock(ctx context.Context) error {
	h, err := l.m.Lock(ctx)
	if err == nil {
		l.h = h
	}
	return err
}
func (l *rsLocker) unlock() error { return l.m.Unlock(l.h) }

// ---- redsync ----

type redsyncInst struct {
	rdbs []redis.UniversalClient
	rss  []*redsync.Redsync
	opts []redsync.Option
}

func newRedsync(opts ...redsync.Option) func(instOpts) (inst, error) {
	return func(o instOpts) (inst, error) {
		n, cnt := o.n, o.cnt
		in := &redsyncInst{opts: opts}
		for i := range n {
			rdb := newGoRedisFor(o, cnt, o.clientName(i)) // goredis.NewPool takes a UniversalClient
			in.rdbs = append(in.rdbs, rdb)
			in.rss = append(in.rss, redsync.New(goredis.NewPool(rdb)))
		}
		return in, nil
	}
}

func (in *redsyncInst) locker(i int, name string) locker {
	return &redsyncLocker{m: in.rss[i].NewMutex(name, in.opts...)}
}
func (in *redsyncInst) close() {
	for _, r := range in.rdbs {
		_ = r.Close()
	}
}

type redsyncLocker struct{ m *redsync.Mutex }

func (l *redsyncLocker) lock(ctx context.Context) error {
	err := l.m.LockContext(ctx)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
func (l *redsyncLocker) unlock() error {
	ok, err := l.m.UnlockContext(context.Background())
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

// ---- bsm/redislock ----

type redislockInst struct {
	rdbs  []redis.UniversalClient
	cs    []*redislock.Client
	retry redislock.RetryStrategy
}

func newRedislock(retry redislock.RetryStrategy) func(instOpts) (inst, error) {
	return func(o instOpts) (inst, error) {
		n, cnt := o.n, o.cnt
		in := &redislockInst{retry: retry}
		for i := range n {
			rdb := newGoRedisFor(o, cnt, o.clientName(i)) // redislock takes a redis.Scripter
			in.rdbs = append(in.rdbs, rdb)
			in.cs = append(in.cs, redislock.New(rdb))
		}
		return in, nil
	}
}

func (in *redislockInst) locker(i int, name string) locker {
	return &redislockLocker{c: in.cs[i], name: name, opt: &redislock.Options{RetryStrategy: in.retry}}
}
func (in *redislockInst) close() {
	for _, r := range in.rdbs {
		_ = r.Close()
	}
}

type redislockLocker struct {
	c    *redislock.Client
	name string
	opt  *redislock.Options
	l    *redislock.Lock
}

// lock: Obtain gives up when the TTL has passed without a deadline on ctx
// (context.DeadlineExceeded of its own); the caller counts that and retries.
func (l *redislockLocker) lock(ctx context.Context) error {
	lk, err := l.c.Obtain(ctx, l.name, peerTTL, l.opt)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	l.l = lk
	return nil
}
func (l *redislockLocker) unlock() error { return l.l.Release(context.Background()) }

// ---- rueidislock ----

type rueInst struct {
	ls []rueidislock.Locker
}

// newRueidislock: majority 0 keeps the default (2 of 3 keys).
func newRueidislock(majority int32) func(instOpts) (inst, error) {
	return func(o instOpts) (inst, error) {
		n, cnt := o.n, o.cnt
		init := []string{o.addr}
		if o.addrs != nil {
			init = o.addrs
		}
		in := &rueInst{}
		for i := range n {
			l, err := rueidislock.NewLocker(rueidislock.LockerOption{
				ClientOption: rueidis.ClientOption{InitAddress: init, ClientName: o.clientName(i), DialCtxFn: o.link.rueidisDial()},
				KeyMajority:  majority,
				ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
					c, err := rueidis.NewClient(o)
					if err != nil || cnt == nil {
						return c, err
					}
					return &rueCounter{Client: c, c: cnt}, nil
				},
			})
			if err != nil {
				in.close()
				return nil, err
			}
			in.ls = append(in.ls, l)
		}
		return in, nil
	}
}

func (in *rueInst) locker(i int, name string) locker { return &rueLocker{l: in.ls[i], name: name} }
func (in *rueInst) close() {
	for _, l := range in.ls {
		l.Close()
	}
}

type rueLocker struct {
	l      rueidislock.Locker
	name   string
	cancel context.CancelFunc
}

func (l *rueLocker) lock(ctx context.Context) error {
	_, cancel, err := l.l.WithContext(ctx, l.name)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	l.cancel = cancel
	return nil
}
func (l *rueLocker) unlock() error { l.cancel(); return nil }
