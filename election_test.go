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
// strictly increase, and no change comes twice in a row.
func (o *observed) check() []Leadership {
	o.t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var last int64
	for i, l := range o.seen {
		if l.Term > 0 {
			assert.Greater(o.t, l.Term, last, "terms in increasing order: %v", o.seen)
			last = l.Term
		} else {
			assert.Empty(o.t, l.Value)
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
		start := time.Now()
		require.NoError(t, e1.Resign(lctx1))
		assert.ErrorIs(t, lctx1.Err(), context.Canceled)
		w := <-got
		require.NoError(t, w.err)
		assert.Less(t, time.Since(start), time.Second, "woken by the resignation, not a lease")
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

		// A Resign that finds the leadership gone says it was lost.
		lctx, err = e1.Campaign(bg, "node-1")
		require.NoError(t, err)
		t4, _ := e1.Term(lctx)
		o.waitFor(Leadership{Value: "node-1", Term: t4}, time.Second)
		require.NoError(t, env.rdb(t).Del(bg, "elect:basic").Err())
		err = e1.Resign(lctx)
		assert.ErrorIs(t, err, ErrNotHeld)
		assert.ErrorIs(t, err, ErrLeaseLost)
		o.waitFor(Leadership{}, time.Second) // the resignation said so

		stop()
		<-o.done
		seen := o.check()
		assert.Equal(t, []Leadership{{}, {"node-1", t1}, {}, {"node 2", t2}, {}, {"node-1", t3}, {}, {"node-1", t4}, {}}, seen)
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
		"WithWaiterTimeout":   c.Election("e", WithWaiterTimeout(time.Second)),
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
