package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An observer that cannot read the election (Redis paused) says so: once
// it has been unable to for longer than its lease, it sends the last
// leader it knew with Err set, once; when it reads again it sends a value
// without Err, though nothing changed; and it goes on reporting changes.
func TestElectionObserveBlind(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	const lease = 600 * time.Millisecond
	leader := e.client(t).Election("blind") // 30s: it keeps leading across the pause
	watcher := e.client(t, WithWatchdogTimeout(lease)).Election("blind")
	lctx, err := leader.Campaign(bg, "a")
	require.NoError(t, err)
	term, _ := leader.Term(lctx)

	octx, stop := context.WithCancel(bg)
	defer stop()
	o := observe(t, watcher, octx)
	o.waitFor(Leadership{Value: "a", Term: term}, 2*time.Second)

	paused := time.Now()
	e.srv.Pause()
	var blind Leadership
	var at time.Time
	eventually(t, lease+2*time.Second, "a value with Err while Redis is paused", func() bool {
		l, when, ok := o.latest()
		blind, at = l, when
		return ok && l.Err != nil
	})
	t.Logf("blind after %v: %v", at.Sub(paused), blind.Err)
	assert.Equal(t, "a", blind.Value, "the last known leader, with Err")
	assert.Equal(t, term, blind.Term)
	assert.Contains(t, blind.Err.Error(), `"blind"`, "Err names the election")
	// Its last read was at most a third of the lease before the pause.
	assert.GreaterOrEqual(t, at.Sub(paused), lease-lease/3-20*time.Millisecond, "not before a lease without a read")
	n := len(o.check())
	time.Sleep(lease)
	assert.Len(t, o.check(), n, "Err is sent once, not at every failed read")

	e.srv.Resume()
	o.waitFor(Leadership{Value: "a", Term: term}, 3*time.Second)
	require.NoError(t, lctx.Err(), "the leader kept its 30s lease")

	// It still reports changes.
	require.NoError(t, leader.Resign(lctx))
	o.waitFor(Leadership{}, 2*time.Second)
	stop()
	<-o.done
	o.check()
}

// An observer that cannot read the election from its start (Redis paused
// before Observe) reports Err with no leader known, then the state once it
// reads.
func TestElectionObserveBlindFromTheStart(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	const lease = 300 * time.Millisecond
	leader := e.client(t).Election("blind:start")
	watcher := e.client(t, WithWatchdogTimeout(lease)).Election("blind:start")
	lctx, err := leader.Campaign(bg, "a")
	require.NoError(t, err)
	term, _ := leader.Term(lctx)

	e.srv.Pause()
	octx, stop := context.WithCancel(bg)
	defer stop()
	o := observe(t, watcher, octx)
	eventually(t, lease+2*time.Second, "a value with Err", func() bool {
		l, _, ok := o.latest()
		return ok && l.Err != nil
	})
	l, _, _ := o.latest()
	assert.Equal(t, Leadership{Err: l.Err}, l, "no leader known yet")
	e.srv.Resume()
	o.waitFor(Leadership{Value: "a", Term: term}, 3*time.Second)
	stop()
	<-o.done
	o.check()
}
