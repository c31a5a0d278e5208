package redisync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// The failover trial: the figures the README's failover row and
// docs/guarantees.md give. Several Clients contend for several fenced
// Mutexes and a Semaphore (the default 30s lease) while the primary
// switches, counting two live holders of one name, a fencing token not
// above the name's last, and holders beyond the Semaphore's permits; for
// each lock name,
// the first acquisition by another Client than its last holder before the
// switch, counted from the switch (Sentinel's +switch-master; the
// replica's promotion on a Cluster). It runs only when asked:
//
//	REDISYNC_FAILOVER_TRIAL=planned go test -race -count=1 -run TestFailoverTrial -v .
//
// (=kill kills the primary instead of a planned failover, and the
// releases refused during the outage are kept and sent again once a
// primary answers: internal/holds/kept.go; =force and =takeover run
// CLUSTER FAILOVER FORCE and CLUSTER FAILOVER TAKEOVER, on the Cluster
// only.) Each topology runs trialRuns switches.

const (
	trialRuns    = 3
	trialClients = 3
	trialNames   = 8
	trialPermits = 3 // the Semaphore's, taken by trialPermits goroutines of each Client
)

// trialLog records the acquisitions of a trial.
type trialLog struct {
	mu      sync.Mutex
	acqs    map[string][]trialAcq // by name, in order
	live    map[string]*atomic.Int32
	over    atomic.Int64     // two live holders of one name seen at once
	back    atomic.Int64     // a fencing token not above the name's last one
	toks    map[string]int64 // the last token of each name (under mu)
	sem     atomic.Int32     // the Semaphore's permits held now
	semOver atomic.Int64     // more held than it has
	lost    []time.Time      // when the holds whose Unlock found them lost were taken (under mu)
	errs    atomic.Int64     // Lock or Unlock errors
	some    sync.Map         // an error of each kind's text: seen
	events  []trialEvent     // every Lock and Unlock, when REDISYNC_TRIAL_LOG is set (under mu)
	logging bool
}

// trialEvent is one Lock or Unlock of a name, for the trial's log of a
// slow name.
type trialEvent struct {
	name   string
	client int
	asked  time.Time // a Lock's call; zero: an Unlock
	at     time.Time // when it returned
	err    error
}

// event records a Lock (asked at asked) or an Unlock (asked zero) that
// client made on name and that returned at at, when logging.
func (l *trialLog) event(name string, client int, asked, at time.Time, err error) {
	if !l.logging {
		return
	}
	l.mu.Lock()
	l.events = append(l.events, trialEvent{name: name, client: client, asked: asked, at: at, err: err})
	l.mu.Unlock()
}

// String says what e was, for the log of a slow name.
func (e trialEvent) String() string {
	if e.asked.IsZero() {
		return fmt.Sprintf("client %d unlock err=%v", e.client, e.err)
	}
	return fmt.Sprintf("client %d lock asked at %s err=%v", e.client, e.asked.Format("15:04:05.000"), e.err)
}

// failed counts err, and keeps its text (its first line, without
// addresses) for the trial's summary.
func (l *trialLog) failed(what string, err error) {
	l.errs.Add(1)
	l.some.Store(what+": "+err.Error(), true)
}

type trialAcq struct {
	client int
	at     time.Time
}

func newTrialLog(names []string) *trialLog {
	l := &trialLog{acqs: map[string][]trialAcq{}, live: map[string]*atomic.Int32{}, toks: map[string]int64{}, logging: os.Getenv("REDISYNC_TRIAL_LOG") != ""}
	for _, n := range names {
		l.live[n] = &atomic.Int32{}
	}
	return l
}

