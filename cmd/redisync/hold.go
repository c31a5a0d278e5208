package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redisync-go/redisync"
)

// Defaults of the flags of lock, semaphore and elect.
const (
	defaultLease = 15 * time.Second
	defaultGrace = 10 * time.Second
)

// holdFlags are the flags of every command that runs a child under a hold
// (lock, semaphore, elect), and what follows them: NAME -- COMMAND...
type holdFlags struct {
	conn     connFlags
	wait     time.Duration
	forever  bool // no -wait given: wait for ever
	lease    time.Duration
	grace    time.Duration
	conflict int
	verbose  bool

	name string
	argv []string
}

// register declares the flags on fs.
func (h *holdFlags) register(fs *flag.FlagSet) {
	h.conn.register(fs)
	fs.DurationVar(&h.wait, "wait", 0, "wait at most this long to acquire (0: try once); default: for ever")
	fs.DurationVar(&h.lease, "lease", defaultLease, "the hold's lease, renewed every third of it while redisync runs: a redisync that dies frees it within this")
	fs.DurationVar(&h.grace, "grace", defaultGrace, "when the lease is lost, how long the command has between SIGTERM and SIGKILL")
	fs.IntVar(&h.conflict, "conflict-exit-code", exitNotAcquired, "exit status when not acquired within -wait (0: a skipped run says nothing unless -v)")
	fs.BoolVar(&h.verbose, "v", false, "say when the hold is acquired and released, and when a run is skipped with -conflict-exit-code 0")
}

// parse parses args into fs and h, and checks them.
func (h *holdFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := h.parseFlags(fs, args); err != nil {
		return err
	}
	return h.parseCommand(fs)
}

// parseFlags parses the flags in args into fs and h, and checks them.
func (h *holdFlags) parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return &exitError{code: 0} // -h: the flags were printed
	} else if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	h.forever = true
	fs.Visit(func(f *flag.Flag) { h.forever = h.forever && f.Name != "wait" })
	switch {
	case h.wait < 0:
		return usageErr("-wait %v is negative", h.wait)
	case h.lease < redisync.MinLease || h.lease > redisync.MaxLease:
		return usageErr("-lease %v: want %v to %v", h.lease, redisync.MinLease, redisync.MaxLease)
	case h.grace < 0:
		return usageErr("-grace %v is negative", h.grace)
	case h.conflict < 0 || h.conflict > 255:
		return usageErr("-conflict-exit-code %d: want 0 to 255", h.conflict)
	}
	return nil
}

// parseCommand parses what follows the flags: NAME -- COMMAND [ARGS...].
func (h *holdFlags) parseCommand(fs *flag.FlagSet) error {
	rest := fs.Args()
	at := -1
	for i, a := range rest {
		if a == "--" {
			at = i
			break
		}
	}
	switch {
	case at < 0:
		return usageErr("no -- before the command: redisync %s [flags] NAME -- COMMAND [ARGS...]", fs.Name())
	case at == 0:
		return usageErr("no NAME before --")
	case at > 1:
		return usageErr("one NAME before --, not %q (flags go before NAME)", rest[:at])
	case rest[0] == "":
		return usageErr("an empty NAME")
	case at == len(rest)-1:
		return usageErr("no command after --")
	}
	h.name, h.argv = rest[0], rest[at+1:]
	return nil
}

// guarded is what a command holds while its child runs.
type guarded struct {
	kind string // lock, semaphore, elect
	// acquire acquires the hold, waiting as the flags say, and returns its
	// context; the error wraps redisync.ErrNotAcquired when it was not.
	acquire func(ctx context.Context) (context.Context, error)
	// token is REDISYNC_TOKEN for the hold ("" for none).
	token func(hold context.Context) string
	// release gives the hold back.
	release func(hold context.Context) error
	// holders says who holds it, for the line that says it was not acquired.
	holders func(ctx context.Context) (string, error)
	// held tells whether Redis still has the hold that ctx carries.
	held func(ctx context.Context) (bool, error)
}

