package redisync

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 24: New took a *redis.Ring and the first Lock that had to wait
// panicked in the caller's goroutine (go-redis's Ring refuses a
// subscription with no channel). A Ring is refused by New, with an error
// that says why, and nothing panics.
func TestNewRefusesRing(t *testing.T) {
	e := realEnv(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": e.addr}})
	t.Cleanup(func() { _ = ring.Close() })
	c, err := New(ring)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Nil(t, c)
	assert.Contains(t, err.Error(), "Ring")
}

// Another implementation of UniversalClient (a wrapper, say) is refused
// too: redisync could not tell how it routes keys and channels.
func TestNewRefusesUnknownClientKinds(t *testing.T) {
	e := realEnv(t)
	w := wrapped{redis.NewClient(&redis.Options{Addr: e.addr})}
	t.Cleanup(func() { _ = w.Close() })
	_, err := New(w)
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), "redisync.wrapped")
}

type wrapped struct{ *redis.Client }

// A typed nil client is refused, not dereferenced.
func TestNewRefusesTypedNil(t *testing.T) {
	var single *redis.Client
	var cluster *redis.ClusterClient
	for _, rdb := range []redis.UniversalClient{single, cluster} {
		_, err := New(rdb)
		assert.ErrorIs(t, err, ErrInvalid)
	}
}
