package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
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
	require.NoError(t, effectBeforeReply(t,
		func() error { return c.Set(ctx, "k", "v", 0).Err() },
		func() bool { return other.Get(ctx, "k").Val() == "v" }))
	require.GreaterOrEqual(t, time.Since(start), d)
	require.Equal(t, 1, r.Fired())

	// A context ending during the delay ends it; the command has run.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.Set(cctx, "k2", "v", 0).Err(), context.DeadlineExceeded)
	require.Equal(t, "v", other.Get(ctx, "k2").Val())
}

func TestHookHoldReply(t *testing.T) {
	ctx := context.Background()
	c, h, other := hooked(t, redistest.Start(t), nil)
	release := make(chan struct{})
	r := h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.HoldReply(release)})

	done := make(chan error, 1)
	go func() { done <- c.Set(ctx, "k", "v", 0).Err() }()
	require.Eventually(t, func() bool { return other.Get(ctx, "k").Val() == "v" }, 2*time.Second, 5*time.Millisecond, "the command ran")
	require.NoError(t, c.Ping(ctx).Err(), "another call is not held")
	select {
	case err := <-done:
		t.Fatalf("the reply came before its release: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done, "the reply comes when released")
	require.Equal(t, 1, r.Fired())

	// In a pipeline; a context ending during the hold ends it.
	h.OnCommand(faultproxy.CommandRule{Name: "set", Times: 1, Action: faultproxy.HoldReply(make(chan struct{}))})
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := c.Pipelined(cctx, func(p redis.Pipeliner) error {
		p.Set(cctx, "k2", "v", 0)
		return nil
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, "v", other.Get(ctx, "k2").Val(), "the command ran")
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
	require.NoError(t, effectBeforeReply(t,
		func() error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, "d", "1", 0)
				p.Set(ctx, "e", "1", 0)
				return nil
			})
			return err
		},
		func() bool { return other.Exists(ctx, "d", "e").Val() == 2 }))

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

// receiveAll returns what ps receives until it has been quiet for 300ms.
func receiveAll(t *testing.T, ps *redis.PubSub) []any {
	t.Helper()
	var got []any
	for {
		m, err := ps.ReceiveTimeout(context.Background(), 300*time.Millisecond)
		if err != nil {
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			require.True(t, ne.Timeout(), "want a timeout, got %v", err)
			return got
		}
		got = append(got, m)
	}
}

// What go-redis's PubSub does when the write of a SUBSCRIBE fails, as
// observed with go-redis v9.23.0. PubSub.Subscribe(ctx, "ch"):
//
//  1. writes SUBSCRIBE ch; the write fails, Subscribe will return its error;
//  2. before returning, sees a bad connection (releaseConn) and reconnects
//     at once: it dials a new connection and re-subscribes the channels it
//     had recorded, which do NOT yet include "ch" (Subscribe records its
//     channels only after the attempt);
//  3. then records "ch" as subscribed (ps.String() lists it).
//
// So Redis has no subscription on "ch" while the PubSub believes it has:
// PUBLISH ch reaches nobody. Nothing repairs it by itself: ReceiveTimeout's
// timeouts do not count as bad connections, and the health-check PINGs of
// ps.Channel() succeed; only a later reconnection (after some other
// connection error) or a new Subscribe(ctx, "ch") subscribes it.
func TestHookFailWriteSubscribe(t *testing.T) {
	ctx := context.Background()
	for _, before := range [][]string{nil, {"a"}} {
		t.Run(fmt.Sprintf("subscribed to %v", before), func(t *testing.T) {
			c, h, other := hooked(t, redistest.Start(t), nil)
			hellos := h.OnWrite(faultproxy.WriteRule{Name: "hello"}) // one per new connection
			ps := c.Subscribe(ctx, before...)
			t.Cleanup(func() { _ = ps.Close() })
			if before != nil {
				require.IsType(t, &redis.Subscription{}, receive(t, ps))
			}

			fail := h.OnWrite(faultproxy.WriteRule{Name: "subscribe", Times: 1, Action: faultproxy.FailWrite()})
			err := ps.Subscribe(ctx, "ch")
			require.ErrorIs(t, err, faultproxy.ErrInjected)
			var oe *net.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, 1, fail.Fired())
			require.Equal(t, 2, hellos.Fired(), "Subscribe reconnected before returning")

			for _, ch := range append(before, "ch") {
				require.Contains(t, ps.String(), ch, "the PubSub believes it is subscribed to ch")
			}
			numsub := other.PubSubNumSub(ctx, "ch").Val()
			require.Zero(t, numsub["ch"], "but Redis has no subscriber on ch")
			require.Zero(t, other.Publish(ctx, "ch", "lost").Val())
			got := receiveAll(t, ps)
			if before != nil {
				// The reconnection re-subscribed the channels known before.
				require.EqualValues(t, 1, other.Publish(ctx, "a", "kept").Val())
				got = append(got, receiveAll(t, ps)...)
				require.Equal(t, []any{
					&redis.Subscription{Kind: "subscribe", Channel: "a", Count: 1},
					&redis.Message{Channel: "a", Payload: "kept"},
				}, got)
			} else {
				require.Empty(t, got)
			}
			require.Zero(t, other.PubSubNumSub(ctx, "ch").Val()["ch"], "still not subscribed after receive timeouts")

			// Subscribing again repairs it.
			require.NoError(t, ps.Subscribe(ctx, "ch"))
			require.Equal(t, &redis.Subscription{Kind: "subscribe", Channel: "ch", Count: len(before) + 1}, receive(t, ps))
			require.EqualValues(t, 1, other.Publish(ctx, "ch", "m").Val())
			require.Equal(t, &redis.Message{Channel: "ch", Payload: "m"}, receive(t, ps))
		})
	}
}

