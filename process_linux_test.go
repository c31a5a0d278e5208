package redisync

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// Leaders and MultiLock holders in processes of their own (this test
// binary, re-run as TestHelperProcessChild), killed (SIGKILL) or stopped
// (SIGSTOP) past their lease.

const (
	processChildEnv = "REDISYNC_PROCESS_CHILD" // the Redis address
	processModeEnv  = "REDISYNC_PROCESS_MODE"  // "campaign <value>" or "multilock <name> <name>..."
	processLease    = 500 * time.Millisecond
)

// processChild starts TestHelperProcessChild on the Redis at addr in mode.
func processChild(t *testing.T, addr, mode string) *child {
	return startChild(t, "TestHelperProcessChild", processChildEnv+"="+addr, processModeEnv+"="+mode)
}

// child is a child process of a test: this test binary, re-run as one
// TestHelper… test, and what it said (its lines "child: …" on stdout).
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	pid    int
	lines  chan string
	said   []string
	stderr lockedBuffer
}

// lockedBuffer is a child's stderr: written by exec's goroutine, read by a
// failing test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startChild starts this test binary as the test helper (its name), with
// env added to its environment; the test's cleanup kills it.
func startChild(t *testing.T, helper string, env ...string) *child {
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	ch := &child{t: t, cmd: cmd, lines: make(chan string, 64)}
	cmd.Stderr = &ch.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ch.pid = cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(ch.pid, syscall.SIGKILL) // a no-op once it has exited
		ch.end()
	})
	go func() {
		defer close(ch.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "child: "); ok {
				ch.lines <- l
			}
		}
	}()
	return ch
}

// end waits until the child has exited (its stdout closed), keeping what
// it said.
func (ch *child) end() {
	for l := range ch.lines {
		ch.said = append(ch.said, l)
	}
	_ = ch.cmd.Wait()
}

// next returns the next line the child says that begins with prefix. If
// none comes in 30s, the child is made to dump its goroutines (SIGQUIT)
// and the test fails with everything it said.
func (ch *child) next(prefix string) string {
	t := ch.t
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-ch.lines:
			if !ok {
				t.Fatalf("the child ended before saying %q; it said %q; stderr:\n%s", prefix, ch.said, ch.stderr.String())
			}
			ch.said = append(ch.said, l)
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			_ = syscall.Kill(ch.pid, syscall.SIGQUIT) // its goroutines, on stderr
			ch.end()
			t.Fatalf("the child did not say %q in 30s; it said %q; stderr:\n%s", prefix, ch.said, ch.stderr.String())
		}
	}
}

func (ch *child) signal(sig syscall.Signal) { require.NoError(ch.t, syscall.Kill(ch.pid, sig)) }

