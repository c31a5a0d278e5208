package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// semaphoreCmd is "redisync semaphore [conn] -permits N [-n K] [-wait D]
// [-lease D] [-grace D] [-conflict-exit-code N] NAME -- COMMAND
// [ARGS...]": the command runs while this process holds K permits of the
// semaphore NAME of N.
//
// -permits initialises the semaphore with TrySetPermits, so that runs
// starting at once agree on the first total, and states it on the handle
// (WithPermits), so that a Redis that lost its data gets it back at the
// next acquisition. A semaphore whose total is set to another count is
// refused with an error: the total is changed on purpose, with the
// library's SetPermits, never by a command line that differs.
func semaphoreCmd(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("semaphore", flag.ContinueOnError)
	var h holdFlags
	h.register(fs)
	permits := fs.Int("permits", 0, "the semaphore's total of permits (required)")
	n := fs.Int("n", 1, "permits to hold while the command runs")
	set := fs.Bool("set", false, "set the semaphore's total to -permits and exit, with NAME and no command (permits held stay held)")
	if err := h.parseFlags(fs, args); err != nil {
		return err
	}
	if *set {
		return setTotal(ctx, fs, h.conn, *permits, out)
	}
	if err := h.parseCommand(fs); err != nil {
		return err
	}
	switch {
	case *permits <= 0:
		return usageErr("-permits N (N > 0) is required")
	case *n <= 0 || *n > *permits:
		return usageErr("-n %d: want 1 to -permits (%d)", *n, *permits)
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
	s := c.Semaphore(h.name, redisync.WithRenewedLease(h.lease), redisync.WithPermits(*permits))
	if err := agree(ctx, rdb, s, *permits); err != nil {
		return err
	}
	return h.run(ctx, out, guarded{
		kind: "semaphore",
		acquire: func(ctx context.Context) (context.Context, error) {
			return h.waitWith(ctx,
				func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, *n) },
				func(ctx context.Context) (context.Context, error) { return s.TryAcquire(ctx, *n) },
				func(ctx context.Context, wait time.Duration) (context.Context, error) {
					return s.TryAcquireFor(ctx, *n, wait)
				})
		},
		token:   func(context.Context) string { return "" },
		release: func(hold context.Context) error { return s.Release(hold, *n) },
		holders: func(ctx context.Context) (string, error) {
			hs, err := s.Holders(ctx)
			return holderList(hs, "permits"), err
		},
		held: func(ctx context.Context) (bool, error) {
			hs, err := s.Holders(ctx)
			for _, x := range hs {
				if x.ClientID == c.ID() && x.Count >= *n {
					return true, err
				}
			}
			return false, err
		},
	})
}

// setTotal is "redisync semaphore [conn] -permits N -set NAME": the
// semaphore's total becomes N (0 to stop new acquisitions), with the
// library's SetPermits, which wakes as many waiters as permits are free.
// Permits held stay held. It says the total before and after.
func setTotal(ctx context.Context, fs *flag.FlagSet, conn connFlags, permits int, out io.Writer) error {
	given := false
	var others []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "permits":
			given = true
		case "set", "v", "url", "redis", "cluster", "sentinel":
		default:
			others = append(others, "-"+f.Name)
		}
	})
	rest := fs.Args()
	switch {
	case !given || permits < 0:
		return usageErr("-set needs -permits N (N >= 0): the new total")
	case len(others) > 0:
		return usageErr("-set takes -permits, NAME and the connection flags, not %v", others)
	case len(rest) != 1 || rest[0] == "" || rest[0] == "--":
		return usageErr("-set takes one NAME and no command: redisync semaphore -permits N -set NAME")
	}
	name := rest[0]
	rdb, err := conn.open(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	c, err := redisync.New(rdb)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, defaultCheck)
	defer cancel()
	was := "never set"
	switch old, err := rdb.HGet(ctx, name, "permits").Result(); {
	case err == nil:
		was = old
	case !errors.Is(err, redis.Nil):
		return fmt.Errorf("semaphore %q: read its total: %w", name, err)
	}
	if err := c.Semaphore(name).SetPermits(ctx, permits); err != nil {
		return err
	}
	fmt.Fprintf(out, "semaphore %q: %d permits (was %s)\n", name, permits, was)
	return nil
}

// agree sets the semaphore's total to permits if it was never set, and
// refuses one set to another count. The total is the "permits" field of
// the semaphore's hash (the Semaphore's documented layout in Redis).
func agree(ctx context.Context, rdb redis.UniversalClient, s *redisync.Semaphore, permits int) error {
	set, err := s.TrySetPermits(ctx, permits)
	if err != nil || set {
		return err
	}
	total, err := rdb.HGet(ctx, s.Name(), "permits").Int()
	switch {
	case errors.Is(err, redis.Nil):
		return nil // deleted meanwhile: the acquisition creates it (WithPermits)
	case err != nil:
		return fmt.Errorf("semaphore %q: read its total: %w", s.Name(), err)
	case total != permits:
		return fmt.Errorf("semaphore %q has %d permits in Redis, not %d (-permits): give -permits %d, or change the total on purpose (redisync semaphore -permits N -set NAME)",
			s.Name(), total, permits, total)
	}
	return nil
}
