package redisync

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
	ack   replicaAck // WithReplicaAck; zero: off

	wd   *watchdog
	ps   *pubsub
	co   *cohort
	tr   *transport
	mode pubMode

	closeOnce sync.Once
	closed    chan struct{}

	bgMu     sync.Mutex
	bg       sync.WaitGroup // background give-backs (hold.go)
	bgClosed bool

	obs Observer
	log *slog.Logger

	// noCohort turns cohort handoff off, for tests of what it bypasses
	// (the race after an unlock message, the rotation).
	noCohort bool
	// scriptHandoff makes every cohort handoff a script, never one in
	// memory, for tests of the handoff script (which a run's last
	// handoff, a fenced lock, WithReplicaAck and WithLease use).
	scriptHandoff bool
}

// Option configures a Client.
type Option func(*Client) error

// WithWatchdogTimeout sets the lease the watchdog keeps alive for holds taken
// without WithLease (default 30s). It is renewed every d/3, and a holder whose
// lease cannot be renewed is told a little before d has passed. Redis counts
// leases in whole milliseconds: d is rounded up to one; d below MinLease is
// refused, as is d above MaxLease.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if err := checkLease("watchdog timeout", d); err != nil {
			return err
		}
		c.lease = wholeMs(d)
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
	c.mode.rdb = rdb
	c.mode.changed = c.modeChanged
	c.mode.init()
	c.tr = newTransport(rdb, c.ack, &c.mode, c.log, c.closed)
	c.wd = newWatchdog(c, c.lease)
	c.co = newCohort()
	c.ps = newPubSub(rdb, c.closed, c.log, c.mode.sharded, c.co.chanYielding)
	c.ps.obs = &c.obs
	if mode := c.PubSub(); mode != PubSubAuto {
		c.ps.setMode(mode == PubSubSharded)
	}
	return c, nil
}

