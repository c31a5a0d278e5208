package lua

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

// These tests run the FIPS 140-only code path (digests learned from Redis)
// in the normal mode, where the digest a client computes is at hand to
// compare. internal/fipstest runs the library under GODEBUG=fips140=only.

// serverSHA returns a script that learns its digest from Redis, as every
// script does in FIPS 140-only mode, and the digest go-redis computes.
func serverSHA(t *testing.T, src string) (*Script, string) {
	t.Helper()
	s := newScript(t.Name()+".lua", src, true)
	require.Empty(t, s.Hash(), "no digest before Redis gives one")
	learning.after.Store(0) // no back-off left by another test
	return s, redis.NewScript(src).Hash()
}

// Unchanged in the normal mode: the digest is known at once, Pipe sends
// EVALSHA, and no script waits to learn anything.
func TestNormalMode(t *testing.T) {
	require.Equal(t, redis.NewScript(Lock.src).Hash(), Lock.Hash())
	require.False(t, Lock.serverSHA)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	p := c.Pipeline()
	require.Equal(t, "evalsha", Lock.Pipe(context.Background(), p, []string{"k"}).Name())
	require.Equal(t, "eval", Lock.PipeEval(context.Background(), p, []string{"k"}).Name())
	for _, s := range learning.scripts {
		require.True(t, s.serverSHA, "%s: a normal script waits to learn", s.name)
	}
}

func TestServerSHA(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	s, want := serverSHA(t, `return {KEYS[1], ARGV[1]}`)
	other, wantOther := serverSHA(t, `return 'other'`)

	// Before any Run: a pipeline sends the source.
	pipe := func(f func(context.Context, redis.Pipeliner, []string, ...any) *redis.Cmd) *redis.Cmd {
		t.Helper()
		var cmd *redis.Cmd
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = f(ctx, p, []string{"k"}, "a")
			return nil
		})
		return cmd
	}
	cmd := pipe(s.Pipe)
	require.Equal(t, "eval", cmd.Name())
	require.Equal(t, []any{"k", "a"}, cmd.Val())
	require.Empty(t, s.Hash(), "a pipeline learns nothing")

	// Run learns the digest from Redis, every other script's too.
	v, err := s.Run(ctx, rdb, []string{"k"}, "a").Result()
	require.NoError(t, err)
	require.Equal(t, []any{"k", "a"}, v)
	require.Equal(t, want, s.Hash())
	require.Equal(t, wantOther, other.Hash(), "learned with the first")
	require.Equal(t, []bool{true, true}, rdb.ScriptExists(ctx, want, wantOther).Val())

	cmd = pipe(s.Pipe)
	require.Equal(t, "evalsha", cmd.Name())
	require.Equal(t, want, cmd.Args()[1])
	require.Equal(t, []any{"k", "a"}, cmd.Val())

	// Redis loses its scripts: Run falls back to EVAL, Pipe answers
	// NOSCRIPT, PipeEval sends the source.
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.True(t, IsNoScript(pipe(s.Pipe).Err()))
	require.Equal(t, []any{"k", "a"}, pipe(s.PipeEval).Val())
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	v, err = s.Run(ctx, rdb, []string{"k"}, "a").Result()
	require.NoError(t, err)
	require.Equal(t, []any{"k", "a"}, v)
	require.Equal(t, want, s.Hash(), "a digest never changes")

	// faultproxy.RunsScript matches the script both ways once its digest
	// is known.
	c, h := hooked(t, srv)
	evalsha := h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(s.Script)})
	eval := h.OnCommand(faultproxy.CommandRule{Name: "eval", Args: faultproxy.RunsScript(s.Script)})
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.NoError(t, s.Run(ctx, c, []string{"k"}, "a").Err())
	require.Equal(t, 1, evalsha.Fired())
	require.Equal(t, 1, eval.Fired(), "NOSCRIPT, then EVAL")
}

func hooked(t *testing.T, srv *redistest.Server) (*redis.Client, *faultproxy.Hook) {
	c := srv.Client(t)
	h := faultproxy.NewHook()
	c.AddHook(h)
	return c, h
}

// A SCRIPT LOAD that fails costs one EVAL, and no other SCRIPT LOAD is sent
// for learnBackoff.
func TestServerSHALoadFails(t *testing.T) {
	ctx := context.Background()
	c, h := hooked(t, redistest.Start(t))
	s, want := serverSHA(t, `return 7`)
	load := h.OnCommand(faultproxy.CommandRule{Name: "script", Action: faultproxy.Fail(nil)})
	eval := h.OnCommand(faultproxy.CommandRule{Name: "eval"})
	for range 3 {
		require.EqualValues(t, 7, s.Run(ctx, c, nil).Val())
	}
	require.Equal(t, 1, load.Fired(), "one attempt, then none for a while")
	require.Equal(t, 3, eval.Fired())
	require.Empty(t, s.Hash())
	require.False(t, Learn(ctx, c), "backing off")
	require.Equal(t, 1, load.Fired())

	load.Remove()
	learning.after.Store(0) // the back-off is over
	require.EqualValues(t, 7, s.Run(ctx, c, nil).Val())
	require.Equal(t, want, s.Hash())
	require.Equal(t, 3, eval.Fired())
	require.True(t, Learn(ctx, c))
}

// On a Cluster, Run loads the scripts on the master of its first key: that
// is where it runs them.
func TestServerSHACluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := cl.Client(t)
	s, want := serverSHA(t, `return redis.call('incr', KEYS[1])`)
	for i := range 6 {
		key := fmt.Sprintf("key%d", i)
		require.EqualValues(t, 1, s.Run(ctx, cc, []string{key}).Val(), key)
	}
	require.Equal(t, want, s.Hash())
	// key0's master got it from SCRIPT LOAD, the others from the EVAL
	// after their NOSCRIPT.
	for i := range 6 {
		m, err := cc.MasterForKey(ctx, fmt.Sprintf("key%d", i))
		require.NoError(t, err)
		require.Equal(t, []bool{true}, m.ScriptExists(ctx, want).Val())
	}
}

// Goroutines that need a digest at once do not wait for each other: those
// that find a SCRIPT LOAD under way send EVAL.
func TestServerSHAConcurrent(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client(t)
	s, want := serverSHA(t, `return redis.call('incr', KEYS[1])`)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 10 {
				assert.NoError(t, s.Run(ctx, rdb, []string{"n"}).Err())
			}
		})
	}
	wg.Wait()
	n, err := rdb.Get(ctx, "n").Int()
	require.NoError(t, err)
	require.Equal(t, 160, n)
	require.Equal(t, want, s.Hash())
}
