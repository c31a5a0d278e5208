package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/faultproxy"
	"github.com/redisync-go/redisync/internal/redistest"
)

// hooked returns a client of srv with a new Hook installed, and a plain
// client of srv to look at Redis from the side.
func hooked(t *testing.T, srv *redistest.Server, opt *redis.Options) (*redis.Client, *faultproxy.Hook, *redis.Client) {
	t.Helper()
	if opt == nil {
		opt = &redis.Options{}
	}
	opt.Addr = srv.Addr()
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	h := faultproxy.NewHook()
	c.AddHook(h)
	return c, h, srv.Client(t)
}

func TestHookResend(t *testing.T) {
	ctx := context.Background()
	c, h, _ := hooked(t, redistest.Start(t), nil)
	r := h.OnCommand(faultproxy.CommandRule{Name: "INCR", Times: 1, Action: faultproxy.Resend()})

	n, err := c.Incr(ctx, "n").Result()
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the caller sees the second reply")
	require.Equal(t, 1, r.Fired())
	require.EqualValues(t, 3, c.Incr(ctx, "n").Val(), "the rule is spent")
	require.Equal(t, 1, r.Fired())
}

func TestHookLoseReply(t *testing.T) {
	ctx := context.Background()
	// Default options: go-redis retries io.EOF up to MaxRetries (3) times,
	// but the hook runs outside that loop, so nothing is retried.
	c, h, other := hooked(t, redistest.Start(t), nil)
	r := h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.LoseReply()})

	err := c.Set(ctx, "k", "v", 0).Err()
	require.Error(t, err)
	require.ErrorIs(t, err, io.EOF)
	require.ErrorIs(t, err, faultproxy.ErrInjected)
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.False(t, ne.Timeout())
	require.Equal(t, "v", other.Get(ctx, "k").Val(), "the command ran")
	require.Equal(t, 1, r.Fired())

	h.OnCommand(faultproxy.CommandRule{Name: "incr", Times: 1, Action: faultproxy.LoseReply()})
	require.ErrorIs(t, c.Incr(ctx, "n").Err(), io.EOF)
	require.Equal(t, "1", other.Get(ctx, "n").Val(), "go-redis did not retry the lost reply")
	require.EqualValues(t, 2, c.Incr(ctx, "n").Val(), "the connection is still usable")
}

func TestHookDelayReply(t *testing.T) {
	ctx := context.Background()
	c, h, other := hooked(t, redistest.Start(t), nil)
	const d = 500 * time.Millisecond
	r := h.OnCommand(faultproxy.CommandRule{Name: "set", Action: faultproxy.DelayReply(d)})

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	require.Eventually(t, func() bool { return other.Get(ctx, "k").Val() == "v" }, 2*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("reply arrived (err %v) before the delay was over", err)
	default:
	}
	require.NoError(t, <-done)
	require.GreaterOrEqual(t, time.Since(start), d)
	require.Equal(t, 1, r.Fired())

	// A context ending during the delay ends it; the command has run.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Set(cctx, "k2", "v", 0).Err(), context.DeadlineExceeded)
	require.Equal(t, "v", other.Get(ctx, "k2").Val())
}

func TestHookDelayBefore(t *testing.T) {
	ctx := context.Background()
	c, h, other := hooked(t, redistest.Start(t), nil)
	const d = 400 * time.Millisecond
	h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.DelayBefore(d)})

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	time.Sleep(d / 2)
	require.Zero(t, other.Exists(ctx, "k").Val(), "sent before the delay was over")
	require.NoError(t, <-done)
	require.GreaterOrEqual(t, time.Since(start), d)
	require.Equal(t, "v", other.Get(ctx, "k").Val())

	// A context ending during the delay: the command is never sent.
	h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.DelayBefore(time.Minute)})
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Set(cctx, "k2", "v", 0).Err(), context.DeadlineExceeded)
	require.Zero(t, other.Exists(ctx, "k2").Val())
}