// childClient is a child process's Client, with lease as its watchdog
// timeout, on the Redis whose address is in the environment variable env,
// and its go-redis client; both are closed with the test. Without env the
// test is skipped: it runs only as the child of parent.
func childClient(t *testing.T, env, parent string, lease time.Duration) (*Client, *redis.Client) {
	addr := os.Getenv(env)
	if addr == "" {
		t.Skip("the child process of " + parent)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New(rdb, WithWatchdogTimeout(lease))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb
}

// childSays prints a line for the parent's child.next.
func childSays(format string, args ...any) { fmt.Printf("child: "+format+"\n", args...) }

// untilStopped is a child's work that does not look at its hold, during
// which the parent stops it (SIGSTOP): it says "past its last check" and
// returns once the (monotonic) clock jumped by more than over between two
// consecutive looks, with the jump (the stop may come at once, and
// anywhere in the loop, not only during its sleep). After a minute with no
// such jump it says "never stopped" and returns false.
func untilStopped(over time.Duration) (time.Duration, bool) {
	last := time.Now()
	childSays("past its last check")
	for limit := last.Add(time.Minute); ; {
		time.Sleep(10 * time.Millisecond)
		now := time.Now()
		if gap := now.Sub(last); gap > over {
			return gap, true
		}
		last = now
		if now.After(limit) {
			childSays("never stopped")
			return 0, false
		}
	}
}

// The leader's process is killed (-9), then another is stopped past its
// lease and continued: each time a candidate of another process leads
// within a lease or so, with a greater term; the stopped leader's
// context is done as soon as it runs again, its Resign says the
// leadership was lost, and observers on other Clients see every leader
// in order, never one twice.
func TestElectionLeaderProcess(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	srv := redistest.Start(t)
	bg := context.Background()
	const name = "elect:process"
	octx, stop := context.WithCancel(bg)
	defer stop()
	var obs []*observed
	for range 2 {
		// Their handles have the leaders' lease: they read the election
		// again at least every third of it.
		obs = append(obs, observe(t, newClient(t, srv.Client(t), WithWatchdogTimeout(processLease)).Election(name), octx))
	}
	e := newClient(t, srv.Client(t), WithWatchdogTimeout(processLease)).Election(name)

	// kill -9
	a := processChild(t, srv.Addr(), "campaign child-a")
	var ta int64
	_, err := fmt.Sscanf(a.next("leading "), "leading %d", &ta)
	require.NoError(t, err)
	for _, o := range obs {
		o.waitFor(Leadership{Value: "child-a", Term: ta}, 2*time.Second)
	}
	got := make(chan context.Context, 1)
	go func() {
		lctx, err := e.Campaign(bg, "parent-1")
		assert.NoError(t, err)
		got <- lctx
	}()
	time.Sleep(100 * time.Millisecond)
	lag := watchLag(t)
	a.signal(syscall.SIGKILL)
	killed := time.Now()
	var lctx context.Context
	select {
	case lctx = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("nobody leads after the leader was killed")
	}
	took := time.Since(killed)
	t.Logf("a candidate led %v after the leader's process was killed (lease %v)", took.Round(time.Millisecond), processLease)
	assert.Less(t, took, processLease+time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	t1, _ := e.Term(lctx)
	assert.Greater(t, t1, ta)
	for _, o := range obs {
		o.waitFor(Leadership{Value: "parent-1", Term: t1}, time.Second)
	}
	require.NoError(t, e.Resign(lctx))

	// SIGSTOP past the lease, then SIGCONT.
	b := processChild(t, srv.Addr(), "campaign child-b")
	var tb int64
	_, err = fmt.Sscanf(b.next("leading "), "leading %d", &tb)
	require.NoError(t, err)
	assert.Greater(t, tb, t1)
	// The observers saw it lead (or they could say nobody leads below,
	// from before it did).
	for _, o := range obs {
		o.waitFor(Leadership{Value: "child-b", Term: tb}, time.Second)
	}
	b.next("past its last check")
	b.signal(syscall.SIGSTOP)
	stopped := time.Now()
	// Its lease runs out in Redis, and nobody publishes anything: Leader
	// says nobody leads, and the observers, which read the election again
	// at least every third of their lease, say so too.
	for _, o := range obs {
		o.waitFor(Leadership{}, processLease+processLease/3+time.Second)
	}
	t.Logf("the observers saw that nobody leads %v after the leader's process was stopped", time.Since(stopped).Round(time.Millisecond))
	l, err := e.Leader(bg)
	require.NoError(t, err)
	assert.Equal(t, Leadership{}, l, "a leader whose lease ran out is not reported")
	wctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	lctx, err = e.Campaign(wctx, "parent-2")
	require.NoError(t, err, "the stopped leader's lease runs out")
	t.Logf("a candidate led %v after the leader's process was stopped", time.Since(stopped).Round(time.Millisecond))
	t2, _ := e.Term(lctx)
	assert.Greater(t, t2, tb)
	for _, o := range obs {
		o.waitFor(Leadership{Value: "parent-2", Term: t2}, time.Second)
	}
	time.Sleep(time.Until(stopped.Add(3 * processLease)))
	b.signal(syscall.SIGCONT)
	assert.Equal(t, "context at resume: live=false", b.next("context at resume: "), "the leadership's context tells as soon as the process runs")
	assert.Equal(t, "cause: lease lost", b.next("cause: "))
	assert.Equal(t, "resign: lease lost", b.next("resign: "), "its Resign says it did not lead throughout")
	assert.Equal(t, fmt.Sprintf("leader: parent-2 %d", t2), b.next("leader: "))
	b.next("done")
	l, err = e.Leader(bg)
	require.NoError(t, err)
	assert.Equal(t, Leadership{Value: "parent-2", Term: t2}, l, "the stopped leader's Resign freed nothing of its successor's")
	require.NoError(t, e.Resign(lctx))

	for _, o := range obs {
		o.waitFor(Leadership{}, time.Second)
	}
	stop()
	for _, o := range obs {
		<-o.done
		seen := o.check()
		t.Logf("an observer saw %v", seen)
		var leaders []Leadership
		for _, l := range seen {
			if l.Term > 0 {
				leaders = append(leaders, l)
			}
		}
		assert.Equal(t, []Leadership{{Value: "child-a", Term: ta}, {Value: "parent-1", Term: t1}, {Value: "child-b", Term: tb}, {Value: "parent-2", Term: t2}}, leaders)
	}
}

// A MultiLock holder's process is killed (-9): a MultiLock over some of
// its names and a Mutex of another get them within a lease or so.
func TestMultiLockHolderProcessKilled(t *testing.T) {
	srv := redistest.Start(t)
	bg := context.Background()
	ch := processChild(t, srv.Addr(), "multilock crash:a crash:b crash:c")
	ch.next("locked")
	c := newClient(t, srv.Client(t))
	type won struct {
		what string
		err  error
		at   time.Time
	}
	got := make(chan won, 2)
	go func() {
		m := c.MultiLock([]string{"crash:b", "crash:c", "crash:d"})
		lctx, err := m.Lock(bg)
		if err == nil {
			time.Sleep(10 * time.Millisecond)
			err = m.Unlock(lctx)
		}
		got <- won{"multilock", err, time.Now()}
	}()
	go func() {
		m := c.Mutex("crash:a")
		lctx, err := m.Lock(bg)
		if err == nil {
			err = m.Unlock(lctx)
		}
		got <- won{"mutex", err, time.Now()}
	}()
	time.Sleep(100 * time.Millisecond)
	lag := watchLag(t)
	ch.signal(syscall.SIGKILL)
	killed := time.Now()
	for range 2 {
		select {
		case w := <-got:
			require.NoError(t, w.err, w.what)
			t.Logf("the %s was taken %v after the holder was killed (lease %v)", w.what, w.at.Sub(killed).Round(time.Millisecond), processLease)
			assert.Less(t, w.at.Sub(killed), processLease+time.Second+lag.Slack(), "%s (the machine's worst delay meanwhile: %v)", w.what, lag.Worst())
		case <-time.After(10 * time.Second):
			t.Fatal("the killed holder's names did not come free")
		}
	}
}

// A process whose goroutines hand a Mutex to each other in memory is
// killed (-9) in the middle of the run: the lock comes free within a
// lease or so, as any killed holder's does (the one Redis owner field of
// the run is no longer renewed).
func TestCohortProcessKilledMidRun(t *testing.T) {
	srv := redistest.Start(t)
	ch := processChild(t, srv.Addr(), "cohort crash:cohort")
	ch.next("running")
	c := newClient(t, srv.Client(t))
	lag := watchLag(t)
	ch.signal(syscall.SIGKILL)
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lctx, err := c.Mutex("crash:cohort").Lock(ctx)
	require.NoError(t, err, "the killed run's lock did not come free")
	took := time.Since(killed)
	t.Logf("taken %v after the run's process was killed (lease %v)", took.Round(time.Millisecond), processLease)
	assert.Less(t, took, processLease+time.Second+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	require.NoError(t, c.Mutex("crash:cohort").Unlock(lctx))
}

// TestHelperProcessChild is the child process of the tests above (skipped
// unless one of them started it). It reports on stdout, each line
// prefixed "child: ".
func TestHelperProcessChild(t *testing.T) {
	c, _ := childClient(t, processChildEnv, "TestElectionLeaderProcess and TestMultiLockHolderProcessKilled", processLease)
	say := childSays
	bg := context.Background()
	mode := strings.Fields(os.Getenv(processModeEnv))
	if mode[0] == "cohort" {
		// Goroutines hand a Mutex to each other (in memory) until killed.
		m := c.Mutex(mode[1])
		var n atomic.Int64
		for range 4 {
			go func() {
				for {
					lctx, err := m.Lock(bg)
					if err != nil {
						continue
					}
					if n.Add(1) == 200 {
						say("running")
					}
					_ = m.Unlock(lctx)
				}
			}()
		}
		time.Sleep(time.Minute) // until killed
		return
	}
	if mode[0] == "multilock" {
		_, err := c.MultiLock(mode[1:]).Lock(bg)
		require.NoError(t, err)
		say("locked")
		time.Sleep(time.Minute) // until killed
		return
	}
	e := c.Election("elect:process")
	lctx, err := e.Campaign(bg, mode[1])
	require.NoError(t, err)
	term, _ := e.Term(lctx)
	say("leading %d", term)
	if lctx.Err() != nil {
		say("lost before its last check: %v", context.Cause(lctx))
		return
	}
	if _, ok := untilStopped(processLease * 3 / 2); !ok {
		return
	}
	say("context at resume: live=%v", lctx.Err() == nil)
	cause := "nil"
	if err := context.Cause(lctx); errors.Is(err, ErrLeaseLost) {
		cause = "lease lost"
	} else if err != nil {
		cause = err.Error()
	}
	say("cause: %s", cause)
	res := "nil"
	if err := e.Resign(lctx); errors.Is(err, ErrLeaseLost) && errors.Is(err, ErrNotHeld) {
		res = "lease lost"
	} else if err != nil {
		res = err.Error()
	}
	say("resign: %s", res)
	l, err := e.Leader(bg)
	require.NoError(t, err)
	say("leader: %s %d", l.Value, l.Term)
	say("done")
}