// run acquires g, runs the command under it, releases it and returns how
// redisync exits: the command's status, or an error with its own.
// SIGINT, SIGTERM and SIGHUP end a wait (exit 128+N) and are passed on to
// the command once it runs.
func (h *holdFlags) run(ctx context.Context, out io.Writer, g guarded) error {
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "redisync: %s %q: %s\n", g.kind, h.name, fmt.Sprintf(format, args...))
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var interrupted os.Signal
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case interrupted = <-sigs:
			cancel()
		case <-stop:
		}
	}()
	hold, err := g.acquire(wctx)
	close(stop)
	<-watched
	if interrupted != nil {
		if err == nil {
			_ = g.release(hold)
		}
		code := exitFailed
		if s, ok := interrupted.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		return &exitError{code: code, err: fmt.Errorf("%s %q: %v while waiting", g.kind, h.name, interrupted)}
	}
	if errors.Is(err, redisync.ErrNotAcquired) {
		if h.conflict == 0 && !h.verbose {
			return &exitError{code: 0} // a skipped run, as asked: quiet (cron mails nothing)
		}
		return &exitError{code: h.conflict, err: h.notAcquired(ctx, g)}
	}
	if err != nil {
		return fmt.Errorf("%s %q: %w", g.kind, h.name, err)
	}
	token := g.token(hold)
	if h.verbose {
		if token != "" {
			say("acquired (REDISYNC_TOKEN %s): running %q", token, h.argv)
		} else {
			say("acquired: running %q", h.argv)
		}
	}

	why := h.reason()
	c := &child{argv: h.argv, grace: h.grace, stdout: out, stderr: os.Stderr, sigs: sigs, say: say,
		held: g.held, reason: why, env: []string{"REDISYNC_NAME=" + h.name, "REDISYNC_TOKEN=" + token}}
	res, err := c.run(hold)
	rerr := g.release(hold)
	switch {
	case err != nil:
		return err
	case res.lost != nil:
		return &exitError{code: exitLost, err: fmt.Errorf("%s %q: %s %s; the command was ended (status %d)",
			g.kind, h.name, why(res.lost), res.when, res.status)}
	case errors.Is(rerr, redisync.ErrLeaseLost) && res.status == 0:
		return &exitError{code: exitLost, err: fmt.Errorf("%s %q: the command finished (status 0), but the hold was lost before it did (%s): it may have overlapped another holder",
			g.kind, h.name, why(rerr))}
	case errors.Is(rerr, redisync.ErrLeaseLost):
		return &exitError{code: exitLost, err: fmt.Errorf("%s %q: the hold was lost before the command ended (status %d; %s)",
			g.kind, h.name, res.status, why(rerr))}
	case rerr != nil:
		say("release: %s (Redis frees it when its lease of %v ends)", why(rerr), h.lease)
	case h.verbose:
		say("released (the command's status: %d)", res.status)
	}
	if res.status == 0 {
		return nil
	}
	return &exitError{code: res.status}
}

// reason returns how a line that already names the hold says an error of
// the library: without its "redisync: " and the name it gives the hold
// again, so that a line says its prefix once.
func (h *holdFlags) reason() func(error) string {
	q := strconv.Quote(h.name)
	return func(err error) string {
		s := strings.ReplaceAll(err.Error(), "redisync: ", "")
		for _, kind := range []string{"lock", "semaphore", "election"} {
			s = strings.ReplaceAll(s, kind+" "+q+": ", "")
		}
		return s
	}
}

// notAcquired says that g was not acquired, and who holds it.
func (h *holdFlags) notAcquired(ctx context.Context, g guarded) error {
	within := "within " + h.wait.String()
	if h.wait == 0 {
		within = "at once (-wait 0)"
	}
	ctx, cancel := context.WithTimeout(ctx, defaultCheck)
	defer cancel()
	who, err := g.holders(ctx)
	if err != nil {
		who = fmt.Sprintf("cannot tell who holds it: %v", err)
	}
	return fmt.Errorf("%s %q: not acquired %s; %s", g.kind, h.name, within, who)
}

// waitWith calls the acquisition that -wait asks for: forever waits for
// ever, a zero wait tries once, a positive one waits at most that long.
func (h *holdFlags) waitWith(ctx context.Context, forever, once func(context.Context) (context.Context, error),
	bounded func(context.Context, time.Duration) (context.Context, error)) (context.Context, error) {
	switch {
	case h.forever:
		return forever(ctx)
	case h.wait == 0:
		return once(ctx)
	}
	return bounded(ctx, h.wait)
}

// holderList describes hs (a lock's or a semaphore's holders) for a
// not-acquired line.
func holderList(hs []redisync.Holder, unit string) string {
	if len(hs) == 0 {
		return "no holder now (it was freed meanwhile)"
	}
	s := "held by"
	for i, x := range hs {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf(" client %s (%d %s, lease %v left)", x.ClientID, x.Count, unit, x.Lease.Round(time.Millisecond))
	}
	return s
}