func TestHookFail(t *testing.T) {
	ctx := context.Background()
	c, h, other := hooked(t, redistest.Start(t), nil)
	r := h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.Fail(nil)})
	require.ErrorIs(t, c.Set(ctx, "k", "v", 0).Err(), faultproxy.ErrInjected)
	require.Zero(t, other.Exists(ctx, "k").Val(), "the command was sent")
	require.Equal(t, 1, r.Fired())

	mine := errors.New("mine")
	h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.Fail(mine)})
	require.ErrorIs(t, c.Set(ctx, "k", "v", 0).Err(), mine)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
}

func TestHookRunsScript(t *testing.T) {
	ctx := context.Background()
	c, h, _ := hooked(t, redistest.Start(t), nil)
	one := redis.NewScript(`return 1`)
	two := redis.NewScript(`return 2`)

	r := h.OnCommand(faultproxy.CommandRule{Args: faultproxy.RunsScript(one), Action: faultproxy.Fail(nil)})
	require.ErrorIs(t, one.Run(ctx, c, nil).Err(), faultproxy.ErrInjected) // EVALSHA
	require.ErrorIs(t, one.Eval(ctx, c, nil).Err(), faultproxy.ErrInjected)
	require.ErrorIs(t, one.RunRO(ctx, c, nil).Err(), faultproxy.ErrInjected) // EVALSHA_RO
	require.Equal(t, 3, r.Fired())
	require.EqualValues(t, 2, two.Run(ctx, c, nil).Val()) // EVALSHA, NOSCRIPT, then EVAL
	require.EqualValues(t, 2, two.Run(ctx, c, nil).Val()) // EVALSHA
	require.Equal(t, 3, r.Fired())
	r.Remove()

	r = h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(one), Action: faultproxy.Fail(nil)})
	require.EqualValues(t, 1, one.Eval(ctx, c, nil).Val())
	require.ErrorIs(t, one.Run(ctx, c, nil).Err(), faultproxy.ErrInjected)
	require.Equal(t, 1, r.Fired())

	// NewScriptServerSHA learns its SHA from SCRIPT LOAD: matched once known.
	srv := redis.NewScriptServerSHA(`return 3`)
	r = h.OnCommand(faultproxy.CommandRule{Name: "evalsha", Args: faultproxy.RunsScript(srv), Action: faultproxy.Fail(nil)})
	require.ErrorIs(t, srv.Run(ctx, c, nil).Err(), faultproxy.ErrInjected)
	require.Equal(t, 1, r.Fired())
}

func TestHookTimesRemoveClear(t *testing.T) {
	ctx := context.Background()
	c, h, _ := hooked(t, redistest.Start(t), &redis.Options{PoolSize: 1})
	// Dial now: the handshake of a new connection would match rule all.
	require.NoError(t, c.Ping(ctx).Err())
	twice := h.OnCommand(faultproxy.CommandRule{Name: "ping", Times: 2, Action: faultproxy.Fail(nil)})
	count := h.OnCommand(faultproxy.CommandRule{Name: "ping"}) // zero Action: counts only
	all := h.OnCommand(faultproxy.CommandRule{})

	for range 2 {
		require.ErrorIs(t, c.Ping(ctx).Err(), faultproxy.ErrInjected)
	}
	require.NoError(t, c.Ping(ctx).Err())
	require.Equal(t, 2, twice.Fired())
	require.Equal(t, 1, count.Fired(), "first matching rule only")
	require.Equal(t, 0, all.Fired())

	count.Remove()
	count.Remove()
	require.NoError(t, c.Ping(ctx).Err())
	require.Equal(t, 1, count.Fired())
	require.Equal(t, 1, all.Fired())

	h.Clear()
	require.NoError(t, c.Ping(ctx).Err())
	require.Equal(t, 1, all.Fired())
	require.Panics(t, func() { h.OnCommand(faultproxy.CommandRule{Times: -1}) })
}

