// Package transport carries every script a redisync Client sends to Redis
// and knows nothing of what the scripts do: calls in (Call: a script, its
// keys and arguments), replies out (Reply), each within its caller's
// context. The layers above hand it what it needs (Options).
//
// It is an engine of its own: it dials its own connections to each
// primary from the user's client (dial.go), writes the calls and reads
// their replies itself (encode.go, resp.go, conn.go), a few connections
// per primary (node.go), so that it knows, for every call, whether its
// bytes were written and what Redis answered (Reply.Written,
// Reply.Answered): a call written whole whose reply was lost is never sent
// again (ErrNoReply: it may have run; the layer above decides), one not
// written, or cut in its write, is sent again on another connection within
// its bound, and so is one Redis refused without running it (NOSCRIPT as
// EVAL; LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN after a pause;
// READONLY on the primary now; MOVED and ASK where they say: retry.go). A
// caller whose context ends leaves at once: a call not written yet is never
// written (ErrNotSent), one written has its reply handed to its give-back
// (late) when it comes. The calls in flight are bounded per connection
// (room.go). On a Cluster it keeps its own slot map (slotmap.go); after a
// failover it writes to the new primary only (follow.go, with the
// switches of switch.go). Hooks (Options.Hooks, go-redis's redis.Hook
// shape) run around each call, batch and dial (hooks.go); the user's
// go-redis client's own hooks do not see these calls.
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

	dialer   *dialer
	life     context.Context // ends at Drain: the dials under way end with it
	end      context.CancelFunc
	single   *node      // a single node's or Sentinel's primary; nil on a Cluster
	slots    slotMap    // a Cluster's (slotmap.go)
	mu       sync.Mutex // guards nodes, drained, old
	nodes    map[string]*node
	drained  bool
	old      map[string]bool // Sentinel: the replication ids of primaries that switched away (follow.go)
	workers  atomic.Int32    // the engine's goroutines
	calls    atomic.Int32    // Do and DoAll under way
	active   atomic.Int32    // what may still send: calls whose callers left, hooks' runs, Async's
	pipes    atomic.Uint64   // writes, to tell them apart
	rdbWatch closedWatch     // whether the user's client closed (closed.go)
	watching sync.Once       // Sentinel: the watcher wanted while the engine runs (follow.go)
	unwatch  func()

	goneFn func(*op)     // t.onGone, made once
	live   time.Duration // its connections' liveness (live.go)

	sw switches // the primary's switches: listeners, what was told, the watcher (switch.go)
}

// Call is one script invocation (or, with a nil script, one command whose
// arguments are args, routed by keys[0]), kept so it can be sent again.
type Call struct {
	Script *lua.Script
	Keys   []string
	Args   []any
	// Takes says the Call may take a lock or permits (an acquisition, a
	// re-entry, a handoff, a renewal): with WithReplicaAck it is followed
	// by WAIT, and its Reply says whether the replicas have it.
	Takes bool
	// Direct says the Call is a release: its caller waits for it at most
	// Options.ReleaseTimeout when its context cannot end.
	Direct bool
	// Once says a Reply that refuses the Call for now is returned, not
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
	v   value
	err error
	// Sent is when its write began: a lease it set counts from then.
	Sent time.Time
	// Pipe tells its write from others (calls written together share it).
	Pipe uint64
	// Acked is WAIT's answer, -1 when no WAIT followed the call; WaitErr
	// is WAIT's own error.
	Acked   int64
	WaitErr error
	// Gone: the caller's context ended first, the call written; the Reply
	// goes to late. A call whose caller left before it was written is
	// never written: Gone is false, its error wraps ErrNotSent and the
	// context's, and late is not called.
	Gone bool
	// written: its bytes reached the connection whole; answered: Redis
	// answered it (with its reply, or an error reply).
	written, answered bool
}

// Written reports whether the call's bytes were written whole to Redis's
// connection (on its last attempt): a call not written did not run.
func (r Reply) Written() bool { return r.written }

// Answered reports whether Redis answered the call (with its result, or
// an error reply): a call written and not answered may have run or not.
func (r Reply) Answered() bool { return r.answered }

// Err returns the call's error: the wire's (wrapping ErrNotSent or
// ErrNoReply), its context's, or Redis's error reply (a RedisError).
func (r Reply) Err() error { return r.err }

// Int64 returns the call's Reply as an integer.
func (r Reply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	return r.v.int64()
}

// Text returns the call's Reply as a string.
func (r Reply) Text() (string, error) {
	if r.err != nil {
		return "", r.err
	}
	return r.v.text()
}

// Int64Slice returns the call's Reply as an array of integers.
func (r Reply) Int64Slice() ([]int64, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.v.int64Slice()
}

