package holds

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
)

// A hold on names in several Cluster slots (a MultiLock) gives back with
// one call per slot: a failover of any of those slots' masters, not only
// the first's, may lose its release there, and the healer sends it
// again.
func TestHealMultiSlotRecordOnAnySlotsFailover(t *testing.T) {
	e := newEnv(t)
	x, y := newLock("{x}multi", time.Minute), newLock("{y}multi", time.Minute)
	require.NotEqual(t, keys.Slot(x.key), keys.Slot(y.key))
	var moved atomic.Bool // y's slot served by another master
	e.m.cfg.Cluster = true
	e.m.cfg.Primaries = func(_ context.Context, ks []string) []Primary {
		out := make([]Primary, len(ks))
		for i, k := range ks {
			out[i].ID = "m" + k
			if keys.Slot(k) == keys.Slot(y.key) && moved.Load() {
				out[i].ID = "promoted"
			}
		}
		return out
	}
	const field = "test:multi"
	for _, l := range []*lock{x, y} {
		require.NoError(t, e.rdb.HSet(bg, l.key, field, 1).Err())
	}
	h := &lease.Hold{Ref: lease.Ref{Kind: "multi", Name: "m"}, Field: field, Lease: time.Minute,
		Release: []call{x.drop(field), y.drop(field)}}
	require.NoError(t, e.m.ReleaseAll(bg, h.Release))
	e.m.recorded(h, time.Now())
	time.Sleep(3 * HealEvery) // the healer has seen both masters

	// A failover of y's master lost the release there.
	require.NoError(t, e.rdb.HSet(bg, y.key, field, 1).Err())
	moved.Store(true)
	deadline := time.Now().Add(10 * HealEvery)
	for e.rdb.Exists(bg, y.key).Val() == 1 {
		require.True(t, time.Now().Before(deadline), "the release lost on y's new master was not sent again")
		time.Sleep(10 * time.Millisecond)
	}
}