// checkClient refuses a redis client that New cannot work with.
func checkClient(rdb redis.UniversalClient) error {
	switch r := rdb.(type) {
	case nil:
		return fmt.Errorf("%w: nil redis client", ErrInvalid)
	case *redis.Client:
		if r == nil {
			return fmt.Errorf("%w: nil *redis.Client", ErrInvalid)
		}
	case *redis.ClusterClient:
		if r == nil {
			return fmt.Errorf("%w: nil *redis.ClusterClient", ErrInvalid)
		}
	case *redis.Ring:
		return fmt.Errorf("%w: a *redis.Ring is not supported (it shards keys and channels by a hash of its own); use a single node, Sentinel or a Redis Cluster", ErrInvalid)
	default:
		return fmt.Errorf("%w: a redis client of type %T is not supported: pass a *redis.Client (single node, Sentinel) or a *redis.ClusterClient", ErrInvalid, rdb)
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
// those releases at most releaseTimeout (5s) in all, even while Redis does
// not answer; a lock whose release did not reach Redis is freed when its
// lease ends. Later calls return ErrClosed. Close does not close the redis
// client it was given.
func (c *Client) Close() error {
	if c == nil || c.wd == nil {
		return fmt.Errorf("%w: Close of a nil or zero Client", ErrInvalid)
	}
	err := ErrClosed
	c.closeOnce.Do(func() {
		err = nil
		deadline := time.Now().Add(releaseTimeout)
		close(c.closed)
		c.wd.close(deadline)
		c.ps.close()
		c.bgMu.Lock()
		c.bgClosed = true
		c.bgMu.Unlock()
		waitAtMost(&c.bg, time.Until(deadline))
		c.tr.drain(time.Until(deadline))
	})
	return err
}

// bgStart counts one more background give-back, unless the client is
// closed (Close releases every hold itself).
func (c *Client) bgStart() bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgClosed {
		return false
	}
	c.bg.Add(1)
	return true
}

// waitAtMost waits for wg, at most d.
func waitAtMost(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
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

// LockOption configures a lock made by a Client.
type LockOption func(*lockConfig) error

type lockConfig struct {
	lease   time.Duration // WithLease; 0: kept alive by the watchdog
	renewed time.Duration // WithRenewedLease; 0: the Client's watchdog timeout
	waiter  time.Duration // 0: DefaultWaiterTimeout (FairMutex, RWMutex)
	fence   bool          // WithFencing (Mutex, FairMutex, RWMutex)
	permits int           // WithPermits (Semaphore); 0: none stated
}

// WithLease gives every hold of the lock a fixed lease of d that the watchdog
// does not renew (Redisson's lock(leaseTime)): Redis frees the lock d after
// its last acquisition or re-entry, and the hold's context is cancelled with
// ErrLeaseLost shortly before. Redis counts leases in whole milliseconds: d
// is rounded up to one; d below MinLease or above MaxLease is refused. A hold keeps the lease it was taken with: a
// re-entry through a handle with another lease is refused (ErrInvalid).
func WithLease(d time.Duration) LockOption {
	return func(lc *lockConfig) error {
		if err := checkLease("lease", d); err != nil {
			return err
		}
		lc.lease = wholeMs(d)
		return nil
	}
}

// WithRenewedLease gives the lock a lease of d, kept alive by the
// Client's watchdog, which renews it every d/3, instead of the Client's
// watchdog timeout (WithWatchdogTimeout, which stays the default of its
// other locks): a crashed holder frees the lock within d, and a holder
// whose lease cannot be renewed is told a little before d has passed. One
// Client can so keep short leases for some locks (a transfer's, freed
// within 2s of a crash) and long ones for others (a leader's), renewed in
// the same batches. Redis counts leases in whole milliseconds: d is
// rounded up to one; d below MinLease or above MaxLease is refused, as is
// WithLease on the same handle. A hold keeps the lease it was taken with:
// a re-entry through a handle with another lease is refused (ErrInvalid).
func WithRenewedLease(d time.Duration) LockOption {
	return func(lc *lockConfig) error {
		if err := checkLease("renewed lease", d); err != nil {
			return err
		}
		lc.renewed = wholeMs(d)
		return nil
	}
}

// leaseOf returns the lease of the lock's holds, and whether the watchdog
// renews it.
func (lc lockConfig) leaseOf(c *Client) (time.Duration, bool) {
	switch {
	case lc.lease > 0:
		return lc.lease, false
	case lc.renewed > 0:
		return lc.renewed, true
	}
	return c.lease, true
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

// The primitives that take LockOptions, for lockSetup: each option applies
// to some of them only.
type primitive uint8

const (
	primMutex primitive = iota
	primFair
	primRW
	primSemaphore
	primMultiLock
	primElection // WithFencing applies, and changes nothing: terms are tokens
)

// lockSetup validates a lock's name and options for the primitive p; the
// error is kept by the lock and returned by each of its methods. An option
// that does not apply to p is refused, naming the primitives it applies
// to.
func lockSetup(name string, opts []LockOption, p primitive) (lockConfig, error) {
	var lc lockConfig
	if err := checkName(name); err != nil {
		return lc, err
	}
	for _, opt := range opts {
		if opt == nil {
			return lc, fmt.Errorf("%w: nil lock option", ErrInvalid)
		}
		if err := opt(&lc); err != nil {
			return lc, err
		}
	}
	switch {
	case lc.lease > 0 && lc.renewed > 0:
		return lc, fmt.Errorf("%w: WithLease (a fixed lease) and WithRenewedLease (a renewed one) exclude each other", ErrInvalid)
	case lc.waiter > 0 && p != primFair && p != primRW:
		return lc, fmt.Errorf("%w: WithWaiterTimeout applies to FairMutex and RWMutex only", ErrInvalid)
	case lc.fence && p == primSemaphore:
		return lc, fmt.Errorf("%w: WithFencing applies to Mutex, FairMutex, RWMutex and MultiLock only, not to a Semaphore", ErrInvalid)
	case lc.permits > 0 && p != primSemaphore:
		return lc, fmt.Errorf("%w: WithPermits applies to Semaphore only", ErrInvalid)
	}
	return lc, nil
}
