package matrix

import (
	"context"
	"fmt"
	"time"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/keys"
)

// primitive is one kind of lock as the matrix drives it: one small adapter
// per primitive. Adding a primitive is adding one value to primitives.
type primitive struct {
	name string
	// fencing says whether the matrix runs the primitive with WithFencing
	// (its holds then have tokens); when it does not, the pair is left out
	// of cells. A Semaphore does not take the option (it does not compile:
	// the root package's TestOptionsTyped); a fenced MultiLock has a token
	// per name (MultiLock.Token), which the matrix's one token per hold
	// does not model.
	fencing bool
	// setup prepares the lock named name before a cell's run, and again
	// after a fault that lost Redis's data (a Semaphore's permits).
	setup func(ctx context.Context, c *redisync.Client, name string) error
	// contender returns the i-th contender (0, 1, ...) for the lock named
	// name, through c and with opts.
	contender func(c *redisync.Client, name string, i int, opts []redisync.FencingOption) contender
	// residue returns the keys that may stay in Redis once nothing is
	// held (with WithFencing when fenced), and checks their content.
	residue func(name string, fenced bool) []string
	// idle checks, through c, that nothing holds the lock named name.
	idle func(ctx context.Context, c *redisync.Client, name string) error
}

// optsOf converts the matrix's lock options (WithFencing, or none) to the
// option type O of one constructor, with more after them.
func optsOf[O any](opts []redisync.FencingOption, more ...O) []O {
	out := make([]O, 0, len(opts)+len(more))
	for _, o := range opts {
		out = append(out, any(o).(O))
	}
	return append(out, more...)
}

// contender is one way of holding a primitive: its calls, and what a hold
// takes.
type contender struct {
	// acquire waits until the hold is granted or ctx ends, and returns the
	// hold's context: Lock, RLock, Acquire(n), Campaign.
	acquire func(ctx context.Context) (context.Context, error)
	// tryFor waits at most wait: TryLockFor... nil if the primitive has no
	// such call.
	tryFor func(ctx context.Context, wait time.Duration) (context.Context, error)
	// release ends the hold whose context is hctx: Unlock, RUnlock,
	// Release(n), Resign.
	release func(hctx context.Context) error
	// reenter re-enters the hold whose context is hctx, with hctx: Lock,
	// RLock; nil if the primitive has no re-entry of the same kind. Its
	// hold is left with release.
	reenter func(hctx context.Context) (context.Context, error)
	// token returns the hold's fencing token (Token, Term), and false when
	// it has none (taken without WithFencing); nil when the holds of this
	// contender never have one.
	token func(hctx context.Context) (int64, bool)
	// claims is what a hold takes: units of resources, each of which has
	// capacity units in all. An exclusive lock takes its one unit.
	claims []claim
}

// claim is units of a resource that has capacity units.
type claim struct {
	resource        string
	units, capacity int
}

func exclusive(name string) []claim { return []claim{{name, 1, 1}} }

// rwCapacity is an RWMutex's units: a reader takes one, a writer all.
const rwCapacity = 64

// semPermits is the matrix's Semaphores' total.
const semPermits = 2

