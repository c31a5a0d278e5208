package holds

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/transport"
)

// A hold on names in several Cluster slots (a MultiLock) gives back with
// one call per slot: a failover of any of those slots' masters, not only
// the first's, may lose its release there, and the healer sends it
// again.
func TestHealMultiSlotRecordOnAnySlotsFailover(t *testing.T) {
	e := newEnv(t)
	x, y := newLock("{x}multi", time.Minute), newLock("{y}multi", time.Minute)
	require.NotEqual(t, keys.Slot(x.key), keys.Slot(y.key))
	var moved atomic.Bool     // y's slot served by another master
	e.m.cfg.Route = keys.Slot // a Cluster
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

// countLog counts the log records it is given.
type countLog struct{ n atomic.Int64 }

func (c *countLog) Enabled(context.Context, slog.Level) bool  { return true }
func (c *countLog) Handle(context.Context, slog.Record) error { c.n.Add(1); return nil }
func (c *countLog) WithAttrs([]slog.Attr) slog.Handler        { return c }
func (c *countLog) WithGroup(string) slog.Handler             { return c }

// A Cluster failover moves every slot of a master at once: the healer
// says so once per new primary, not once per slot its releases were in.
func TestHealLogsOncePerPrimary(t *testing.T) {
	e := newEnv(t)
	logs := &countLog{}
	e.m.log = slog.New(logs)
	var moved atomic.Bool
	e.m.cfg.Route = keys.Slot // a Cluster
	e.m.cfg.Primaries = func(_ context.Context, ks []string) []Primary {
		out := make([]Primary, len(ks))
		for i := range ks {
			out[i].ID = "old"
			if moved.Load() {
				out[i].ID = "promoted"
			}
		}
		return out
	}
	now := time.Now()
	for i := range 200 {
		l := newLock("{s"+strconv.Itoa(i)+"}k", time.Minute)
		h := &lease.Hold{Ref: lease.Ref{Kind: "test", Name: l.key}, Field: "test:" + strconv.Itoa(i), Lease: time.Minute}
		h.One = [2]call{{}, l.drop(h.Field)}
		h.Release = h.One[1:2:2]
		e.m.recorded(h, now)
	}
	time.Sleep(3 * HealEvery) // the healer has seen the primary
	before := logs.n.Load()
	moved.Store(true)
	time.Sleep(3 * HealEvery)
	require.Equal(t, int64(1), logs.n.Load()-before, "one line for the change of primary")
}

// Releases that cannot be sent again (here: their keys are of another
// type; in a failover, a primary that refuses writes for a moment) are
// reported in one line per round, not one per release.
func TestHealResendFailuresLogOnce(t *testing.T) {
	e := newEnv(t)
	logs := &countLog{}
	e.m.log = slog.New(logs)
	var moved atomic.Bool
	e.m.cfg.Primaries = func(_ context.Context, ks []string) []Primary {
		out := make([]Primary, len(ks))
		for i := range ks {
			out[i].ID = "old"
			if moved.Load() {
				out[i].ID = "promoted"
			}
		}
		return out
	}
	now := time.Now()
	for i := range 50 {
		l := newLock("bad"+strconv.Itoa(i), time.Minute)
		require.NoError(t, e.rdb.Set(bg, l.key, "x", time.Minute).Err())
		h := &lease.Hold{Ref: lease.Ref{Kind: "test", Name: l.key}, Field: "test:" + strconv.Itoa(i), Lease: time.Minute}
		h.One = [2]call{{}, l.drop(h.Field)}
		h.Release = h.One[1:2:2]
		e.m.recorded(h, now)
	}
	time.Sleep(3 * HealEvery) // the healer has seen the primary, and sent them once
	before := logs.n.Load()
	moved.Store(true)
	time.Sleep(3 * HealEvery)
	got := logs.n.Load() - before
	require.Positive(t, got, "the failures are reported")
	require.LessOrEqual(t, got, int64(2), "one line for the change, one for the failures")
}

// A Client closed a moment after a failover that lost its last release
// (before the healer's next round) still sends it again: as the Client
// closes, the healer sends again the releases made since a little before
// the last switch of their primary the transport was told, within
// Close's bound, instead of leaving the lock to the lease (the failover
// trial's runs once began with a lock held up for 27s by the previous
// run's Clients, closed 0.2s after a forced failover). A release made
// long before that switch is not sent again.
func TestCloseHealsAFailoverItJustMissed(t *testing.T) {
	e := newEnv(t)
	e.m.cfg.Primaries = func(_ context.Context, ks []string) []Primary {
		return make([]Primary, len(ks)) // the healer's rounds see no change
	}
	hold := func(key string, at time.Time) {
		l := newLock(key, time.Minute)
		field := "test:" + key
		require.NoError(t, e.rdb.HSet(bg, l.key, field, 1).Err())
		h := &lease.Hold{Ref: lease.Ref{Kind: "test", Name: l.key}, Field: field, Lease: time.Minute}
		h.One = [2]call{{}, l.drop(field)}
		h.Release = h.One[1:2:2]
		require.NoError(t, e.m.ReleaseAll(bg, h.Release))
		e.m.recorded(h, at)
	}
	hold("closeheal:old", time.Now().Add(-healHot-time.Second))
	time.Sleep(3 * HealEvery) // the healer's first round sends it again (it knew no primary), the next ones nothing
	hold("closeheal", time.Now())
	// The failover lost the releases.
	for _, k := range []string{"closeheal:old", "closeheal"} {
		require.NoError(t, e.rdb.HSet(bg, k, "test:"+k, 1).Err())
	}

	// The switch (to the server the test runs, from one that is gone) is
	// told; the Client closes before the healer's next round.
	id, err := transport.ReplID(bg, e.rdb)
	require.NoError(t, err)
	e.m.tr.Switched(transport.Switch{From: transport.Server{ReplID: "gone"}, To: transport.Server{ReplID: id}, Cause: "test"})
	start := time.Now()
	e.close()
	require.EqualValues(t, 0, e.rdb.Exists(bg, "closeheal").Val(), "the release the failover lost was left to the lease")
	require.EqualValues(t, 1, e.rdb.Exists(bg, "closeheal:old").Val(), "a release long before the switch was sent again")
	require.Less(t, time.Since(start), healLastFor+time.Second, "Close kept its bound")
}
