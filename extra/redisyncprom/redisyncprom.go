// Package redisyncprom measures redisync's locks with Prometheus: a
// Collector of waits, holds and their outcomes, lost leases, the
// watchdog's renewal rounds and the subscription's connections.
//
//	col := redisyncprom.NewCollector()
//	prometheus.MustRegister(col)
//	c, err := redisync.New(rdb, redisync.WithObserver(col.Observer()))
//
// One Collector may observe several Clients: their figures add up. The
// labels are the lock's kind (redisync.KindMutex, ...: a handful of
// values) and the outcome; never the lock's name, whose values are
// unbounded (trace a lock's name with extra/redisyncotel instead).
//
// The metrics, with the default namespace "redisync":
//
//	redisync_wait_duration_seconds{kind,outcome}      histogram: each wait for a first acquisition,
//	                                                  outcome acquired, not_acquired, canceled,
//	                                                  deadline_exceeded, closed or error
//	redisync_hold_duration_seconds{kind,outcome}      histogram: each hold, outcome released or lost
//	redisync_holds{kind}                              gauge: holds live now
//	redisync_handoffs_total{kind}                     counter: acquisitions handed over in a process
//	redisync_leases_lost_total{kind}                  counter: holds that lost their lease
//	redisync_renewal_rounds_total                     counter: the watchdog's rounds
//	redisync_renewal_round_duration_seconds           histogram: how long each round took
//	redisync_renewal_round_trips_total                counter: pipelines the rounds sent
//	redisync_renewals_total                           counter: leases the rounds renewed or tried to
//	redisync_renewal_failures_total{reason}           counter: renewals that found the hold gone
//	                                                  (reason lost) or failed otherwise (failed)
//	redisync_subscription_losses_total                counter: subscription connections lost
//	redisync_subscription_downtime_seconds            histogram: how long each was lost, once restored
//
// It is a module of its own, so that redisync's core does not depend on
// Prometheus.
package redisyncprom

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisync-go/redisync"
)

// The outcome label's values.
const (
	OutcomeAcquired         = "acquired"          // the wait got the lock
	OutcomeNotAcquired      = "not_acquired"      // TryLock, or TryLockFor's bound (ErrNotAcquired)
	OutcomeCanceled         = "canceled"          // the call's context was cancelled
	OutcomeDeadlineExceeded = "deadline_exceeded" // the call's context's deadline passed
	OutcomeClosed           = "closed"            // the Client was closed (ErrClosed)
	OutcomeError            = "error"             // Redis failed, or another error
	OutcomeReleased         = "released"          // a hold ended without losing its lease
	OutcomeLost             = "lost"              // a hold's lease was lost (ErrLeaseLost)
)

// Outcome returns the outcome of a wait that returned err (nil: acquired).
func Outcome(err error) string {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, redisync.ErrNotAcquired):
		return OutcomeNotAcquired
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, redisync.ErrClosed):
		return OutcomeClosed
	default:
		return OutcomeError
	}
}

// The default buckets, in seconds.
var (
	// WaitBuckets: a wait takes a round trip when the lock is free, up to
	// the holder's hold under contention.
	WaitBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// HoldBuckets: from a short critical section to a leadership.
	HoldBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800, 3600}
	// RoundBuckets: a watchdog round is one pipeline per node.
	RoundBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	// DownBuckets: how long a subscription connection stays lost.
	DownBuckets = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300}
)

// Option configures NewCollector.
type Option func(*config)

type config struct {
	namespace          string
	labels             prometheus.Labels
	wait, hold, rounds []float64
}

// WithNamespace sets the metrics' namespace (default "redisync").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithConstLabels adds labels with fixed values to every metric: to
// register two Collectors in one registry (one per Redis deployment, say).
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.labels = l } }

// WithWaitBuckets sets the buckets of the wait histogram, in seconds.
func WithWaitBuckets(b []float64) Option { return func(c *config) { c.wait = b } }

// WithHoldBuckets sets the buckets of the hold histogram, in seconds.
func WithHoldBuckets(b []float64) Option { return func(c *config) { c.hold = b } }

// Collector is a prometheus.Collector of what the Clients it observes do.
// Register it, and give its Observer to each Client.
type Collector struct {
	waits, holdTimes   *prometheus.HistogramVec
	holds              *prometheus.GaugeVec
	handoffs, lost     *prometheus.CounterVec
	rounds, roundTrips prometheus.Counter
	roundTimes         prometheus.Histogram
	renewals           prometheus.Counter
	renewFailures      *prometheus.CounterVec
	subLosses          prometheus.Counter
	subDown            prometheus.Histogram
	all                []prometheus.Collector
}