func TestHookPipeline(t *testing.T) {
	ctx := context.Background()
	c, h, other := hooked(t, redistest.Start(t), nil)
	key := func(k string) func([]any) bool {
		return func(args []any) bool { return len(args) > 1 && args[1] == k }
	}
	lose := h.OnCommand(faultproxy.CommandRule{Name: "incr", Args: key("n"), Action: faultproxy.LoseReply()})
	fail := h.OnCommand(faultproxy.CommandRule{Name: "set", Args: key("x"), Action: faultproxy.Fail(nil)})

	pipe := c.Pipeline()
	setA := pipe.Set(ctx, "a", "1", 0)
	incrN := pipe.Incr(ctx, "n")
	setX := pipe.Set(ctx, "x", "1", 0)
	incrM := pipe.Incr(ctx, "m")
	getA := pipe.Get(ctx, "a")
	_, err := pipe.Exec(ctx)
	require.ErrorIs(t, err, io.EOF, "Exec returns the first command error")
	require.NoError(t, setA.Err())
	require.ErrorIs(t, incrN.Err(), io.EOF)
	require.ErrorIs(t, setX.Err(), faultproxy.ErrInjected)
	require.EqualValues(t, 1, incrM.Val())
	require.Equal(t, "1", getA.Val())
	require.Equal(t, "1", other.Get(ctx, "n").Val(), "the lost INCR ran")
	require.Zero(t, other.Exists(ctx, "x").Val(), "the failed SET was not sent")
	require.Equal(t, 1, lose.Fired())
	require.Equal(t, 1, fail.Fired())
	h.Clear()

	// Resend: the whole pipeline runs twice; the caller sees the second
	// replies.
	h.OnCommand(faultproxy.CommandRule{Name: "incr", Args: key("r"), Times: 1, Action: faultproxy.Resend()})
	pipe = c.Pipeline()
	incrR, incrS := pipe.Incr(ctx, "r"), pipe.Incr(ctx, "s")
	_, err = pipe.Exec(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, incrR.Val())
	require.EqualValues(t, 2, incrS.Val())

	// DelayReply: the pipeline ran before its replies arrive.
	h.OnCommand(faultproxy.CommandRule{Name: "set", Args: key("d"), Times: 1, Action: faultproxy.DelayReply(400 * time.Millisecond)})
	done := make(chan error, 1)
	go func() {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, "d", "1", 0)
			p.Set(ctx, "e", "1", 0)
			return nil
		})
		done <- err
	}()
	require.Eventually(t, func() bool { return other.Exists(ctx, "d", "e").Val() == 2 }, 2*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("replies arrived (err %v) before the delay was over", err)
	default:
	}
	require.NoError(t, <-done)

	// TxPipeline: a failed command is left out of the MULTI/EXEC block.
	h.OnCommand(faultproxy.CommandRule{Name: "set", Args: key("u"), Times: 1, Action: faultproxy.Fail(nil)})
	tx := c.TxPipeline()
	incrT, setU := tx.Incr(ctx, "t"), tx.Set(ctx, "u", "1", 0)
	_, err = tx.Exec(ctx)
	require.ErrorIs(t, err, faultproxy.ErrInjected)
	require.EqualValues(t, 1, incrT.Val())
	require.ErrorIs(t, setU.Err(), faultproxy.ErrInjected)
	require.Zero(t, other.Exists(ctx, "u").Val())
}

