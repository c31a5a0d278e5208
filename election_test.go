package redisync

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// observed collects what an observer reports, checking on the way the
// promises of Observe: terms in increasing order, no change twice.
type observed struct {
	t    *testing.T
	mu   sync.Mutex
	seen []Leadership
	at   []time.Time
	done chan struct{}
}

func observe(t *testing.T, e *Election, ctx context.Context) *observed {
	o := &observed{t: t, done: make(chan struct{})}
	ch := e.Observe(ctx)
	go func() {
		defer close(o.done)
		for l := range ch {
			o.mu.Lock()
			o.seen = append(o.seen, l)
			o.at = append(o.at, time.Now())
			o.mu.Unlock()
		}
	}()
	return o
}

// check asserts Observe's promises on what o saw: the leaders' terms
// strictly increase, and no change comes twice in a row; a value with Err
// repeats the last leader told, and the value after it may repeat it too.
func (o *observed) check() []Leadership {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var last int64
	var told Leadership // the last value without Err
	blind := false
	for i, l := range o.seen {
		switch {
		case l.Err != nil:
			assert.Equal(o.t, told, Leadership{Value: l.Value, Term: l.Term}, "a blind observer reports the last leader it told: %v", o.seen)
			blind = true
		case l.Term > 0 && blind:
			assert.GreaterOrEqual(o.t, l.Term, last, "terms in increasing order: %v", o.seen)
			last = l.Term
		case l.Term > 0:
			assert.Greater(o.t, l.Term, last, "terms in increasing order: %v", o.seen)
			last = l.Term
		default:
			assert.Empty(o.t, l.Value)
		}
		if l.Err == nil {
			told, blind = l, false
		}
		if i > 0 {
			assert.NotEqual(o.t, o.seen[i-1], l, "a change told twice: %v", o.seen)
		}
	}
	return append([]Leadership(nil), o.seen...)
}

// latest returns the latest change o saw, and when.
func (o *observed) latest() (Leadership, time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return Leadership{}, time.Time{}, false
	}
	return o.seen[len(o.seen)-1], o.at[len(o.at)-1], true
}

// waitFor waits until o's latest change is l, and returns when it came.
func (o *observed) waitFor(l Leadership, d time.Duration) time.Time {
	o.t.Helper()
	var at time.Time
	eventually(o.t, d, fmt.Sprintf("the observer to see %+v", l), func() bool {
		got, when, ok := o.latest()
		at = when
		return ok && got == l
	})
	return at
}

func TestElectionBasics(t *testing.T) {
	forEachEnv(t, func(t *testing.T, env *testEnv) {
		bg := context.Background()
		c1, c2, c3 := env.client(t), env.client(t), env.client(t)
		e1, e2 := c1.Election("elect:basic"), c2.Election("elect:basic")

		l, err := e1.Leader(bg)
		require.NoError(t, err)
		assert.Equal(t, Leadership{}, l, "nobody leads")
		octx, stop := context.WithCancel(bg)
		defer stop()
		o := observe(t, c3.Election("elect:basic"), octx)
		o.waitFor(Leadership{}, 2*time.Second)

		lctx1, err := e1.Campaign(bg, "node-1")
		require.NoError(t, err)
		t1, ok := e1.Term(lctx1)
		require.True(t, ok)
		assert.Positive(t, t1)
		l, err = e2.Leader(bg)
		require.NoError(t, err)
		assert.Equal(t, Leadership{Value: "node-1", Term: t1}, l)
		o.waitFor(l, time.Second)
		_, ok = e1.Term(bg)
		assert.False(t, ok)

		// A second Campaign through the leadership is refused.
		_, err = e1.Campaign(lctx1, "node-1")
		assert.ErrorIs(t, err, ErrInvalid)
		assert.NoError(t, lctx1.Err())

		// Another candidate waits, and leads as soon as the leader
		// resigns, with a greater term; the old leadership's context
		// is done by then.
		type won struct {
			ctx context.Context
			err error
			old error
		}
		got := make(chan won, 1)
		go func() {
			lctx, err := e2.Campaign(bg, "node 2")
			got <- won{lctx, err, lctx1.Err()}
		}()
		eventually(t, 2*time.Second, "the candidate to wait", func() bool { return localWaiters(c2, e2.channel) == 1 })
		select {
		case <-got:
			t.Fatal("two leaders")
		case <-time.After(50 * time.Millisecond):
		}
		lag := watchLag(t)
		start := time.Now()
		require.NoError(t, e1.Resign(lctx1))
		assert.ErrorIs(t, lctx1.Err(), context.Canceled)
		w := <-got
		require.NoError(t, w.err)
		assert.Less(t, time.Since(start), time.Second+lag.Slack(),
			"woken by the resignation, not a lease (the machine's worst delay meanwhile: %v)", lag.Worst())
		assert.Error(t, w.old, "the old leader was told first")
		t2, _ := e2.Term(w.ctx)
		assert.Greater(t, t2, t1)
		o.waitFor(Leadership{Value: "node 2", Term: t2}, time.Second)
		assert.ErrorIs(t, e1.Resign(lctx1), ErrNotHeld)
		assert.ErrorIs(t, e1.Resign(bg), ErrNotHeld)
		assert.ErrorIs(t, e2.Resign(lctx1), ErrNotHeld)

		// The campaign's context ends: so does the leadership, and
		// nobody leads.
		ctx, cancel := context.WithCancel(bg)
		require.NoError(t, e2.Resign(w.ctx))
		o.waitFor(Leadership{}, time.Second)
		lctx, err := e1.Campaign(ctx, "node-1")
		require.NoError(t, err)
		t3, _ := e1.Term(lctx)
		assert.Greater(t, t3, t2)
		o.waitFor(Leadership{Value: "node-1", Term: t3}, time.Second)
		cancel()
		<-lctx.Done()
		o.waitFor(Leadership{}, time.Second)
		l, err = e2.Leader(bg)
		require.NoError(t, err)
		assert.Equal(t, Leadership{}, l)
		assert.NoError(t, e1.Resign(lctx), "the leadership ended with its context")

		// A Resign that finds the leadership gone from Redis (deleted
		// behind its back, before its deadline) tells the leader it was
		// lost, and says that nobody leads.
		lctx, err = e1.Campaign(bg, "node-1")
		require.NoError(t, err)
		t4, _ := e1.Term(lctx)
		o.waitFor(Leadership{Value: "node-1", Term: t4}, time.Second)
		require.NoError(t, env.rdb(t).Del(bg, "elect:basic").Err())
		assert.ErrorIs(t, e1.Resign(lctx), ErrLeaseLost)
		o.waitFor(Leadership{}, time.Second) // the resignation said so

		stop()
		<-o.done
		seen := o.check()
		assert.Equal(t, []Leadership{{}, {Value: "node-1", Term: t1}, {}, {Value: "node 2", Term: t2}, {}, {Value: "node-1", Term: t3}, {}, {Value: "node-1", Term: t4}, {}}, seen)
		assert.Equal(t, []string{"{elect:basic}:elect-term:elect:basic"}, env.keys(t), "only the term counter is left")
	})
}

