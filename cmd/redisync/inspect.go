package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
)

// inspect prints, for each named lock, its holders (owner field → hold
// count) and its remaining lease, as stored in Redis.
func inspect(ctx context.Context, out io.Writer, addr string, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("inspect: name at least one lock")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for _, name := range names {
		typ, err := rdb.Type(ctx, name).Result()
		if err != nil {
			return err
		}
		switch typ {
		case "none":
			fmt.Fprintf(out, "%s: free\n", name)
			continue
		case "hash":
		default:
			fmt.Fprintf(out, "%s: a %s, not a lock\n", name, typ)
			continue
		}
		holders, err := rdb.HGetAll(ctx, name).Result()
		if err != nil {
			return err
		}
		ttl, err := rdb.PTTL(ctx, name).Result()
		if err != nil {
			return err
		}
		lease := "no expiry"
		if ttl >= 0 {
			lease = ttl.Round(time.Millisecond).String() + " left"
		}
		fmt.Fprintf(out, "%s: held, %s\n", name, lease)
		fields := make([]string, 0, len(holders))
		for f := range holders {
			fields = append(fields, f)
		}
		sort.Strings(fields)
		for _, f := range fields {
			fmt.Fprintf(out, "  %s  holds %s\n", f, holders[f])
		}
	}
	return nil
}
