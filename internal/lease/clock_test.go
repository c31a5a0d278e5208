package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// lead moves the wall clock's lead by d for the rest of the test: a
// suspend or a step forward for d > 0, a step back for d < 0.
func lead(t *testing.T, d time.Duration) {
	TestSuspend.Add(int64(d))
	t.Cleanup(func() { TestSuspend.Add(-int64(d)) })
}

// The holds' clock counts every rise of the lead from the lowest it was
// read at: a step back neither makes time go back nor hides a suspend
// that follows it, each time it happens; a step forward counts as time.
func TestClockCountsSuspendsAfterStepsBack(t *testing.T) {
	at := stamp(time.Now())
	lead(t, -10*time.Second)
	assert.Less(t, at.since(now()), int64(time.Second), "a step back counted as time")
	assert.GreaterOrEqual(t, at.since(now()), int64(0), "a step back turned the clock back")
	lead(t, 10*time.Second) // a suspend
	assert.GreaterOrEqual(t, at.since(now()), int64(10*time.Second), "the suspend after a step back")
	lead(t, -5*time.Second)
	now()
	lead(t, 5*time.Second) // another
	assert.GreaterOrEqual(t, at.since(now()), int64(15*time.Second), "the second suspend after a step back")
	lead(t, 2*time.Second) // a step forward
	assert.GreaterOrEqual(t, at.since(now()), int64(17*time.Second), "a step forward")
}

// A deadline set after a step back counts from then. (TestSuspend moves
// the lead of every reading converted after it, a past one's too: a
// suspend between a script's sending and its reply cannot be shown here.)
func TestStampAfterAStepBack(t *testing.T) {
	lead(t, -10*time.Second)
	at := stamp(time.Now())
	assert.Less(t, at.since(now()), int64(time.Second))
	lead(t, 4*time.Second)
	assert.GreaterOrEqual(t, at.since(now()), int64(4*time.Second))
	assert.True(t, Expired(time.Now().Add(-time.Millisecond)))
	assert.False(t, Expired(time.Now().Add(time.Second)))
}
