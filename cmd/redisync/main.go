// Command redisync runs a command under a distributed lock, a permit of a
// semaphore or a leadership, inspects live locks, and runs a demo.
//
//	redisync lock      [conn] [-wait D] [-lease D] [-grace D] [-fence] [-conflict-exit-code N] [-v] NAME -- CMD [ARGS...]
//	redisync semaphore [conn] -permits N [-n K] [-wait D] [-lease D] [-grace D] [-conflict-exit-code N] [-v] NAME -- CMD [ARGS...]
//	redisync semaphore [conn] -permits N -set NAME
//	redisync elect     [conn] [-value V] [-wait D] [-lease D] [-grace D] [-conflict-exit-code N] [-v] NAME -- CMD [ARGS...]
//	redisync inspect   [conn] NAME...
//	redisync version
//	redisync demo      [-redis host:port] [-servers 20] [-budget 10000]
//	conn: -url URL (or $REDIS_URL) | -redis host:port | -cluster a,b,c | -sentinel MASTER@a,b
//
// Lock, semaphore and elect run CMD as a child for as long as the hold
// lasts, and exit with its status. On Unix, CMD runs in a process group of
// its own under a supervising redisync process (the same binary, started
// with a first argument of its own), and the hold covers every process of
// that group: they all end when redisync ends, is killed, or loses the
// hold; "redisync help" says the rest (exit statuses, the child's
// environment, signals and job control, examples).
//
// Inspect reads a Redis Cluster when -cluster names some of its nodes, or
// when -redis names one of them: each name is read on the master of its
// slot. The demo runs on an embedded Redis (miniredis) unless -redis names
// a real server. It exits non-zero when the run guarded by the lock is
// wrong.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/redis/go-redis/v9"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == superviseArg {
		os.Exit(superviseMain(os.Args[2:]))
	}
	redis.SetLogger(quiet{}) // redisync says what failed, once, on its own line
	err := run(context.Background(), os.Args[1:], os.Stdout)
	code, say := exitCode(err)
	if say {
		fmt.Fprintln(os.Stderr, "redisync:", err)
	}
	os.Exit(code)
}

// quiet is a go-redis logger that logs nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		usage(out)
		return usageErr("no command")
	}
	switch args[0] {
	case "lock":
		return lockCmd(ctx, args[1:], out)
	case "semaphore":
		return semaphoreCmd(ctx, args[1:], out)
	case "elect":
		return electCmd(ctx, args[1:], out)
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ContinueOnError)
		addr := fs.String("redis", "", "host:port of a Redis to use instead of the embedded one")
		servers := fs.Int("servers", 20, "simulated servers, each with its own client")
		budget := fs.Int64("budget", 10000, "budget to hand out, in cents")
		if err := fs.Parse(args[1:]); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		return demo(ctx, out, *addr, *servers, *budget)
	case "inspect":
		fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
		var conn connFlags
		conn.register(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		return inspect(ctx, out, conn, fs.Args())
	case "version":
		if len(args) > 1 {
			return usageErr("version takes no arguments")
		}
		return versionCmd(out)
	case "-h", "-help", "--help", "help":
		usage(out)
		return nil
	default:
		usage(out)
		return usageErr("unknown command %q", args[0])
	}
}