func TestHookDelayWriteSubscribe(t *testing.T) {
	ctx := context.Background()
	c, h, other := hooked(t, redistest.Start(t), nil)
	ps := c.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })
	const d = 500 * time.Millisecond
	r := h.OnWrite(faultproxy.WriteRule{Name: "subscribe", Times: 1, Action: faultproxy.DelayWrite(d)})

	start := time.Now()
	done := make(chan error, 1)
	var returned time.Time
	go func() {
		err := ps.Subscribe(ctx, "ch") // blocks in the Write
		returned = time.Now()
		done <- err
	}()
	time.Sleep(d / 2)
	require.Zero(t, other.PubSubNumSub(ctx, "ch").Val()["ch"], "subscribed before the delay was over")
	require.NoError(t, <-done)
	require.GreaterOrEqual(t, returned.Sub(start), d, "Subscribe blocks in the delayed Write")
	require.Equal(t, &redis.Subscription{Kind: "subscribe", Channel: "ch", Count: 1}, receive(t, ps))
	require.EqualValues(t, 1, other.PubSubNumSub(ctx, "ch").Val()["ch"])
	require.Equal(t, 1, r.Fired())

	// A delay past the write deadline fails the write with a timeout.
	c, h, _ = hooked(t, redistest.Start(t), &redis.Options{WriteTimeout: 100 * time.Millisecond})
	ps = c.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })
	h.OnWrite(faultproxy.WriteRule{Name: "subscribe", Times: 1, Action: faultproxy.DelayWrite(300 * time.Millisecond)})
	err := ps.Subscribe(ctx, "ch")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "want a timeout, got %v", err)
}

// On a ClusterClient, h goes on the cluster client (command rules, outside
// all retries) and DialOnly on its nodes (write rules).
func TestHookCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	h := faultproxy.NewHook()
	cc.AddHook(h)
	cc.OnNewNode(func(node *redis.Client) { node.AddHook(h.DialOnly()) })

	sets := h.OnCommand(faultproxy.CommandRule{Name: "set"})
	h.OnCommand(faultproxy.CommandRule{Name: "incr", Times: 1, Action: faultproxy.LoseReply()})
	require.NoError(t, cc.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, 1, sets.Fired(), "command rules apply once, at the cluster level")
	require.ErrorIs(t, cc.Incr(ctx, "n").Err(), io.EOF)
	require.Equal(t, "1", cc.Get(ctx, "n").Val(), "the cluster client did not retry the lost reply")

	writes := h.OnWrite(faultproxy.WriteRule{Name: "get"})
	require.Equal(t, "v", cc.Get(ctx, "k").Val())
	require.Equal(t, 1, writes.Fired(), "node connections are wrapped")

	ps := cc.Subscribe(ctx)
	t.Cleanup(func() { _ = ps.Close() })
	fail := h.OnWrite(faultproxy.WriteRule{Name: "subscribe", Times: 1, Action: faultproxy.FailWrite()})
	require.ErrorIs(t, ps.Subscribe(ctx, "ch"), faultproxy.ErrInjected)
	require.Equal(t, 1, fail.Fired(), "a node's PubSub connection is wrapped")
}

// effectBeforeReply runs call in a goroutine, checks that visible()
// becomes true before call returns, and returns call's error.
func effectBeforeReply(t *testing.T, call func() error, visible func() bool) error {
	t.Helper()
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		err := call()
		done <- result{err, time.Now()}
	}()
	var seen time.Time
	require.Eventually(t, func() bool {
		if visible() {
			seen = time.Now()
			return true
		}
		return false
	}, 2*time.Second, 5*time.Millisecond)
	res := <-done
	require.True(t, seen.Before(res.at), "the reply came before the effect was visible")
	return res.err
}

// receive returns the next thing ps receives, waiting at most 2s.
func receive(t *testing.T, ps *redis.PubSub) any {
	t.Helper()
	m, err := ps.ReceiveTimeout(context.Background(), 2*time.Second)
	require.NoError(t, err)
	return m
}
