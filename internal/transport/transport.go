// Package transport carries every script a redisync Client sends to Redis
// and knows nothing of what the scripts do: calls in (Call: a script, its
// keys and arguments), replies out (Reply), each within its caller's
// context. The layers above hand it what it needs (Options).
//
// A call sent alone (Do) goes on go-redis's full-duplex auto-pipeline
// (fd.go): written at once, while other calls are in flight, never held
// behind another call's reply; on a Cluster, on its master's full-duplex
// connection (go-redis's cluster router: one per master, routed by slot
// when submitted). Batches (DoAll, Async) and the calls that wait for
// replicas (WAIT answers for its own connection's writes) go in
// pipelines, one lane per master (lane.go; a pipeline's sending:
// pipeline.go). On every path a script Redis no longer has is sent again
// whole (NOSCRIPT), MOVED and ASK are followed (go-redis's cluster client
// does; on a master's own connection, redirect.go), a reply that
// refused the call for now (TRYAGAIN, CLUSTERDOWN, LOADING) has it sent
// again within its bound (retry.go), a caller whose context ends leaves at
// once (the reply that comes later goes to its give-back, late; a call not
// sent yet is not sent at all: ErrNotSent, also a call on a Cluster whose
// slot map is still being read: slotmap.go), the calls in flight whose
// callers left are bounded (left.go), a call whose context cannot end
// waits at most Options.ReleaseTimeout when it is Direct, and the user's
// go-redis hooks see every command, with its caller's context values
// (never its end): on a Cluster, the hooks of each node's client (added
// through OnNewNode, as go-redis's redisotel adds its own), which every
// path runs; the ClusterClient's own hooks run only for batches. Writes
// (writes.go) counts how many times go-redis wrote a call.
package transport

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// Transport sends a Client's calls (see the package documentation). It is
// safe for concurrent use.
type Transport struct {
	rdb       redis.UniversalClient
	cc        *redis.ClusterClient // nil unless rdb is a Cluster client
	opt       Options
	closed    chan struct{}
	closeOnce sync.Once

	fdOnce sync.Once
	ap     *redis.AutoPipeliner // the full-duplex path (fd.go); nil: none
	left   left                 // its calls whose callers left (left.go); on a Cluster, lefts
	lefts  sync.Map             // on a Cluster, a master's address: its *left
	slots  slotMap              // on a Cluster, whether its slot map was read (slotmap.go)

	mu      sync.Mutex
	lanes   map[laneKey]*lane
	own     map[string]*redis.Client // masters the cluster client does not list (see nodeAt)
	workers atomic.Int32             // workers running, on every lane, and calls on their way again
	pipes   atomic.Uint64            // pipelines sent, to tell them apart

	sw switches // the primary's switches: listeners, what was told, the watcher (switch.go)
}

// Call is one script invocation (or, with a nil script, one command whose
// arguments are args, routed by keys[0]), kept so it can be sent again.
type Call struct {
	Script *lua.Script
	Keys   []string
	Args   []any
	// takes says the Call may take a lock or permits (an acquisition, a
	// re-entry, a handoff, a renewal): with WithReplicaAck it is followed
	// by WAIT, and its Reply says whether the replicas have it.
	Takes bool
	// direct says the Call goes out at once on an idle lane, without
	// waiting for a worker (a release); its caller waits for it at most
	// Options.ReleaseTimeout when its context cannot end.
	Direct bool
	// once says a Reply that refuses the Call for now is returned, not
	// waited out: its sender tries again sooner (the watchdog's renewals).
	Once bool
}

// publishArg stands, in a call's arguments, for the command the script
// publishes with ("publish" or "spublish"), read from Options.Publish when
// the Call is sent.
type publishArg struct{}

// Publish is the publish command's place in a call's arguments.
var Publish = publishArg{}

