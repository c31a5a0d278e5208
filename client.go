package redisync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/internal/transport"

	"github.com/google/uuid"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync/internal/keys"
)

// DefaultWatchdogTimeout is the lease the watchdog keeps alive for a hold
// taken without WithLease, as in Redisson.
const DefaultWatchdogTimeout = 30 * time.Second

// Client makes the locks and synchronizers of one process on one Redis
// deployment. It owns the watchdog that renews their leases and the one
// pub/sub subscription that wakes their waiters; make one per process and
// share it. A Client is safe for concurrent use.
type Client struct {
	rdb   redis.UniversalClient
	id    string // identifies this client's owners: "<id>:<n>"
	lease time.Duration
	ack   holds.Ack // WithReplicaAck; zero: off

	holds   *holds.Machine
	wd      *lease.Keeper
	ps      *notify.Hub
	co      *cohort.Queue
	tr      *transport.Transport
	mode    *notify.Mode // the pub/sub mode, as resolved
	pubWant PubSubMode   // WithPubSub

	closeOnce sync.Once
	closed    chan struct{}

	obs   Observer
	log   *slog.Logger
	hooks []redis.Hook // WithHooks: around the engine's calls

	// noCohort turns cohort handoff off, for tests of what it bypasses
	// (the race after an unlock message, the rotation).
	noCohort bool
	// scriptHandoff makes every cohort handoff a script, never one in
	// memory, for tests of the handoff script (which a run's last
	// handoff, a fenced lock, WithReplicaAck and WithLease use).
	scriptHandoff bool
	// busyRead bounds the read that names a busy lock's holder in the
	// error of a wait that ended (busy.go); 0: busyReadTimeout. Tests
	// on a loaded machine widen it.
	busyRead time.Duration
}

// Option configures a Client.
type Option func(*Client) error

// WithWatchdogTimeout sets the lease the watchdog keeps alive for holds taken
// without WithLease (default 30s). It is renewed every d/3, and a holder whose
// lease cannot be renewed is told a little before d has passed. Redis counts
// leases in whole milliseconds: d is rounded up to one; d below MinLease is
// refused, as is d above MaxLease. How soon a renewal round must answer:
// see WithRenewedLease.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if err := checkLease("watchdog timeout", d); err != nil {
			return err
		}
		c.lease = lease.WholeMs(d)
		return nil
	}
}

// New returns a Client on rdb, which may be a single node, a Sentinel
// (failover) client or a Cluster client: a *redis.Client or a
// *redis.ClusterClient, as redis.NewUniversalClient returns them. It fails
// on a nil rdb, on any other kind of client (a *redis.Ring shards keys and
// channels by a hash of its own, which the locks' scripts and unlock
// messages cannot follow), and on a bad option. Close the Client to stop
// its goroutines; rdb stays open.
//
// On a Cluster client with PubSubAuto (the default), New asks the masters
// whether they support sharded pub/sub (see PubSubMode), waiting at most 2
// seconds; when they cannot be reached, New still succeeds and the Client
// asks again when it first needs to know.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if err := checkClient(rdb); err != nil {
		return nil, err
	}
	c := &Client{
		rdb:    rdb,
		id:     uuid.NewString(),
		lease:  DefaultWatchdogTimeout,
		closed: make(chan struct{}),
		log:    slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalid)
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	if err := c.checkAck(); err != nil {
		return nil, err
	}
	c.mode = notify.NewMode(rdb, uint8(c.pubWant), func(from, to uint8) { c.modeChanged(PubSubMode(from), PubSubMode(to)) })
	c.warnUnrun(rdb)
	c.tr = transport.New(rdb, transport.Options{AckReplicas: c.ack.K, AckTimeout: c.ack.Timeout, Publish: c.mode.Publish,
		ReleaseTimeout: holds.ReleaseTimeout, Log: c.log, Hooks: c.hooks})
	c.wd = lease.New(lease.Config{Transport: c.tr, Lease: c.lease, Closed: c.closed, Log: c.log,
		GiveBack: func(h *lease.Hold) { c.holds.GiveBack(h) }, Ended: c.ended,
		Acked: func(r reply) error { return c.holds.RenewedAck(r) }, Renewed: c.renewed,
		Errors: lease.Errors{Lost: ErrLeaseLost, Closed: ErrClosed, ClosedHold: errs.ClosedHold, Untrusted: holds.ErrUntrusted}})
	c.co = cohort.NewQueue(ErrClosed)
	c.ps = notify.New(notify.Config{RDB: rdb, Closed: c.closed, ClosedErr: ErrClosed, Log: c.log,
		Mode: c.mode.Sharded, Hold: c.co.ChanYielding, Lost: c.subLost, Restored: func(node string, down time.Duration) {
			c.subRestored(node, down)
			c.holds.Kick() // perhaps another server now: the healer looks at once
		}, Watch: c.tr.WatchSwitches})
	c.tr.OnSwitch(func(s transport.Switch) { c.ps.Switched(s); c.holds.Kick() }) // the subscription follows the primary
	c.holds = holds.New(holds.Config{ID: c.id, Transport: c.tr, Keeper: c.wd, Hub: c.ps, Queue: c.co, Closed: c.closed,
		Log: c.log, Ack: c.ack, Route: c.tr.Route, HoldValues: c.obs.HoldStarted != nil, WaitStarted: c.waitStarted, Acquired: c.acquired, AcquireFailed: c.failedEvent,
		Primaries: c.tr.Primaries})
	if mode := c.PubSub(); mode != PubSubAuto {
		c.ps.SetMode(mode == PubSubSharded)
	}
	return c, nil
}

