package redisync

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const renewedChildEnv = "REDISYNC_RENEWED_CHILD"

// A holder with a 300ms renewed lease, on a Client whose watchdog timeout
// is the default 30s, is killed (-9): another Client takes the lock
// within about 300ms, not 30s.
//
// Not parallel: its holder's 300ms lease is rightly lost when a renewal is
// kept off the CPU that long, so it runs in the serial stage (see
// TestRenewedLeaseStaysHeld).
func TestRenewedLeaseHolderKilled(t *testing.T) {
	e := realEnv(t)
	ch := startChild(t, "TestHelperRenewedLeaseChild", renewedChildEnv+"="+e.addr)
	ch.next("locked")
	time.Sleep(time.Second) // renewed meanwhile
	c := e.client(t)
	m := c.Mutex("rl:killed")
	_, err := m.TryLock(context.Background())
	require.ErrorIs(t, err, ErrNotAcquired, "held past three leases")
	lag := watchLag(t)
	ch.signal(syscall.SIGKILL)
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lctx, err := m.Lock(ctx)
	require.NoError(t, err)
	took := time.Since(killed)
	t.Logf("taken %v after the holder was killed", took.Round(time.Millisecond))
	assert.Less(t, took, 300*time.Millisecond+500*time.Millisecond+lag.Slack(), "the machine's worst delay meanwhile: %v", lag.Worst())
	require.NoError(t, m.Unlock(lctx))
}

// TestHelperRenewedLeaseChild is TestRenewedLeaseHolderKilled's child.
func TestHelperRenewedLeaseChild(t *testing.T) {
	if os.Getenv(renewedChildEnv) == "" {
		t.Skip("the child process of TestRenewedLeaseHolderKilled")
	}
	c, _ := childClient(t, renewedChildEnv, "TestRenewedLeaseHolderKilled", DefaultWatchdogTimeout)
	lctx, err := c.Mutex("rl:killed", WithRenewedLease(300*time.Millisecond)).Lock(context.Background())
	require.NoError(t, err)
	childSays("locked")
	<-lctx.Done() // until killed
	childSays("lost: %v", errors.Unwrap(context.Cause(lctx)))
	time.Sleep(time.Minute)
}
