package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/redisync-go/redisync"
)

// electCmd is "redisync elect [conn] [-value V] [-wait D] [-lease D]
// [-grace D] [-conflict-exit-code N] NAME -- COMMAND [ARGS...]": the
// command runs while this process leads the election NAME, with
// REDISYNC_TOKEN its term.
//
// An election has no try-once campaign: with -wait 0, redisync asks who
// leads and gives up at once when someone does; when nobody does, it
// campaigns for at most as long as the first exchange with Redis may take
// (5s), so a candidate that wins the race meanwhile makes it
// give up.
func electCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("elect", flag.ContinueOnError)
	var h holdFlags
	h.register(fs)
	value := fs.String("value", defaultValue(), "what the leader is known by (Leader, Observe, inspect)")
	if err := h.parse(fs, args); err != nil {
		return err
	}
	rdb, err := h.conn.open(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := redisync.New(rdb)
	if err != nil {
		return err
	}
	defer c.Close()
	e := c.Election(h.name, redisync.WithRenewedLease(h.lease))
	campaign := func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, *value) }
	bounded := func(ctx context.Context, wait time.Duration) (context.Context, error) {
		return e.TryCampaignFor(ctx, *value, wait)
	}
	once := func(ctx context.Context) (context.Context, error) {
		l, err := e.Leader(ctx)
		if err != nil {
			return nil, err
		}
		if l.Term != 0 {
			return nil, fmt.Errorf("%w: led already", redisync.ErrNotAcquired)
		}
		return bounded(ctx, defaultCheck)
	}
	return h.run(ctx, out, guarded{
		kind: "elect",
		acquire: func(ctx context.Context) (context.Context, error) {
			return h.waitWith(ctx, campaign, once, bounded)
		},
		token: func(hold context.Context) string {
			t, _ := e.Term(hold)
			return strconv.FormatInt(t, 10)
		},
		release: e.Resign,
		holders: func(ctx context.Context) (string, error) {
			l, err := e.Leader(ctx)
			if l.Term == 0 {
				return "nobody leads now (the leader resigned meanwhile)", err
			}
			return fmt.Sprintf("led by %q (term %d)", l.Value, l.Term), err
		},
		held: func(ctx context.Context) (bool, error) {
			l, err := e.Leader(ctx)
			t, ok := e.Term(ctx)
			return ok && l.Term == t, err
		},
	})
}

// defaultValue is a candidate's value when -value is not given: its host
// name and process ID.
func defaultValue() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown host"
	}
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}