// Reply is the outcome of a call.
type Reply struct {
	Cmd  *redis.Cmd
	err  error     // when there is no cmd: why (the caller's context ended, ...)
	Sent time.Time // when its pipeline was sent
	Pipe uint64    // which pipeline
	// acked is WAIT's answer, -1 when no WAIT followed the call; werr is
	// WAIT's own error.
	Acked   int64
	WaitErr error
	// gone: the caller's context ended first, the call on its way; the
	// Reply goes to late. A call whose caller left before it was sent (or
	// sent again) is not sent at all: gone is false, its error wraps
	// ErrNotSent and the context's, and late is not called.
	Gone bool
}

// Err returns the call's error.
func (r Reply) Err() error {
	if r.Cmd == nil {
		return r.err
	}
	return r.Cmd.Err()
}

// Int64 returns the call's Reply as an integer.
func (r Reply) Int64() (int64, error) {
	if r.Cmd == nil {
		return 0, r.err
	}
	return r.Cmd.Int64()
}

// Text returns the call's Reply as a string.
func (r Reply) Text() (string, error) {
	if r.Cmd == nil {
		return "", r.err
	}
	return r.Cmd.Text()
}

// Int64Slice returns the call's Reply as an array of integers.
func (r Reply) Int64Slice() ([]int64, error) {
	if r.Cmd == nil {
		return nil, r.err
	}
	return r.Cmd.Int64Slice()
}

// Slice returns the call's Reply as an array.
func (r Reply) Slice() ([]any, error) {
	if r.Cmd == nil {
		return nil, r.err
	}
	return r.Cmd.Slice()
}

// New returns the transport of the calls sent through rdb (a *redis.Client
// or a *redis.ClusterClient), with opt. Close it to stop it.
func New(rdb redis.UniversalClient, opt Options) *Transport {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.ReleaseTimeout <= 0 {
		opt.ReleaseTimeout = 5 * time.Second
	}
	t := &Transport{rdb: rdb, opt: opt, closed: make(chan struct{}), lanes: map[laneKey]*lane{}, own: map[string]*redis.Client{}}
	t.cc, _ = rdb.(*redis.ClusterClient)
	return t
}

// Options are what a Transport is told by the layer above it.
type Options struct {
	// AckReplicas > 0: the calls that take something are followed by
	// WAIT AckReplicas AckTimeout on their master's own connection, and
	// their replies say how many replicas acknowledged them.
	AckReplicas int
	AckTimeout  time.Duration
	// Publish returns the command the scripts publish with ("publish"
	// or "spublish"), read when a call is sent (see Publish); nil:
	// "publish".
	Publish func() string
	// ReleaseTimeout bounds a Direct call whose context cannot end, and
	// the sending again of a call Redis refused for now (default 5s).
	ReleaseTimeout time.Duration
	// Log gets what goes wrong in the background.
	Log *slog.Logger
	// NoFullDuplex sends every call in pipelines (lane.go), none on the
	// full-duplex path (fd.go).
	NoFullDuplex bool
}

func (o *Options) acks() bool { return o.AckReplicas > 0 }

func (o *Options) publish() string {
	if o.Publish == nil {
		return "publish"
	}
	return o.Publish()
}

// The two publish commands, boxed once for calls' arguments.
var publishAny, spublishAny any = "publish", "spublish"

// publishValue returns publish() as a call's argument, boxed without an
// allocation for the two commands Redis has.
func (o *Options) publishValue() any {
	switch p := o.publish(); p {
	case "publish":
		return publishAny
	case "spublish":
		return spublishAny
	default:
		return p
	}
}

// wholeMs rounds d up to whole milliseconds, WAIT's resolution.
func wholeMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// Close stops the transport: its workers stop once their lanes are empty
// (see Drain).
func (t *Transport) Close() {
	t.closeOnce.Do(func() { close(t.closed) })
}

