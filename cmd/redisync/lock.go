package main

import (
	"context"
	"flag"
	"io"
	"strconv"

	"github.com/redisync-go/redisync"
)

// lockCmd is "redisync lock [conn] [-wait D] [-lease D] [-grace D] [-fence]
// [-conflict-exit-code N] NAME -- COMMAND [ARGS...]": the command runs
// while this process holds the Mutex NAME, with REDISYNC_TOKEN its fencing
// token under -fence.
func lockCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lock", flag.ContinueOnError)
	var h holdFlags
	h.register(fs)
	fence := fs.Bool("fence", false, "take a fencing token (REDISYNC_TOKEN), greater than every earlier holder's")
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
	opts := []redisync.MutexOption{redisync.WithRenewedLease(h.lease)}
	if *fence {
		opts = append(opts, redisync.WithFencing())
	}
	m := c.Mutex(h.name, opts...)
	return h.run(ctx, out, guarded{
		kind: "lock",
		acquire: func(ctx context.Context) (context.Context, error) {
			return h.waitWith(ctx, m.Lock, m.TryLock, m.TryLockFor)
		},
		token: func(hold context.Context) string {
			if t, ok := m.Token(hold); ok && *fence {
				return strconv.FormatInt(t, 10)
			}
			return ""
		},
		release: m.Unlock,
		holders: func(ctx context.Context) (string, error) {
			hs, err := m.Holders(ctx)
			return holderList(hs, "hold"), err
		},
		held: func(ctx context.Context) (bool, error) {
			n, err := m.HoldCount(ctx)
			return n > 0, err
		},
	})
}
