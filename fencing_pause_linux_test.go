package redisync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

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

	ch := startChild(t, "TestHelperFencedChild", fencedChildEnv+"="+srv.Addr())
	next := ch.next
	var childToken int64
	_, err := fmt.Sscanf(next("locked "), "locked %d", &childToken)
	require.NoError(t, err)
	next("past its last check")
	ch.signal(syscall.SIGSTOP)
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
	ch.signal(syscall.SIGCONT)

	next("resumed")
	write := next("write ")
	atResume := next("context at resume: ")
	done := next("context: ")
	lost := next("lease lost: ")
	ch.end()
	t.Logf("the child said:\n  %s", strings.Join(ch.said, "\n  "))

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
	c, rdb := childClient(t, fencedChildEnv, "TestFencingPausedProcess", fencedChildLease)
	say := childSays
	bg := context.Background()
	m := c.Mutex("fence:paused", WithFencing())
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	tok, _ := m.Token(lctx)
	say("locked %d", tok)

	if lctx.Err() != nil { // the last check
		say("lost before the write: %v", context.Cause(lctx))
		return
	}
	// Work that does not look at lctx, during which the process is stopped.
	gap, ok := untilStopped(time.Second)
	if !ok {
		return
	}
	resumed := time.Now()
	live := lctx.Err() == nil // recorded, not acted on
	ok, err = writeFenced(bg, rdb, "fence:paused:resource", tok, "child")
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
