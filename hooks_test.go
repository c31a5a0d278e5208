package redisync

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WithHooks refuses a nil hook.
func TestWithHooksRefusesNil(t *testing.T) {
	e := miniEnv(t)
	_, err := New(e.rdb(t), WithHooks(nil))
	require.ErrorIs(t, err, ErrInvalid)
}

// New warns about the options of the redis client that redisync's own
// connections cannot run: OnConnect, Limiter.
func TestNewWarnsAboutOptionsItCannotRun(t *testing.T) {
	e := miniEnv(t)
	logs := newRecHandler()
	rdb := redis.NewClient(&redis.Options{Addr: e.addr, OnConnect: func(context.Context, *redis.Conn) error { return nil }})
	t.Cleanup(func() { _ = rdb.Close() })
	newClient(t, rdb, WithLogger(slog.New(logs)))
	warned := false
	for _, r := range logs.records() {
		warned = warned || strings.Contains(r.Message, "OnConnect")
	}
	assert.True(t, warned, "OnConnect: a warning")

	quiet := newRecHandler()
	newClient(t, e.rdb(t), WithLogger(slog.New(quiet)))
	for _, r := range quiet.records() {
		assert.NotContains(t, r.Message, "does not run", "no warning without those options")
	}
}