// work contends for name on c (client number i), a fenced Mutex, until
// ctx ends.
func (l *trialLog) work(ctx context.Context, c *Client, i int, name string) {
	m := c.Mutex(name, WithFencing())
	for ctx.Err() == nil {
		asked := time.Now()
		h, err := m.Lock(ctx)
		l.event(name, i, asked, time.Now(), err)
		if err != nil {
			if ctx.Err() == nil {
				l.failed("Lock", err)
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		if l.live[name].Add(1) > 1 {
			l.over.Add(1)
		}
		tok, _ := m.Token(h)
		l.mu.Lock()
		if tok <= l.toks[name] {
			l.back.Add(1)
		}
		l.toks[name] = max(l.toks[name], tok)
		l.mu.Unlock()
		at := time.Now()
		time.Sleep(time.Duration(5+rand.IntN(25)) * time.Millisecond)
		l.live[name].Add(-1)
		err = m.Unlock(h)
		l.event(name, i, time.Time{}, time.Now(), err)
		if err != nil {
			// Not counted: a hold the primary serving the lock never
			// had (taken on a master demoted without knowing it yet,
			// after a forced failover) is no acquisition.
			l.failed("Unlock", err)
			if errors.Is(err, ErrLeaseLost) {
				l.mu.Lock()
				l.lost = append(l.lost, at)
				l.mu.Unlock()
			}
		} else {
			l.mu.Lock()
			l.acqs[name] = append(l.acqs[name], trialAcq{client: i, at: at})
			l.mu.Unlock()
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}
}

// permits takes one of the trialPermits of the Semaphore name on c until
// ctx ends, counting the holders beyond its permits.
func (l *trialLog) permits(ctx context.Context, c *Client, name string) {
	s := c.Semaphore(name)
	for ctx.Err() == nil {
		h, err := s.Acquire(ctx, 1)
		if err != nil {
			if ctx.Err() == nil {
				l.failed("Acquire", err)
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		if l.sem.Add(1) > trialPermits {
			l.semOver.Add(1)
		}
		time.Sleep(time.Duration(5+rand.IntN(25)) * time.Millisecond)
		l.sem.Add(-1)
		if err := s.Release(h, 1); err != nil {
			l.failed("Release", err)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}
}

// after returns, for name, how long after at another Client than its last
// holder before at first acquired it (a hold its Unlock found held); ok is
// false when none did.
func (l *trialLog) after(name string, at time.Time) (d time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := -1
	for _, a := range l.acqs[name] {
		if !a.at.After(at) {
			last = a.client
			continue
		}
		if a.client != last {
			return a.at.Sub(at), true
		}
	}
	return 0, false
}

// run contends on names with clients, switches the primary with flip
// (which returns the moment of the switch), and returns each name's
// figure once every name has one, or after 40s.
func runTrial(t *testing.T, clients []*Client, names []string, sem string, flip func() time.Time) []time.Duration {
	l := newTrialLog(names)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, clients[0].Semaphore(sem).SetPermits(ctx, trialPermits))
	var wg sync.WaitGroup
	for i, c := range clients {
		for _, n := range names {
			wg.Go(func() { l.work(ctx, c, i, n) })
		}
		for range trialPermits {
			wg.Go(func() { l.permits(ctx, c, sem) })
		}
	}
	time.Sleep(2 * time.Second)
	at := flip()
	if l.logging {
		t.Logf("switch at %s", at.Format("15:04:05.000"))
	}
	out := make([]time.Duration, len(names))
	for deadline := time.Now().Add(40 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		all := true
		for i, n := range names {
			d, ok := l.after(n, at)
			out[i] = d
			all = all && ok
		}
		if all {
			break
		}
	}
	for i, n := range names {
		if _, ok := l.after(n, at); !ok {
			out[i] = -1 // none within the trial
		}
		if l.logging && (out[i] < 0 || out[i] > 1500*time.Millisecond) {
			l.mu.Lock()
			for _, e := range l.events {
				if e.name == n && e.at.After(at.Add(-time.Second)) && e.at.Before(at.Add(out[i]+time.Second)) {
					t.Logf("slow %s: %v %v", n, e.at.Sub(at).Round(time.Millisecond), e)
				}
			}
			l.mu.Unlock()
		}
	}
	cancel()
	wg.Wait()
	var kinds []string
	l.some.Range(func(k, _ any) bool { kinds = append(kinds, k.(string)); return true })
	slices.Sort(kinds)
	t.Logf("overlapping holders seen: %d; fencing tokens not above the last: %d; Semaphore holders beyond its %d permits: %d; errors: %d %q",
		l.over.Load(), l.back.Load(), trialPermits, l.semOver.Load(), l.errs.Load(), kinds)
	if len(l.lost) > 0 {
		// When the holds the new primary never had were taken, from the
		// switch: before it (or just after), on the old primary in its
		// last moment, none once the Client had heard of the switch.
		var offs []string
		for _, a := range l.lost {
			offs = append(offs, a.Sub(at).Round(time.Millisecond).String())
		}
		t.Logf("holds found lost at their Unlock, taken at (from the switch): %s", strings.Join(offs, " "))
	}
	return out
}

// summary formats a run's figures: the slowest, the median, each.
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	var each []string
	for _, d := range ds {
		if d < 0 {
			each = append(each, "none")
		} else {
			each = append(each, d.Round(time.Millisecond).String())
		}
	}
	return fmt.Sprintf("slowest %v, median %v (each: %s)", s[len(s)-1].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), strings.Join(each, " "))
}

func TestFailoverTrial(t *testing.T) {
	kind := os.Getenv("REDISYNC_FAILOVER_TRIAL")
	if kind == "" {
		t.Skip("the failover trial runs with REDISYNC_FAILOVER_TRIAL=planned (or =kill, =force, =takeover)")
	}
	kill := kind == "kill"
	t.Run("sentinel", func(t *testing.T) {
		if kind == "force" || kind == "takeover" {
			t.Skip("a Cluster's failover only")
		}
		for run := range trialRuns {
			g := startSentinelGroup(t)
			var clients []*Client
			for i := range trialClients {
				clients = append(clients, newClient(t, g.client(t), trialOptions(i)...))
			}
			var names []string
			for i := range trialNames {
				names = append(names, fmt.Sprintf("trial-%d", i))
			}
			ds := runTrial(t, clients, names, "trial-sem", func() time.Time {
				if !kill {
					return g.failover(t)
				}
				return g.kill(t)
			})
			t.Logf("Sentinel %s failover %d: first acquisition by another Client after +switch-master: %s", kind, run+1, summary(ds))
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartClusterWithReplicas(t, 3, 1)
		for run := range trialRuns {
			if kill && run > 0 {
				cl = redistest.StartClusterWithReplicas(t, 3, 1)
			}
			var clients []*Client
			for i := range trialClients {
				clients = append(clients, newClient(t, cl.Client(t), trialOptions(i)...))
			}
			// Names on the shard that switches, new in each run: a name
			// the last run's Clients left held (see below) would hold
			// up this run's figure.
			var names []string
			for i := 0; len(names) < trialNames; i++ {
				n := fmt.Sprintf("{t%d}trial-%d", i, run)
				if shardOf(t, cl, n) == 0 {
					names = append(names, n)
				}
			}
			sem := ""
			for i := 0; sem == ""; i++ {
				if n := fmt.Sprintf("{s%d}trial-sem-%d", i, run); shardOf(t, cl, n) == 0 {
					sem = n
				}
			}
			ds := runTrial(t, clients, names, sem, func() time.Time {
				replica := cl.Replicas[0][0]
				promoted := promotedAt(t, replica)
				tag, _, _ := strings.Cut(strings.TrimPrefix(names[0], "{"), "}")
				waitReplicated(t, cl.Masters[0].Client(t), tag)
				switch kind {
				case "kill":
					cl.Masters[0].Kill()
				case "takeover":
					cl.Takeover(t, 0)
				default:
					cl.Failover(t, 0, kind == "force")
				}
				return <-promoted
			})
			t.Logf("Cluster %s failover %d: first acquisition by another Client after the promotion: %s", kind, run+1, summary(ds))
			for _, c := range clients {
				require.NoError(t, c.Close())
			}
			// What the closed Clients left held (the releases a master
			// demoted without knowing it yet answered, still not
			// demoted at Close): held for the rest of its lease.
			rc := cl.Client(t)
			left := 0
			for _, n := range append(slices.Clone(names), sem) {
				if ttl, _ := settledRead(t, func() (int, error) {
					d, err := rc.PTTL(context.Background(), n).Result()
					return int(d / time.Millisecond), err
				}); ttl > 0 {
					left++
					t.Logf("%s still held (%dms left) after its Clients closed", n, ttl)
				}
			}
			t.Logf("Cluster %s failover %d: names left held after Close: %d", kind, run+1, left)
		}
	})
}

// trialOptions gives Client i a logger to stderr when REDISYNC_TRIAL_LOG
// is set, and has its acquisitions acknowledged by a replica
// (WithReplicaAck(1, 100ms)) when REDISYNC_TRIAL_ACK is set.
func trialOptions(i int) []Option {
	var opts []Option
	if os.Getenv("REDISYNC_TRIAL_LOG") != "" {
		opts = append(opts, WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("client", i)))
	}
	if os.Getenv("REDISYNC_TRIAL_ACK") != "" {
		opts = append(opts, WithReplicaAck(1, 100*time.Millisecond))
	}
	return opts
}

// kill kills the primary and returns the moment the Sentinel announces
// the replica in its place (+switch-master).
func (g *sentinelGroup) kill(t *testing.T) time.Time {
	t.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.s.Addr()})
	defer sc.Close()
	sub := sc.Subscribe(ctx, "+switch-master")
	defer sub.Close()
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	waitReplicated(t, g.master.Client(t), "trial")
	g.master.Kill()
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	require.NoError(t, err, "no +switch-master")
	t.Logf("+switch-master %s", msg.Payload)
	g.master, g.replica = g.replica, g.master
	return time.Now()
}
