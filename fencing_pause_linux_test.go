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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// The paused holder of issue 11, with a real process: a child (this test
// binary, re-run as TestHelperFencedChild) takes a fenced Mutex kept by the
// watchdog, checks its context one last time, and is stopped (SIGSTOP)
// past its lease. Meanwhile another holder takes the lock, with a higher
// token, and writes the resource. When the child is continued (SIGCONT),
// its code, already past its check, writes with its token at once: the
// resource rejects it. The child reports what it saw: its context (live or
// not at the moment it resumed, then done with cause ErrLeaseLost) and its
// write's fate.
func TestFencingPausedProcess(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	const (
		name     = "fence:paused"
		resource = "fence:paused:resource"
		stopped  = 2 * time.Second // the child's lease is fencedChildLease
	)
	srv := redistest.Start(t)
	bg := context.Background()

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFencedChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), fencedChildEnv+"="+srv.Addr())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := cmd.Process.Pid
	lines := make(chan string, 64)
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL) // a no-op once it has exited
		for range lines {                      // until its stdout closes
		}
		_ = cmd.Wait()
	})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "child: "); ok {
				lines <- l
			}
		}
	}()
	var said []string
	next := func(prefix string) string {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the child ended before saying %q; it said %q; stderr:\n%s", prefix, said, stderr.String())
				}
				said = append(said, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-timeout:
				_ = syscall.Kill(pid, syscall.SIGQUIT) // its goroutines, on stderr
				for range lines {
				}
				_ = cmd.Wait()
				t.Fatalf("the child did not say %q in 30s; it said %q; stderr:\n%s", prefix, said, stderr.String())
			}
		}
	}

	var childToken int64
	_, err = fmt.Sscanf(next("locked "), "locked %d", &childToken)
	require.NoError(t, err)
	next("past its last check")
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	stoppedAt := time.Now()

	// Another holder gets the lock once the stopped child's lease has run
	// out in Redis, with a higher token, and writes.
	c := newClient(t, srv.Client(t))
	m := c.Mutex(name, WithFencing())
	wctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	lctx, err := m.Lock(wctx)
	require.NoError(t, err, "the stopped child's lease runs out")
	tok, _ := m.Token(lctx)
	require.Greater(t, tok, childToken)
	ok, err := writeFenced(bg, srv.Client(t), resource, tok, "parent")
	require.NoError(t, err)
	require.True(t, ok)

	time.Sleep(time.Until(stoppedAt.Add(stopped)))
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))

	next("resumed")
	write := next("write ")
	atResume := next("context at resume: ")
	done := next("context: ")
	lost := next("lease lost: ")
	for range lines {
	}
	t.Logf("the child said:\n  %s", strings.Join(said, "\n  "))

	assert.Equal(t, "write rejected", write, "the late write from past the last check is refused by its token")
	assert.Equal(t, "context at resume: live=false", atResume, "the hold's context tells as soon as the process resumes (issue 19)")
	assert.Contains(t, done, "context: context canceled", "the hold's context is done on resume")
	assert.Equal(t, "lease lost: true", lost, "with cause ErrLeaseLost")
	v, err := srv.Client(t).HGet(bg, resource, "value").Result()
	require.NoError(t, err)
	assert.Equal(t, "parent", v)
	require.NoError(t, m.Unlock(lctx))
}

const (
	fencedChildEnv   = "REDISYNC_FENCED_CHILD"
	fencedChildLease = 500 * time.Millisecond
)

// TestHelperFencedChild is the child process of TestFencingPausedProcess
// (skipped unless that test started it). It reports on stdout, each line
// prefixed "child: ".
func TestHelperFencedChild(t *testing.T) {
	addr := os.Getenv(fencedChildEnv)
	if addr == "" {
		t.Skip("the child process of TestFencingPausedProcess")
	}
	say := func(format string, args ...any) { fmt.Printf("child: "+format+"\n", args...) }
	bg := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	c, err := New(rdb, WithWatchdogTimeout(fencedChildLease))
	require.NoError(t, err)
	defer c.Close()
	m := c.Mutex("fence:paused", WithFencing())
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	tok, _ := m.Token(lctx)
	say("locked %d", tok)

	if lctx.Err() != nil { // the last check
		say("lost before the write: %v", context.Cause(lctx))
		return
	}
	// Work that does not look at lctx, during which the process is stopped:
	// the stop shows as a jump of the (monotonic) clock, measured between
	// consecutive looks at it from before saying so (the stop may come at
	// once, and anywhere in the loop, not only during the Sleep).
	last := time.Now()
	say("past its last check")
	var gap time.Duration
	for limit := time.Now().Add(time.Minute); ; {
		time.Sleep(10 * time.Millisecond)
		now := time.Now()
		if gap = now.Sub(last); gap > time.Second {
			break
		}
		last = now
		if time.Now().After(limit) {
			say("never stopped")
			return
		}
	}
	resumed := time.Now()
	live := lctx.Err() == nil // recorded, not acted on
	ok, err := writeFenced(bg, rdb, "fence:paused:resource", tok, "child")
	say("resumed after a stop of %v", gap.Round(10*time.Millisecond))
	switch {
	case err != nil:
		say("write failed: %v", err)
	case ok:
		say("write accepted")
	default:
		say("write rejected")
	}
	say("context at resume: live=%v", live)
	select {
	case <-lctx.Done():
	case <-time.After(10 * time.Second):
	}
	say("context: %v, cause %v, %v after resuming", lctx.Err(), context.Cause(lctx), time.Since(resumed).Round(time.Millisecond))
	say("lease lost: %v", errors.Is(context.Cause(lctx), ErrLeaseLost))
}