// Slice returns the call's Reply as an array.
func (r Reply) Slice() ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.v.slice()
}

// Val returns the call's Reply as go-redis's Cmd.Val would: int64,
// string, []any or nil.
func (r Reply) Val() any { return r.v.any() }

// New returns the transport of the calls sent through rdb (a *redis.Client
// or a *redis.ClusterClient), with opt. Close it to stop it.
func New(rdb redis.UniversalClient, opt Options) *Transport {
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.ReleaseTimeout <= 0 {
		opt.ReleaseTimeout = 5 * time.Second
	}
	t := &Transport{rdb: rdb, opt: opt, closed: make(chan struct{}), nodes: map[string]*node{}}
	t.cc, _ = rdb.(*redis.ClusterClient)
	t.life, t.end = context.WithCancel(context.Background())
	t.dialer = newDialer(rdb, opt.Hooks)
	t.live = liveness(rdb)
	t.dialer.onChange = t.credentialsChanged
	t.goneFn = t.onGone
	if t.cc == nil {
		t.single = &node{t: t}
	} else {
		// The slot map, read at once rather than by the first call: a
		// node that is silent by then (CLUSTER SLOTS goes to any node)
		// would hold that call up.
		t.readSlots()
	}
	t.follow()
	return t
}

// Options are what a Transport is told by the layer above it.
type Options struct {
	// AckReplicas > 0: the calls that take something are followed by
	// WAIT AckReplicas AckTimeout on their own connection, and their
	// replies say how many replicas acknowledged them.
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
	// Hooks run around each call, batch and dial of the engine's, as
	// go-redis runs a client's hooks (hooks.go).
	Hooks []redis.Hook
}

func (o *Options) acks() bool { return o.AckReplicas > 0 }

func (o *Options) publish() string {
	if o.Publish == nil {
		return "publish"
	}
	return o.Publish()
}

// wholeMs rounds d up to whole milliseconds, WAIT's resolution.
func wholeMs(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// Script returns the Call of s with keys and args.
func Script(s *lua.Script, keys []string, args ...any) Call {
	return Call{Script: s, Keys: keys, Args: args}
}

// Close stops the transport's background work (the switches' watcher and
// teller); calls still go out until Drain.
func (t *Transport) Close() {
	t.closeOnce.Do(func() { close(t.closed) })
}

// Drain waits, at most d, until no call is queued or in flight, then
// closes the engine's connections (what is still in flight fails) and
// waits, within d, for its goroutines to end. Calls sent after Drain fail
// without being sent.
func (t *Transport) Drain(d time.Duration) {
	deadline := time.Now().Add(d)
	// Quiet: nothing queued or in flight, no call under way, nothing that
	// may still send (a call whose caller left, a hook's run, an Async),
	// for a few looks in a row: what a caller does with a reply (give
	// back a grant) comes a moment after it.
	for quiet := 0; quiet < drainQuiet && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if t.load() > 0 || t.active.Load() > 0 || t.calls.Load() > 0 {
			quiet = 0
		} else {
			quiet++
		}
	}
	t.mu.Lock()
	t.drained = true
	ns := t.allNodes()
	t.mu.Unlock()
	t.end()
	for _, n := range ns {
		n.close()
	}
	t.dialer.close()
	if t.unwatch != nil {
		t.unwatch()
	}
	t.waitSwitches(deadline)
	for t.workers.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// drainQuiet is how many looks, a millisecond apart, Drain finds the
// transport quiet before it closes it.
const drainQuiet = 20

// allNodes returns the nodes. Called with t.mu held.
func (t *Transport) allNodes() []*node {
	ns := make([]*node, 0, len(t.nodes)+1)
	if t.single != nil {
		ns = append(ns, t.single)
	}
	for _, n := range t.nodes {
		ns = append(ns, n)
	}
	return ns
}

// load returns the calls queued or in flight.
func (t *Transport) load() int {
	t.mu.Lock()
	ns := t.allNodes()
	t.mu.Unlock()
	l := 0
	for _, n := range ns {
		l += n.load()
	}
	return l
}

// Workers returns how many of the engine's goroutines run (readers,
// writers, dials, the calls whose callers left); 0 once it is drained.
func (t *Transport) Workers() int { return int(t.workers.Load()) }

// nodeAt returns the node of the primary at addr (a Cluster's), made on
// first use; nil once the transport is drained.
func (t *Transport) nodeAt(addr string) *node {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.nodes[addr]; n != nil || t.drained {
		return n
	}
	n := &node{t: t, addr: addr}
	t.nodes[addr] = n
	return n
}

// background returns a context for what the engine sends on its own (a
// call whose caller left), bounded by what remains of bound.
func background(until time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.Background(), until)
}