// Write rules sit below go-redis's retry loop: a failed write of an
// ordinary command is retried on a new connection, unlike a PubSub's.
func TestHookFailWriteRetriedByGoRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c, h, other := hooked(t, srv, nil)
	r := h.OnWrite(faultproxy.WriteRule{Name: "set", Times: 1, Action: faultproxy.FailWrite()})
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err(), "go-redis retried")
	require.Equal(t, 1, r.Fired())
	require.Equal(t, "v", other.Get(ctx, "k").Val())

	c, h, _ = hooked(t, srv, &redis.Options{MaxRetries: -1})
	h.OnWrite(faultproxy.WriteRule{Name: "set", Times: 1, Action: faultproxy.FailWrite()})
	err := c.Set(ctx, "k2", "v", 0).Err()
	require.ErrorIs(t, err, faultproxy.ErrInjected)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "write", oe.Op)
	require.Zero(t, other.Exists(ctx, "k2").Val())
}

// CloseAfterWrite makes go-redis itself resend: Redis ran the INCR, the
// read failed on the closed connection, and go-redis retried on a new one.
func TestHookCloseAfterWrite(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c, h, other := hooked(t, srv, nil)
	h.OnWrite(faultproxy.WriteRule{Name: "incr", Times: 1, Action: faultproxy.CloseAfterWrite()})
	require.EqualValues(t, 2, c.Incr(ctx, "n").Val())
	require.Equal(t, "2", other.Get(ctx, "n").Val())

	c, h, _ = hooked(t, srv, &redis.Options{MaxRetries: -1})
	h.OnWrite(faultproxy.WriteRule{Name: "set", Times: 1, Action: faultproxy.CloseAfterWrite()})
	require.Error(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, "v", other.Get(ctx, "k").Val())
}

// A Hook added to a running client wraps the connections dialled from then
// on, a PubSub's included, not the ones it already had.
func TestHookAddedLater(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 2})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err()) // dials connection 1

	h := faultproxy.NewHook()
	c.AddHook(h)
	pings := h.OnWrite(faultproxy.WriteRule{Name: "ping"})
	// go-redis runs each new connection's handshake through the hooks.
	hellos := h.OnCommand(faultproxy.CommandRule{Name: "hello"})
	require.NoError(t, c.Ping(ctx).Err())
	require.Equal(t, 0, pings.Fired(), "connection 1 is not wrapped")

	conn := c.Conn()
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.Ping(ctx).Err()) // takes connection 1 and keeps it
	require.Equal(t, 0, pings.Fired())
	require.NoError(t, c.Ping(ctx).Err()) // dials connection 2
	require.Equal(t, 1, pings.Fired(), "connection 2 is wrapped")

	subs := h.OnWrite(faultproxy.WriteRule{Name: "subscribe"})
	ps := c.Subscribe(ctx, "ch")
	t.Cleanup(func() { _ = ps.Close() })
	_, err := ps.Receive(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, subs.Fired(), "the PubSub's connection is wrapped")
	require.Equal(t, 2, hellos.Fired(), "connection 2 and the PubSub's")
}

// "SUBSCRIBE" matches the command, not UNSUBSCRIBE or SSUBSCRIBE, nor a
// channel named "subscribe".
func TestHookWriteRuleMatchesCommandName(t *testing.T) {
	ctx := context.Background()
	c, h, _ := hooked(t, redistest.Start(t), nil)
	subs := h.OnWrite(faultproxy.WriteRule{Name: "SUBSCRIBE"})
	chOnly := h.OnWrite(faultproxy.WriteRule{Name: "subscribe", Args: func(args []string) bool { return slices.Contains(args[1:], "ch") }})
	ps := c.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })

	require.NoError(t, ps.Subscribe(ctx, "ch", "x"))
	require.NoError(t, ps.Unsubscribe(ctx, "ch"))
	require.NoError(t, ps.PSubscribe(ctx, "subscribe"))
	require.NoError(t, ps.SSubscribe(ctx, "s"))
	require.Equal(t, 1, subs.Fired())
	require.Equal(t, 0, chOnly.Fired(), "first matching rule only")
	subs.Remove()
	require.NoError(t, ps.Subscribe(ctx, "ch"))
	require.NoError(t, ps.Subscribe(ctx, "subscribe"))
	require.Equal(t, 1, chOnly.Fired())
}