// checkClient refuses a redis client that New cannot work with.
func checkClient(rdb redis.UniversalClient) error {
	if err := transport.CheckClient(rdb); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// ID returns the client's identity: the UUID that begins the Redis field of
// every owner of its holds ("<id>:<n>"), as Redisson's client id does. Log
// it to tell which process holds a lock.
func (c *Client) ID() string {
	if c == nil {
		return ""
	}
	return c.id
}

// Close stops the watchdog and the subscription. Waits in progress end with
// ErrClosed; holds are released best-effort and their contexts cancelled with
// a cause that matches both ErrClosed and ErrLeaseLost. Close waits for
// those releases at most 5s in all, even while Redis does not answer; a
// release that reached no server (the server down, say) is sent again
// within those 5s, and a lock whose release did not reach Redis by then is
// freed when its lease ends. Within those 5s it also sends again the
// releases it made from shortly before the last switch of their primary
// it learned of (a failover may have lost them), asking Redis nothing
// more. Later calls return ErrClosed. Close does not close the redis
// client it was given.
func (c *Client) Close() error {
	if c == nil || c.wd == nil {
		return fmt.Errorf("%w: Close of a nil or zero Client", ErrInvalid)
	}
	err := ErrClosed
	c.closeOnce.Do(func() {
		err = nil
		deadline := time.Now().Add(holds.ReleaseTimeout)
		close(c.closed)
		c.tr.Close() // its background work stops; calls go out until Drain
		unreleased := c.wd.Close(deadline)
		c.holds.KeepAll(unreleased) // those refused: sent again within the bound
		c.ps.Close()
		c.holds.Close(deadline)
		c.tr.Drain(time.Until(deadline))
	})
	return err
}

// usable refuses a nil context, and a handle or Client not made the way
// their docs say (a zero value, wrap nil), instead of panicking; then it
// returns ErrClosed once Close has begun.
func usable(ctx context.Context, c *Client, wrap func(error) error) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalid)
	case wrap == nil || c == nil || c.wd == nil:
		return fmt.Errorf("%w: a zero handle or Client: make Clients with New and locks with their methods", ErrInvalid)
	}
	return c.checkOpen()
}

// wrapOr wraps err with wrap, or, for a zero handle, with the package prefix.
func wrapOr(wrap func(error) error, err error) error {
	if wrap == nil || err == nil {
		return err
	}
	return wrap(err)
}

// checkOpen returns ErrClosed once Close has begun.
func (c *Client) checkOpen() error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
		return nil
	}
}

// checkName refuses an empty name, and a name that is the companion key of
// another lock ("{tag}:<purpose>:<name>"), which would share that key.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalid)
	}
	if keys.IsCompanion(name) {
		return fmt.Errorf("%w: name %q has the form of a companion key of another lock", ErrInvalid, name)
	}
	return nil
}
