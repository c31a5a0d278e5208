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
// values) and the outcome (redisync.OutcomeAcquired, ...); never the
// lock's name, whose values are unbounded (trace a lock's name with
// extra/redisyncotel instead). The histograms' buckets are set by options
// (WithWaitBuckets, ...).
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redisync-go/redisync"
)

// The default buckets, in seconds (see the With*Buckets options).
var (
	// waitBuckets: a wait takes a round trip when the lock is free, up to
	// the holder's hold under contention.
	waitBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	// holdBuckets: from a short critical section to a leadership.
	holdBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 1800, 3600}
	// roundBuckets: a watchdog round is one pipeline per node.
	roundBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	// downBuckets: how long a subscription connection stays lost.
	downBuckets = []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 300}
)

// Option configures NewCollector.
type Option func(*config)

type config struct {
	namespace                string
	labels                   prometheus.Labels
	wait, hold, rounds, down []float64
}

// WithNamespace sets the metrics' namespace (default "redisync").
func WithNamespace(ns string) Option { return func(c *config) { c.namespace = ns } }

// WithConstLabels adds labels with fixed values to every metric: to
// register two Collectors in one registry (one per Redis deployment, say).
func WithConstLabels(l prometheus.Labels) Option { return func(c *config) { c.labels = l } }

// WithWaitBuckets sets the buckets of the wait histogram
// (redisync_wait_duration_seconds), in seconds. The default runs from
// 0.5ms to 30s.
func WithWaitBuckets(b []float64) Option { return func(c *config) { c.wait = clone(b) } }

// WithHoldBuckets sets the buckets of the hold histogram
// (redisync_hold_duration_seconds), in seconds. The default runs from 1ms
// to an hour.
func WithHoldBuckets(b []float64) Option { return func(c *config) { c.hold = clone(b) } }

// WithRoundBuckets sets the buckets of the watchdog's round histogram
// (redisync_renewal_round_duration_seconds), in seconds. The default runs
// from 0.5ms to 2.5s.
func WithRoundBuckets(b []float64) Option { return func(c *config) { c.rounds = clone(b) } }

// WithDowntimeBuckets sets the buckets of the subscription's downtime
// histogram (redisync_subscription_downtime_seconds), in seconds. The
// default runs from 10ms to 5 minutes.
func WithDowntimeBuckets(b []float64) Option { return func(c *config) { c.down = clone(b) } }

// clone copies b, so that the caller's slice may change later; nil stays
// nil (Prometheus's default buckets).
func clone(b []float64) []float64 {
	if b == nil {
		return nil
	}
	return append([]float64(nil), b...)
}

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
	cfg := config{namespace: "redisync", wait: waitBuckets, hold: holdBuckets, rounds: roundBuckets, down: downBuckets}
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
			Help: "How long a subscription connection was lost, once restored.", ConstLabels: cl, Buckets: cfg.down}),
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
			c.waits.WithLabelValues(string(e.Kind), string(e.Outcome)).Observe(e.Wait.Seconds())
			c.holds.WithLabelValues(string(e.Kind)).Inc()
			if e.Handoff {
				c.handoffs.WithLabelValues(string(e.Kind)).Inc()
			}
		},
		AcquireFailed: func(_ context.Context, e redisync.HoldEvent) {
			c.waits.WithLabelValues(string(e.Kind), string(e.Outcome)).Observe(e.Wait.Seconds())
		},
		Released: func(_ context.Context, e redisync.HoldEvent) {
			c.holdTimes.WithLabelValues(string(e.Kind), string(e.Outcome)).Observe(e.Held.Seconds())
			c.holds.WithLabelValues(string(e.Kind)).Dec()
		},
		LeaseLost: func(_ context.Context, e redisync.HoldEvent) {
			c.holdTimes.WithLabelValues(string(e.Kind), string(e.Outcome)).Observe(e.Held.Seconds())
			c.holds.WithLabelValues(string(e.Kind)).Dec()
			c.lost.WithLabelValues(string(e.Kind)).Inc()
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