func TestElectionInvalid(t *testing.T) {
	env := miniEnv(t)
	c := env.client(t)
	bg := context.Background()
	for name, e := range map[string]*Election{
		"an empty name":       c.Election(""),
		"an untaggable name":  c.Election("a}b"),
		"a bad lease":         c.Election("e", WithLease(0)),
		"a companion key":     c.Election(fenceKey("x")),
		"a nil Client":        (*Client)(nil).Election("e"),
		"a nil Election":      nil,
		"a zero Election":     {},
		"a term counter name": c.Election("{e}:elect-term:e"),
	} {
		_, err := e.Campaign(bg, "v")
		assert.ErrorIs(t, err, ErrInvalid, name)
		assert.ErrorIs(t, e.Resign(bg), ErrInvalid, name)
		_, err = e.Leader(bg)
		assert.ErrorIs(t, err, ErrInvalid, name)
		_, open := <-e.Observe(bg)
		assert.False(t, open, name)
		_, ok := e.Term(bg)
		assert.False(t, ok, name)
	}
	assert.Empty(t, (*Election)(nil).Name())
	assert.Empty(t, (*MultiLock)(nil).Names())
	e := c.Election("e")
	_, err := e.Campaign(nil, "v") //nolint:staticcheck // refused
	assert.ErrorIs(t, err, ErrInvalid)
	_, open := <-e.Observe(nil) //nolint:staticcheck // refused
	assert.False(t, open)
	assert.Empty(t, env.keys(t))

	// A closed Client.
	require.NoError(t, c.Close())
	_, err = e.Campaign(bg, "v")
	assert.ErrorIs(t, err, ErrClosed)
	_, open = <-e.Observe(bg)
	assert.False(t, open)
}

// observeGoroutines counts the observers' goroutines.
func observeGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "redisync.(*Election).observe(")
}

// An observer ends, and closes its channel, when its context ends or its
// Client closes; a leader's context ends with Close.
func TestElectionObserveEnds(t *testing.T) {
	env := realEnv(t)
	bg := context.Background()
	c := env.client(t)
	e := c.Election("elect:ends")
	before := observeGoroutines()
	ctx, cancel := context.WithCancel(bg)
	ch1 := e.Observe(ctx)
	ch2 := e.Observe(bg)
	assert.Equal(t, Leadership{}, <-ch1)
	assert.Equal(t, Leadership{}, <-ch2)
	lctx, err := e.Campaign(bg, "x")
	require.NoError(t, err)
	term, _ := e.Term(lctx)
	assert.Equal(t, Leadership{Value: "x", Term: term}, <-ch1)
	cancel()
	for range ch1 {
	}
	eventually(t, time.Second, "the observer to end", func() bool { return observeGoroutines() == before+1 })
	require.NoError(t, c.Close())
	assert.ErrorIs(t, context.Cause(lctx), ErrClosed)
	for range ch2 {
	}
	assert.Equal(t, before, observeGoroutines())
}

