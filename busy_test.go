package redisync

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 43: a wait that ends while its lock is busy (its context's
// deadline, its cancellation, TryLockFor's bound) names the holder's
// Client and the lease left in its error, which still matches the
// context's error (or ErrNotAcquired); TryLock, which does not wait, reads
// nothing more and says nothing more. On every primitive, on miniredis and
// a real redis-server.
func TestWaitOnBusyLockNamesItsHolder(t *testing.T) {
	forEachEnvKind(t, func(t *testing.T, e *testEnv, k apiKind, name string) {
		bg := context.Background()
		holder, waiter := e.client(t), e.client(t)
		waiter.busyRead = 5 * time.Second // the read is what is checked, not its speed on a busy machine
		k.setup(t, holder, name)
		hctx, err := k.rival(t, holder, name).lock(bg)
		require.NoError(t, err)
		defer func() { _ = k.rival(t, holder, name).unlock(hctx) }()
		mine := k.mine(t, waiter, name)
		says := func(t *testing.T, err error) {
			t.Helper()
			t.Logf("%v", err)
			msg := err.Error()
			assert.Contains(t, msg, "held by client "+holder.ID(), "the error names the holder's Client")
			assert.Contains(t, msg, " left)", "the error says the lease left")
			if k.rivalUnits > 1 && k.mineUnits < k.capacity && k.name == "Semaphore" {
				assert.Contains(t, msg, "2 permits")
			}
			if strings.HasPrefix(k.name, "RWMutex") {
				assert.Contains(t, msg, "write, 1 hold")
			}
		}

		ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
		defer cancel()
		lctx, err := mine.lock(ctx)
		require.Error(t, err)
		assert.Nil(t, lctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, err, ctx.Err())
		says(t, err)

		cctx, ccancel := context.WithCancel(bg)
		time.AfterFunc(100*time.Millisecond, ccancel)
		_, err = mine.lock(cctx)
		require.Error(t, err)
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, cctx.Err())
		says(t, err)

		_, err = mine.tryFor(bg, 100*time.Millisecond)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrNotAcquired)
		assert.False(t, errors.Is(err, context.DeadlineExceeded), "the caller's context did not end: %v", err)
		says(t, err)

		_, err = mine.try(bg)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.NotContains(t, err.Error(), "held by", "TryLock does not wait, and reads nothing more")
	})
}

// The same for an Election's candidate: the error names the leader, its
// term and its lease left.
func TestCampaignOnLedElectionNamesTheLeader(t *testing.T) {
	forEachEnv(t, func(t *testing.T, e *testEnv) {
		bg := context.Background()
		leader := e.client(t).Election("busy-elect")
		lctx, err := leader.Campaign(bg, "node-a")
		require.NoError(t, err)
		term, _ := leader.Term(lctx)
		ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
		defer cancel()
		candidate := e.client(t)
		candidate.busyRead = 5 * time.Second // the read is what is checked, not its speed on a busy machine
		_, err = candidate.Election("busy-elect").Campaign(ctx, "node-b")
		require.Error(t, err)
		t.Logf("%v", err)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), `led by "node-a" (term `)
		assert.Contains(t, err.Error(), " left)")
		_, err = candidate.Election("busy-elect").TryCampaignFor(bg, "node-b", 100*time.Millisecond)
		require.ErrorIs(t, err, ErrNotAcquired)
		assert.Contains(t, err.Error(), `led by "node-a"`)
		assert.Greater(t, term, int64(0))
		require.NoError(t, leader.Resign(lctx))
	})
}

// busyText's forms: several holders (at most three named), read and write
// holds, a key with no expiry, a read that failed, no holder left.
func TestBusyText(t *testing.T) {
	hs := []Holder{
		{ClientID: "a", Count: 1, Write: true, Lease: 1500 * time.Millisecond},
		{ClientID: "b", Count: 2, Lease: -1},
		{ClientID: "c", Count: 1, Lease: time.Second},
		{ClientID: "d", Count: 1, Lease: time.Second},
		{ClientID: "e", Count: 1, Lease: time.Second},
	}
	assert.Equal(t, "held by client a (write, 1 hold, lease 1.5s left); client b (read, 2 holds, no lease: its key has no expiry); client c (read, 1 hold, lease 1s left); and 2 more",
		busyText(hs, nil, "hold", true))
	assert.Equal(t, "held by client b (2 permits, no lease: its key has no expiry)", busyText(hs[1:2], nil, "permit", false))
	assert.Equal(t, "no holder now: it was freed meanwhile", busyText(nil, nil, "hold", false))
	assert.Equal(t, "", busyText(nil, errors.New("redisync: boom"), "hold", false), "a read that failed adds nothing")
}
