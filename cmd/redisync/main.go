// Command redisync runs redisync's demos and inspects live locks.
//
//	redisync demo [-redis host:port] [-servers 20] [-budget 10000]
//	redisync inspect [-redis host:port | -cluster host:port,...] name...
//
// The demo runs on an embedded Redis (miniredis) unless -redis names a real
// server. It exits non-zero when the run guarded by the lock is wrong.
//
// Inspect reads a Redis Cluster when -cluster names some of its nodes, or
// when -redis names one of them: each name is read on the master of its
// slot.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "redisync:", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, `usage:
  redisync demo [-redis host:port] [-servers N] [-budget CENTS]
      the red-packet scenario: N servers hand out one budget, without a lock and with redisync.Mutex
  redisync inspect [-redis host:port | -cluster host:port,...] name...
      tell what each name is (lock, fair lock, rw lock, semaphore, latch) and its state:
      holders, hold counts, leases and waiters. On a Redis Cluster (-cluster names some of
      its nodes; a -redis address that is a cluster node is detected) each name is read on
      the master of its slot`)
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		usage(out)
		return fmt.Errorf("no command")
	}
	switch args[0] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		addr := fs.String("redis", "", "host:port of a Redis to use instead of the embedded one")
		servers := fs.Int("servers", 20, "simulated servers, each with its own client")
		budget := fs.Int64("budget", 10000, "budget to hand out, in cents")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		return demo(ctx, out, *addr, *servers, *budget)
	case "inspect":
		fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
		addr := fs.String("redis", "127.0.0.1:6379", "host:port of the Redis to inspect (a Cluster node is detected)")
		nodes := fs.String("cluster", "", "host:port,... of nodes of the Redis Cluster to inspect")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		var cluster []string
		if *nodes != "" {
			explicit := false
			fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "redis" })
			if explicit {
				return fmt.Errorf("inspect: give -redis or -cluster, not both")
			}
			for _, n := range strings.Split(*nodes, ",") {
				if n = strings.TrimSpace(n); n != "" {
					cluster = append(cluster, n)
				}
			}
			if len(cluster) == 0 {
				return fmt.Errorf("inspect: -cluster names no node")
			}
		}
		return inspect(ctx, out, *addr, cluster, fs.Args())
	case "-h", "-help", "--help", "help":
		usage(out)
		return nil
	default:
		usage(out)
		return fmt.Errorf("unknown command %q", args[0])
	}
}