var primitives = []*primitive{
	{
		name: "Mutex", fencing: true,
		contender: func(c *redisync.Client, name string, _ int, opts []redisync.FencingOption) contender {
			m := c.Mutex(name, optsOf[redisync.MutexOption](opts)...)
			return contender{acquire: m.Lock, tryFor: m.TryLockFor, release: m.Unlock, reenter: m.Lock, token: m.Token, claims: exclusive(name)}
		},
		residue: fenceOnly,
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			return notLocked(c.Mutex(name).IsLocked(ctx))
		},
	},
	{
		name: "FairMutex", fencing: true,
		contender: func(c *redisync.Client, name string, _ int, opts []redisync.FencingOption) contender {
			f := c.FairMutex(name, optsOf(opts, redisync.FairOption(redisync.WithWaiterTimeout(waiterTimeout)))...)
			return contender{acquire: f.Lock, tryFor: f.TryLockFor, release: f.Unlock, reenter: f.Lock, token: f.Token, claims: exclusive(name)}
		},
		residue: fenceOnly,
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			return notLocked(c.FairMutex(name).IsLocked(ctx))
		},
	},
	{
		// Writers (even contenders) and readers (odd ones) of one RWMutex.
		name: "RWMutex", fencing: true,
		contender: func(c *redisync.Client, name string, i int, opts []redisync.FencingOption) contender {
			r := c.RWMutex(name, optsOf(opts, redisync.RWOption(redisync.WithWaiterTimeout(waiterTimeout)))...)
			if i%2 == 0 {
				return contender{acquire: r.Lock, tryFor: r.TryLockFor, release: r.Unlock, reenter: r.Lock, token: r.Token,
					claims: []claim{{name, rwCapacity, rwCapacity}}}
			}
			return contender{acquire: r.RLock, tryFor: r.TryRLockFor, release: r.RUnlock, reenter: r.RLock,
				claims: []claim{{name, 1, rwCapacity}}}
		},
		residue: fenceOnly,
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			return notLocked(c.RWMutex(name).IsLocked(ctx))
		},
	},
	{
		// Contenders take one permit, every third one both.
		name: "Semaphore",
		setup: func(ctx context.Context, c *redisync.Client, name string) error {
			return c.Semaphore(name).SetPermits(ctx, semPermits)
		},
		contender: func(c *redisync.Client, name string, i int, opts []redisync.FencingOption) contender {
			s := c.Semaphore(name) // never fenced: opts is empty
			n := 1
			if i%3 == 2 {
				n = 2
			}
			return contender{
				acquire: func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, n) },
				tryFor: func(ctx context.Context, wait time.Duration) (context.Context, error) {
					return s.TryAcquireFor(ctx, n, wait)
				},
				release: func(hctx context.Context) error { return s.Release(hctx, n) },
				claims:  []claim{{name, n, semPermits}},
			}
		},
		residue: func(name string, _ bool) []string { return []string{name} },
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			n, err := c.Semaphore(name).Available(ctx)
			if err == nil && n != semPermits {
				err = fmt.Errorf("%d permits available, want all %d", n, semPermits)
			}
			return err
		},
	},
	{
		// Candidates campaign with their number; a term is a token, so
		// the fenced cells run it as the others (an Election takes no
		// WithFencing).
		name: "Election", fencing: true,
		contender: func(c *redisync.Client, name string, i int, _ []redisync.FencingOption) contender {
			e := c.Election(name)
			id := fmt.Sprint(i)
			return contender{
				acquire: func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, id) },
				release: e.Resign, token: e.Term, claims: exclusive(name),
			}
		},
		residue: func(name string, _ bool) []string { return []string{keys.Companion(name, "elect-term")} },
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			l, err := c.Election(name).Leader(ctx)
			if err == nil && l.Term != 0 {
				err = fmt.Errorf("%q leads (term %d)", l.Value, l.Term)
			}
			return err
		},
	},
	{
		// Contender i locks {name}:i%3 and {name}:(i+1)%3: overlapping
		// pairs of three names in one slot, so the fault hits them all.
		name: "MultiLock",
		contender: func(c *redisync.Client, name string, i int, opts []redisync.FencingOption) contender {
			a, b := multiName(name, i%3), multiName(name, (i+1)%3)
			m := c.MultiLock([]string{a, b}, optsOf[redisync.MultiLockOption](opts)...)
			return contender{acquire: m.Lock, tryFor: m.TryLockFor, release: m.Unlock, reenter: m.Lock,
				claims: append(exclusive(a), exclusive(b)...)}
		},
		residue: func(string, bool) []string { return nil },
		idle: func(ctx context.Context, c *redisync.Client, name string) error {
			for i := range 3 {
				if err := notLocked(c.Mutex(multiName(name, i)).IsLocked(ctx)); err != nil {
					return fmt.Errorf("%s: %w", multiName(name, i), err)
				}
			}
			return nil
		},
	},
}

// multiName is the i-th name of the MultiLock contenders of the lock name.
func multiName(name string, i int) string { return fmt.Sprintf("{%s}:%d", name, i) }

// fenceOnly is the residue of a lock that keeps nothing but its fencing
// counter.
func fenceOnly(name string, fenced bool) []string {
	if fenced {
		return []string{keys.Companion(name, "fence")}
	}
	return nil
}

func notLocked(locked bool, err error) error {
	if err == nil && locked {
		err = fmt.Errorf("still locked")
	}
	return err
}

func primitiveNamed(name string) *primitive {
	for _, p := range primitives {
		if p.name == name {
			return p
		}
	}
	return nil
}
