package redisync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/keys"
)

// perName is a resource guarded per name: it refuses a write whose token
// is lower than the highest it has seen for that name, whoever wrote.
type perName map[string]int64

func (r perName) write(name string, token int64) bool {
	if token < r[name] {
		return false
	}
	r[name] = token
	return true
}

// fencedMultiRounds takes, in turn, a fenced MultiLock of names and fenced
// Mutexes of each name, from two Clients, and checks that each holder's
// tokens are strictly above every earlier token of the same name, from
// either kind, and that the resource takes its writes. restart, if not
// nil, runs between rounds (Redis loses its data).
func fencedMultiRounds(t *testing.T, c1, c2 *Client, names []string, rounds int, restart func(round int)) {
	bg := context.Background()
	last := map[string]int64{}
	res := perName{}
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	for i := range rounds {
		if restart != nil {
			restart(i)
		}
		c := []*Client{c1, c2}[i%2]
		if i%3 != 2 {
			m := c.MultiLock(names, WithFencing())
			lctx, err := m.Lock(ctx)
			require.NoError(t, err, "round %d", i)
			for _, name := range names {
				tok, ok := m.Token(lctx, name)
				require.True(t, ok, "round %d: %s", i, name)
				assert.Greater(t, tok, last[name], "round %d (MultiLock): %s", i, name)
				assert.True(t, res.write(name, tok), "round %d (MultiLock): %s", i, name)
				last[name] = tok
			}
			require.NoError(t, m.Unlock(lctx))
			continue
		}
		for _, name := range names {
			m := c.Mutex(name, WithFencing())
			lctx, err := m.Lock(ctx)
			require.NoError(t, err, "round %d", i)
			tok, ok := m.Token(lctx)
			require.True(t, ok)
			assert.Greater(t, tok, last[name], "round %d (Mutex): %s", i, name)
			assert.True(t, res.write(name, tok), "round %d (Mutex): %s", i, name)
			last[name] = tok
			require.NoError(t, m.Unlock(lctx))
		}
	}
}

// A fenced MultiLock's token for each name comes from the counter, and the
// rule, of a fenced Mutex of that name: interleaved with fenced Mutexes
// of the same names, tokens strictly increase per name, and across Redis
// restarts without data too. A stale holder of either kind is refused by
// a resource guarded per name once a holder of the other kind wrote.
func TestMultiLockFencing(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	c1, c2 := e.client(t), e.client(t)
	names := []string{"mf:a", "mf:b", "{mf}:c", "{mf}:d"}
	fencedMultiRounds(t, c1, c2, names, 9, func(i int) {
		if i == 4 {
			e.srv.Restart(t) // every key lost, the counters too
		}
	})

	// A stale MultiLock holder (its hold lost with Redis's data) is
	// refused by the resource once a Mutex of one of its names wrote.
	res := perName{}
	m := c1.MultiLock(names, WithFencing())
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	stale, _ := m.Token(lctx, "mf:b")
	require.True(t, res.write("mf:b", stale))
	e.srv.Restart(t)
	wctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	mu := c2.Mutex("mf:b", WithFencing())
	mctx, err := mu.Lock(wctx)
	require.NoError(t, err)
	tok, _ := mu.Token(mctx)
	assert.Greater(t, tok, stale)
	assert.True(t, res.write("mf:b", tok))
	assert.False(t, res.write("mf:b", stale), "the stale MultiLock holder is refused")
	_ = m.Unlock(lctx) // its hold was lost; Unlock may not know yet
	// And the other way round: a stale Mutex holder, then a MultiLock.
	e.srv.Restart(t)
	lctx, err = c1.MultiLock(names, WithFencing()).Lock(wctx)
	require.NoError(t, err)
	tok2, _ := m.Token(lctx, "mf:b")
	assert.Greater(t, tok2, tok)
	assert.True(t, res.write("mf:b", tok2))
	assert.False(t, res.write("mf:b", tok), "the stale Mutex holder is refused")
	require.NoError(t, m.Unlock(lctx))
	_ = mu.Unlock(mctx)
}

// What Token says, and what a fenced MultiLock refuses.
func TestMultiLockFencingContract(t *testing.T) {
	t.Parallel()
	e := realEnv(t)
	bg := context.Background()
	c := e.client(t)
	rdb := e.rdb(t)
	names := []string{"mfc:a", "mfc:b"}
	m := c.MultiLock(names, WithFencing())
	lctx, err := m.Lock(bg)
	require.NoError(t, err)
	ta, ok := m.Token(lctx, "mfc:a")
	require.True(t, ok)
	tb, ok := m.Token(lctx, "mfc:b")
	require.True(t, ok)
	for _, n := range names {
		v, _ := fenceCounter(t, rdb, n)
		assert.Equal(t, map[string]int64{"mfc:a": ta, "mfc:b": tb}[n], v, "the counter of %s is at its token", n)
	}
	_, ok = m.Token(lctx, "mfc:other")
	assert.False(t, ok, "not one of its names")
	_, ok = m.Token(bg, "mfc:a")
	assert.False(t, ok, "no hold")
	_, ok = c.MultiLock(names).Token(lctx, "mfc:a")
	assert.True(t, ok, "the names' hold, through any handle of them")

	// A re-entry shares the tokens; a handle without fencing cannot
	// re-enter a fenced hold.
	rctx, err := m.Lock(lctx)
	require.NoError(t, err)
	got, _ := m.Token(rctx, "mfc:a")
	assert.Equal(t, ta, got)
	_, err = c.MultiLock(names).Lock(lctx)
	assert.ErrorIs(t, err, ErrInvalid)
	require.NoError(t, m.Unlock(rctx))
	require.NoError(t, m.Unlock(lctx))
	got, _ = m.Token(lctx, "mfc:b")
	assert.Equal(t, tb, got, "the token stays the hold's after it ends")

	// An unfenced MultiLock has no token, and touches no counter.
	uctx, err := c.MultiLock([]string{"mfc:u"}).Lock(bg)
	require.NoError(t, err)
	_, ok = c.MultiLock([]string{"mfc:u"}).Token(uctx, "mfc:u")
	assert.False(t, ok)
	assert.NotContains(t, e.keys(t), keys.Companion("mfc:u", "fence"))
	require.NoError(t, c.MultiLock([]string{"mfc:u"}).Unlock(uctx))

	// A counter of another type: refused, nothing written.
	require.NoError(t, rdb.HSet(bg, keys.Companion("mfc:y", "fence"), "x", 1).Err())
	_, err = c.MultiLock([]string{"mfc:x", "mfc:y"}, WithFencing()).TryLock(bg)
	require.Error(t, err)
	assert.ErrorContains(t, err, "WRONGTYPE")
	n, err := rdb.Exists(bg, "mfc:x", "mfc:y", keys.Companion("mfc:x", "fence")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing written")

	// A name that cannot have a counter is refused.
	_, err = c.MultiLock([]string{"mfc:z", "a}b"}, WithFencing()).TryLock(bg)
	assert.ErrorIs(t, err, ErrInvalid)
}

// On a Cluster, names in several slots: each slot's script gives its
// names' tokens, from their counters.
func TestMultiLockFencingOnCluster(t *testing.T) {
	cl := sharedCluster(t)
	cc := cl.Client(t)
	names := clusterMultiNames(t, cc, 4)
	fencedMultiRounds(t, newClient(t, cl.Client(t)), newClient(t, cl.Client(t)), names, 6, nil)
}