// do sends k and waits for its Reply or for ctx to end. When ctx ends
// first it returns a Reply whose error is ctx's (gone set), and the Reply
// that comes later is handed to late (nil: nothing to give back), in a
// goroutine of its own; when ctx ends before k was sent (on the
// full-duplex path: while fdMaxLeft calls whose callers left are in
// flight, or during the pause before a refused call is sent again; on a
// Cluster, while its slot map is read the first time), k is not sent, and
// the Reply's error wraps ErrNotSent (see Reply.Gone).
func (t *Transport) Do(ctx context.Context, k Call, late func(Reply)) Reply {
	if err := t.awaitSlotMap(ctx, &k); err != nil {
		return Reply{err: err, Acked: -1}
	}
	if !(t.opt.acks() && k.Takes) && !t.opt.NoFullDuplex && t.fd() != nil {
		return t.doFD(ctx, k, late)
	}
	o := &op{Call: k, ctx: context.WithoutCancel(ctx), done: make(chan struct{}), late: late, until: t.retryBound(ctx)}
	done := ctx.Done()
	if k.Direct && done == nil {
		bound, cancel := context.WithTimeout(ctx, t.opt.ReleaseTimeout)
		defer cancel()
		ctx, done = bound, bound.Done()
	}
	sent := false
	var aside *lane
	if k.Direct || done == nil {
		// On an idle lane the Call goes out at once: no worker to wake,
		// nothing to batch with. A caller that cannot leave sends it
		// itself; one that can, from a goroutine of its own, as
		// go-redis does not end a read on a silent link before its own
		// timeouts, however long they are, whatever ctx says.
		if l, err := t.lane(&o.Call); err == nil {
			if done == nil {
				sent = l.sendDirect(o)
			} else if l.sendAside(o) {
				sent, aside = true, l
			}
		}
	}
	if !sent {
		t.submit(o)
	}
	if done == nil {
		<-o.done
		return o.r
	}
	select {
	case <-o.done:
		if aside != nil {
			aside.answered(o) // its next Call finds the lane idle
		}
		return o.r
	case <-done:
		if r, ok := o.leave(ctx.Err()); ok {
			return r
		}
		<-o.done // delivered meanwhile
		return o.r
	}
}

// doAll sends calls and waits for all their replies, or for ctx to end
// (the replies still missing then carry ctx's error). Calls to one node
// are queued together, in order.
func (t *Transport) DoAll(ctx context.Context, calls []Call) []Reply {
	ops := make([]*op, len(calls))
	until := t.retryBound(ctx)
	vctx := context.WithoutCancel(ctx)
	for i, k := range calls {
		ops[i] = &op{Call: k, ctx: vctx, done: make(chan struct{}), until: until}
	}
	t.submit(ops...)
	rs := make([]Reply, len(ops))
	for i, o := range ops {
		select {
		case <-o.done:
			rs[i] = o.r
		case <-ctx.Done():
			if r, ok := o.leave(ctx.Err()); ok {
				rs[i] = r
			} else {
				<-o.done
				rs[i] = o.r
			}
		}
	}
	return rs
}

// async sends calls, in order, without waiting; then (nil: nothing) is
// called with each Reply, in a worker: it must not block.
func (t *Transport) Async(then func(Call, Reply), calls ...Call) {
	ops := make([]*op, len(calls))
	until := time.Now().Add(t.opt.ReleaseTimeout)
	for i, k := range calls {
		o := &op{Call: k, until: until}
		o.state.Store(opGone)
		if then != nil {
			o.late = func(r Reply) { then(o.Call, r) }
		}
		ops[i] = o
	}
	t.submit(ops...)
}

// script returns the Call of s with keys and args.
func Script(s *lua.Script, keys []string, args ...any) Call {
	return Call{Script: s, Keys: keys, Args: args}
}

// drain waits, at most d, until no worker runs and no Call is on its way
// again (once the client is closed, workers stop as soon as their lanes
// are empty), then closes the transport's own clients.
func (t *Transport) Drain(d time.Duration) {
	deadline := time.Now().Add(d)
	for t.workers.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	t.waitSwitches(deadline)
	t.mu.Lock()
	for _, c := range t.own {
		_ = c.Close()
	}
	t.own = nil
	t.mu.Unlock()
	// The full-duplex auto-pipeliner is the redis client's (one for all
	// its users): it lives, and is closed, with it.
}

// Workers returns how many of the transport's goroutines run: lane
// workers, and calls on their way again; 0 once it is closed and drained.
func (t *Transport) Workers() int { return int(t.workers.Load()) }
