package holds

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/lua"
)

func releasedHold(name string, n int, d time.Duration) *lease.Hold {
	h := &lease.Hold{Ref: lease.Ref{Kind: "mutex", Name: name}, Field: "id:" + strconv.Itoa(n), Lease: d}
	h.One = [2]call{{}, {Script: lua.Drop, Keys: []string{name}, Args: []any{h.Field}}}
	h.Release = h.One[1:2:2]
	return h
}

// The record keeps the newest RecentMax releases, each for its lease, and
// copies their calls rather than keeping the holds.
func TestRecentIsBounded(t *testing.T) {
	var r recent
	now := time.Now()
	for i := range RecentMax + 10 {
		r.add(releasedHold("k"+strconv.Itoa(i%3), i, time.Minute), now)
	}
	assert.Len(t, r.ring, RecentMax)
	calls := r.calls(now, oneRoute, r.seq, func(int, uint64) bool { return true })
	require.Len(t, calls, RecentMax)
	for _, k := range calls {
		n, _ := strconv.Atoi(k.Args[0].(string)[3:])
		require.GreaterOrEqual(t, n, 10, "the oldest ten were dropped")
	}
	assert.Empty(t, r.calls(now.Add(time.Minute), oneRoute, r.seq, func(int, uint64) bool { return true }), "none outlives its lease")
	routes, _ := r.routes(now.Add(time.Minute), oneRoute)
	assert.Empty(t, routes)
}

// A waiter sends each release of its lock again once, and only when the
// holder's lease ends before the released hold's would have.
func TestRecentForWaiter(t *testing.T) {
	var r recent
	now := time.Now()
	h := releasedHold("w", 1, 30*time.Second)
	r.add(h, now)
	r.add(releasedHold("other", 2, 30*time.Second), now)
	assert.Empty(t, r.forWaiter(h.Ref, now, 31*time.Second), "a holder that came later")
	calls := r.forWaiter(h.Ref, now, 20*time.Second)
	require.Len(t, calls, 1)
	assert.Equal(t, h.Field, calls[0].Args[0])
	assert.Empty(t, r.forWaiter(h.Ref, now, 20*time.Second), "once")
}

// Recording a release is an append to a bounded ring: no allocation once
// it is full.
func BenchmarkRecentAdd(b *testing.B) {
	var r recent
	h := releasedHold("bench", 1, 30*time.Second)
	now := time.Now()
	for range RecentMax {
		r.add(h, now)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.add(h, now)
	}
}

// oneRoute is Config.Route where one primary serves every key.
func oneRoute(string) int { return 0 }