// electionRun has candidates on several Clients campaign on one election,
// again and again, each leading for a moment and then resigning or
// letting its campaign's context end, while observers on other Clients
// watch. It fails if two leaderships' contexts are live at once, if a
// leader's term is not greater than every earlier leader's, or if an
// observer breaks Observe's promises. kill, if not nil, runs in the
// background meanwhile.
func electionRun(t *testing.T, client func(opts ...Option) *Client, name string, run time.Duration, kill func(ctx context.Context)) {
	const clients, perClient, observers = 3, 3, 2
	const lease = time.Second
	bg := context.Background()
	octx, stopObs := context.WithCancel(bg)
	defer stopObs()
	var obs []*observed
	for range observers {
		obs = append(obs, observe(t, client().Election(name), octx))
	}
	ctx, cancel := context.WithTimeout(bg, run)
	defer cancel()
	var mu sync.Mutex
	live := map[context.Context]int64{} // leaderships' contexts, by term
	var wins []Leadership
	var ended time.Time
	var gaps []time.Duration // from a leadership's end to the next win
	var wg sync.WaitGroup
	for i := range clients {
		c := client(WithWatchdogTimeout(lease))
		for j := range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				e := c.Election(name)
				value := fmt.Sprintf("c%d-%d", i, j)
				for n := 0; ctx.Err() == nil; n++ {
					cctx, stop := context.WithCancel(ctx)
					lctx, err := e.Campaign(cctx, value)
					if err != nil {
						stop()
						continue // the run ended
					}
					term, _ := e.Term(lctx)
					mu.Lock()
					for other, ot := range live {
						if other.Err() == nil {
							t.Errorf("two leaders: term %d won while term %d's context is live", term, ot)
						}
					}
					if len(wins) > 0 && term <= wins[len(wins)-1].Term {
						t.Errorf("term %d after term %d", term, wins[len(wins)-1].Term)
					}
					if !ended.IsZero() {
						gaps = append(gaps, time.Since(ended))
					}
					live[lctx] = term
					wins = append(wins, Leadership{Value: value, Term: term})
					mu.Unlock()
					time.Sleep(time.Duration(n%3) * time.Millisecond)
					mu.Lock()
					delete(live, lctx)
					ended = time.Now()
					mu.Unlock()
					if n%2 == 0 {
						assert.NoError(t, e.Resign(lctx))
					} else {
						stop() // the campaign's context ends: so does the leadership
						<-lctx.Done()
					}
					stop()
				}
			}()
		}
	}
	if kill != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kill(ctx)
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	for _, g := range gaps {
		worst = max(worst, g)
	}
	t.Logf("%d leaderships in %v; longest time without a leader between two: %v", len(wins), run, worst)
	require.NotEmpty(t, wins)
	// Every observer ends up seeing that nobody leads, and saw the
	// leaders in the order they led, each at most once.
	for _, o := range obs {
		o.waitFor(Leadership{}, lease)
	}
	stopObs()
	index := map[int64]int{}
	for k, w := range wins {
		index[w.Term] = k
	}
	for i, o := range obs {
		<-o.done
		seen := o.check()
		k, n, unknown := -1, 0, 0
		for _, l := range seen {
			if l.Term == 0 {
				continue
			}
			n++
			at, ok := index[l.Term]
			if !ok {
				// A Campaign that won in Redis as its context ended
				// (the run's end): given back, never returned.
				unknown++
				continue
			}
			assert.Equal(t, wins[at], l, "observer %d", i)
			assert.Greater(t, at, k, "observer %d saw %v out of order", i, l)
			k = at
		}
		assert.LessOrEqual(t, unknown, clients*perClient, "observer %d saw leaders nobody won", i)
		t.Logf("observer %d saw %d of the %d leaderships (and %d won as their campaigns ended)", i, n-unknown, len(wins), unknown)
	}
}

// Several candidates on several Clients, and observers on others.
func TestElectionManyCandidates(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	run := 3 * time.Second
	if testing.Short() {
		run = time.Second
	}
	t.Run("redis", func(t *testing.T) {
		e := realEnv(t)
		electionRun(t, func(opts ...Option) *Client { return e.client(t, opts...) }, "elect:many", run, nil)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistestCluster(t)
		electionRun(t, func(opts ...Option) *Client { return newClient(t, cl.Client(t), opts...) }, "elect:many", run, nil)
	})
}

// The same while the subscription connections are killed again and again
// (CLIENT KILL TYPE pubsub): no promise breaks, and observers and
// candidates still hear of every change soon after.
func TestElectionPubSubKilled(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	e := realEnv(t)
	admin := e.rdb(t)
	run := 4 * time.Second
	if testing.Short() {
		run = 2 * time.Second
	}
	kills := 0
	electionRun(t, func(opts ...Option) *Client { return e.client(t, opts...) }, "elect:kill", run, func(ctx context.Context) {
		for ctx.Err() == nil {
			time.Sleep(time.Duration(100+kills*37%200) * time.Millisecond)
			if n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "pubsub").Result(); err == nil && n > 0 {
				kills++
			}
		}
	})
	t.Logf("%d kills", kills)
}
