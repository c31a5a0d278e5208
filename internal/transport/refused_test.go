package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// Refused tells a call that reached no server, or that a server refused
// unrun, from one that may have run: against real servers, the key the
// call would take says which it was.
func TestRefusedTellsWhatDidNotRun(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	replica := redistest.StartReplica(t, srv)
	bg := context.Background()
	{
		t.Run("connection refused", func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), DialTimeout: 200 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			tr := newT(t, rdb, Options{ReleaseTimeout: time.Second})
			r := tr.Do(bg, lockCall("rf:refused"), nil)
			require.Error(t, r.Err())
			assert.True(t, r.Refused(), "%v", r.Err())
			rs := tr.DoAll(bg, []Call{lockCall("rf:refused")})
			require.Error(t, rs[0].Err())
			assert.True(t, rs[0].Refused(), "%v", rs[0].Err())
		})
		t.Run("READONLY", func(t *testing.T) {
			rdb := replica.Client(t)
			tr := newT(t, rdb, Options{ReleaseTimeout: time.Second})
			r := tr.Do(bg, lockCall("rf:readonly"), nil)
			require.Error(t, r.Err())
			assert.True(t, r.Refused(), "%v", r.Err())
			n, err := rdb.Exists(bg, "rf:readonly").Result()
			require.NoError(t, err)
			assert.Zero(t, n)
		})
		t.Run("reset after the write", func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
			t.Cleanup(func() { _ = rdb.Close() })
			h := faultproxy.NewHook()
			tr := newT(t, rdb, Options{Hooks: []redis.Hook{h}})
			require.NoError(t, tr.Do(bg, lockCall("rf:warm"), nil).Err()) // the script cached, a connection made
			key := "rf:ran"
			h.OnWrite(faultproxy.WriteRule{Args: func(a []string) bool { return len(a) > 3 && a[3] == key }, Times: 1,
				Action: faultproxy.CloseAfterWrite()})
			r := tr.Do(bg, lockCall(key), nil)
			require.Error(t, r.Err())
			assert.False(t, r.Refused(), "%v", r.Err())
			n, err := srv.Client(t).Exists(bg, key).Result()
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "the call ran")
			assert.True(t, r.Written())
		})
	}
	t.Run("no Sentinel", func(t *testing.T) {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "none", SentinelAddrs: []string{closedAddr(t)},
			DialTimeout: 200 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		tr := newT(t, rdb, Options{ReleaseTimeout: time.Second})
		r := tr.Do(bg, lockCall("rf:sentinel"), nil)
		require.Error(t, r.Err())
		assert.True(t, r.Refused(), "%v", r.Err())
	})
	t.Run("a Sentinel that knows no primary", func(t *testing.T) {
		s := redistest.StartSentinel(t, srv, "known", 1)
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "unknown", SentinelAddrs: []string{s.Addr()},
			DialTimeout: 200 * time.Millisecond, DialerRetries: 1, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		tr := newT(t, rdb, Options{ReleaseTimeout: time.Second})
		r := tr.Do(bg, lockCall("rf:sentinel"), nil)
		require.Error(t, r.Err())
		assert.True(t, r.Refused(), "%v", r.Err())
	})
}

func TestRefusedReplies(t *testing.T) {
	for _, msg := range []string{"READONLY You can't write against a read only replica.",
		"LOADING Redis is loading the dataset in memory", "MASTERDOWN Link with MASTER is down",
		"CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request during rehashing of slot",
		"NOREPLICAS Not enough good replicas to write.", "BUSY Redis is busy running a script.",
		"NOSCRIPT No matching script.", "MOVED 3999 127.0.0.1:6381", "ASK 3999 127.0.0.1:6381",
		"ERR max number of clients reached"} {
		assert.True(t, Refused(replyErr(msg)), msg)
		assert.True(t, Refused(fmt.Errorf("wrapped: %w", replyErr(msg))), msg)
	}
	for _, err := range []error{nil, replyErr("ERR Error running script"), replyErr("WRONGTYPE Operation against a key"),
		replyErr("BUSYKEY Target key name already exists."), io.EOF, io.ErrUnexpectedEOF, context.DeadlineExceeded,
		context.Canceled, &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}} {
		assert.False(t, Refused(err), "%v", err)
	}
	assert.True(t, Refused(notSent(context.Canceled, "test")))
	assert.True(t, Refused(redis.ErrPoolTimeout))
	assert.True(t, Reply{err: notSent(context.Canceled, "test")}.Refused())
	assert.False(t, Reply{err: context.Canceled, Gone: true}.Refused())
	assert.False(t, Reply{err: noReply(io.EOF), written: true}.Refused(), "written, its reply lost: it may have run")
	assert.True(t, Reply{err: replyErr("LOADING x"), written: true, answered: true}.Refused())
	assert.False(t, Reply{err: replyErr("ERR Error running script"), written: true, answered: true}.Refused())
}
