package redisync

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Redis restarts (its process stopped and started again, the data kept or
// not) while a Client's connections are idle: the first call after it
// goes on a connection the old process closed. Its bytes never reached
// the new process; the engine must tell that from a call written and
// unanswered (a connection the peer closed while idle is not written to,
// or a write that meets it is sent again), and the call succeeds. (Seen
// as "written, no reply (the connection failed before Redis answered):
// EOF" from TestSemaphoreWithPermitsSurvivesDataLoss's first Acquire
// after the restart, and at the end of TestChaos.)
func TestCallAfterRestartOnIdleConnectionIsSent(t *testing.T) {
	e := realEnv(t)
	bg := context.Background()
	c := e.client(t)
	m := c.Mutex("restart:idle")
	hctx, err := m.Lock(bg)
	require.NoError(t, err)
	require.NoError(t, m.Unlock(hctx))

	e.srv.Restart(t)
	for i := range 3 { // as many calls as connections the Client may have open
		hctx, err = m.TryLock(bg)
		require.NoError(t, err, "call %d after the restart", i)
		require.NoError(t, m.Unlock(hctx), "call %d after the restart", i)
	}
	locked, err := m.IsLocked(bg)
	require.NoError(t, err)
	assert.False(t, locked)
}