// NewCollector returns a Collector; see the package's doc for its metrics.
func NewCollector(opts ...Option) *Collector {
	cfg := config{namespace: "redisync", wait: WaitBuckets, hold: HoldBuckets, rounds: RoundBuckets}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	ns, cl := cfg.namespace, cfg.labels
	c := &Collector{
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "wait_duration_seconds",
			Help: "Waits for a first acquisition of a lock, by kind and outcome.", ConstLabels: cl, Buckets: cfg.wait},
			[]string{"kind", "outcome"}),
		holdTimes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "hold_duration_seconds",
			Help: "Holds of a lock, from the grant to the end, by kind and outcome (released or lost).", ConstLabels: cl, Buckets: cfg.hold},
			[]string{"kind", "outcome"}),
		holds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "holds",
			Help: "Holds live now, by kind.", ConstLabels: cl}, []string{"kind"}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "handoffs_total",
			Help: "Acquisitions handed over by a holder of the same Client (cohort handoff), by kind.", ConstLabels: cl},
			[]string{"kind"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "leases_lost_total",
			Help: "Holds that lost their lease, by kind.", ConstLabels: cl}, []string{"kind"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "renewal_rounds_total",
			Help: "Rounds of the watchdog that renewed leases.", ConstLabels: cl}),
		roundTrips: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "renewal_round_trips_total",
			Help: "Pipelines the watchdog's rounds sent.", ConstLabels: cl}),
		roundTimes: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "renewal_round_duration_seconds",
			Help: "How long each round of the watchdog took.", ConstLabels: cl, Buckets: cfg.rounds}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "renewals_total",
			Help: "Leases the watchdog's rounds renewed or tried to.", ConstLabels: cl}),
		renewFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "renewal_failures_total",
			Help: "Renewals that found the hold gone (lost) or failed otherwise, retried until the deadline (failed).", ConstLabels: cl},
			[]string{"reason"}),
		subLosses: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "subscription_losses_total",
			Help: "Subscription connections lost (the one that wakes waiters; one per node in sharded mode).", ConstLabels: cl}),
		subDown: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "subscription_downtime_seconds",
			Help: "How long a subscription connection was lost, once restored.", ConstLabels: cl, Buckets: DownBuckets}),
	}
	c.all = []prometheus.Collector{c.waits, c.holdTimes, c.holds, c.handoffs, c.lost, c.rounds, c.roundTrips,
		c.roundTimes, c.renewals, c.renewFailures, c.subLosses, c.subDown}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.all {
		m.Collect(ch)
	}
}

// Observer returns the Observer that feeds the Collector: give it to each
// Client with redisync.WithObserver (beside other observers if you like).
func (c *Collector) Observer() *redisync.Observer {
	return &redisync.Observer{
		Acquired: func(_ context.Context, e redisync.HoldEvent) {
			c.waits.WithLabelValues(e.Kind, OutcomeAcquired).Observe(e.Wait.Seconds())
			c.holds.WithLabelValues(e.Kind).Inc()
			if e.Handoff {
				c.handoffs.WithLabelValues(e.Kind).Inc()
			}
		},
		AcquireFailed: func(_ context.Context, e redisync.HoldEvent) {
			c.waits.WithLabelValues(e.Kind, Outcome(e.Cause)).Observe(e.Wait.Seconds())
		},
		Released: func(_ context.Context, e redisync.HoldEvent) {
			c.holdTimes.WithLabelValues(e.Kind, OutcomeReleased).Observe(e.Held.Seconds())
			c.holds.WithLabelValues(e.Kind).Dec()
		},
		LeaseLost: func(_ context.Context, e redisync.HoldEvent) {
			c.holdTimes.WithLabelValues(e.Kind, OutcomeLost).Observe(e.Held.Seconds())
			c.holds.WithLabelValues(e.Kind).Dec()
			c.lost.WithLabelValues(e.Kind).Inc()
		},
		Renewed: func(e redisync.RenewalEvent) {
			c.rounds.Inc()
			c.roundTrips.Add(float64(e.RoundTrips))
			c.roundTimes.Observe(e.Took.Seconds())
			c.renewals.Add(float64(e.Holds))
			if e.Lost > 0 {
				c.renewFailures.WithLabelValues("lost").Add(float64(e.Lost))
			}
			if e.Failed > 0 {
				c.renewFailures.WithLabelValues("failed").Add(float64(e.Failed))
			}
		},
		SubscriptionLost: func(redisync.SubscriptionEvent) { c.subLosses.Inc() },
		SubscriptionRestored: func(e redisync.SubscriptionEvent) {
			c.subDown.Observe(e.Down.Seconds())
		},
	}
}
