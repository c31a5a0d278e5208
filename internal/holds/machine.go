package holds

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/redisync-go/redisync/internal/cohort"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/internal/transport"
)

// Config is what a Machine is handed: the layers below it, and the
// callbacks through which it reports up.
type Config struct {
	ID        string // the Client's identity: owner fields are "<ID>:<n>"
	Transport *transport.Transport
	Keeper    *lease.Keeper
	Hub       *notify.Hub
	Queue     *cohort.Queue
	Closed    <-chan struct{} // closed when the Client closes
	Log       *slog.Logger
	Ack       Ack // WithReplicaAck
	// Primaries, when set, says who serves keys now: the healer (heal.go)
	// sends again the recent releases a change of primary may have lost.
	Primaries Primaries
	// Route, when set, names the route of a key (its Cluster slot; one
	// route on a single primary): the healer asks one key per route.
	Route func(key string) int

	// WaitStarted, when set, is told of each first acquisition as it
	// starts, with the caller's context, and returns the context whose
	// values the acquisition's commands carry (nil: the caller's).
	// Each such acquisition then ends with one call of Acquired or
	// AcquireFailed, with that context. Acquired returns the context
	// whose values the hold's contexts carry (nil: the caller's), given
	// the caller's (parent); only when HoldValues is set, which makes
	// each hold with a lease.Observed.
	HoldValues    bool
	WaitStarted   func(ctx context.Context, ref lease.Ref) context.Context
	Acquired      func(ctx, parent context.Context, ref lease.Ref, wait time.Duration, handoff bool) context.Context
	AcquireFailed func(ctx context.Context, ref lease.Ref, wait time.Duration, err error)
}

// Machine is a Client's hold machinery: it acquires, re-enters and
// releases holds, waits between attempts, and gives back what a call
// that failed or left early may have left in Redis. Its background work
// (give-backs, sweeps) stops with Close.
type Machine struct {
	cfg Config
	id  string
	tr  *transport.Transport
	wd  *lease.Keeper
	ps  *notify.Hub
	co  *cohort.Queue
	log *slog.Logger

	recent recent        // releases a failover may lose (recent.go)
	kick   chan struct{} // wakes the healer (heal.go)

	kept       kept               // releases that reached no server (kept.go)
	keptCtx    context.Context    // ended by Close at its deadline
	keptCancel context.CancelFunc // ends keptCtx
	keptLoop   sync.WaitGroup     // the loop that sends them again

	closed   <-chan struct{}
	bgMu     sync.Mutex
	bg       sync.WaitGroup // background give-backs and sweeps
	bgClosed bool
}

// New returns the Machine of cfg.
func New(cfg Config) *Machine {
	m := &Machine{cfg: cfg, id: cfg.ID, tr: cfg.Transport, wd: cfg.Keeper, ps: cfg.Hub, co: cfg.Queue,
		log: cfg.Log, closed: cfg.Closed, kick: make(chan struct{}, 1)}
	m.keptCtx, m.keptCancel = context.WithCancel(context.Background())
	return m
}

// Go runs f in the background, counted as work Close waits for, and
// reports true; once Close has begun it runs nothing and reports false.
func (m *Machine) Go(f func()) bool {
	if !m.bgStart() {
		return false
	}
	go func() {
		defer m.bg.Done()
		f()
	}()
	return true
}

// bgStart counts one more background give-back, unless the Machine is
// closed (the Client's Close releases every hold itself).
func (m *Machine) bgStart() bool {
	m.bgMu.Lock()
	defer m.bgMu.Unlock()
	if m.bgClosed {
		return false
	}
	m.bg.Add(1)
	return true
}

// Close starts no more background work and waits for what is running, at
// most until deadline; work still running by then stops with Closed. The
// releases still kept (kept.go) are dropped at deadline: Close returns
// once the loop that sends them has ended.
func (m *Machine) Close(deadline time.Time) {
	m.bgMu.Lock()
	m.bgClosed = true
	m.bgMu.Unlock()
	done := make(chan struct{})
	go func() { m.bg.Wait(); close(done) }()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	m.stopKept()
}
