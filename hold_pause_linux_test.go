package redisync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// Issue 19, items 1 and 2, with a real process: a child (this test binary,
// re-run as TestHelperPausedHolder, on one CPU) holds a lock, is stopped
// (SIGSTOP) for twice its lease and continued (SIGCONT). The first thing
// its code does on resuming, before any of its timers can have run, is to
// look at the hold's contexts and then to release the hold. Every context
// of the hold (the hold's own, a re-entry's, a downgrade's) must already
// say that the lease is lost, Done must be closed, a context the user
// derived from it must have followed, and every Unlock must report
// ErrLeaseLost: the hold was not exclusive throughout. In the "taken"
// trials this test holds the lock meanwhile; in the "gone" ones the
// child's key just expired.
func TestPausedHolderIsToldAtOnce(t *testing.T) {
	t.Parallel() // its own servers, mostly waiting
	srv := redistest.Start(t)
	bg := context.Background()
	ch := startChild(t, "TestHelperPausedHolder", pausedChildEnv+"="+srv.Addr(), "GOMAXPROCS=1")
	next := ch.next
	c := newClient(t, srv.Client(t))
	admin := srv.Client(t)
	for i, tr := range pausedTrials {
		name := tr.name(i)
		next(fmt.Sprintf("ready %d ", i))
		ch.signal(syscall.SIGSTOP)
		stoppedAt := time.Now()
		var release func() error
		if tr.taken {
			// Another owner takes it once the child's lease has run out.
			wctx, cancel := context.WithTimeout(bg, 10*time.Second)
			var err error
			release, err = pausedRival(wctx, c, tr.kind, name)
			cancel()
			require.NoError(t, err, "trial %d (%s): the stopped child's lease runs out", i, tr)
		}
		time.Sleep(time.Until(stoppedAt.Add(2 * pausedLease)))
		ch.signal(syscall.SIGCONT)

		got := pausedFields(next(fmt.Sprintf("result %d ", i)))
		t.Logf("trial %d (%s): %v", i, tr, got)
		for k, v := range got {
			switch {
			case strings.HasSuffix(k, ".err"):
				assert.Equal(t, "canceled", v, "trial %d (%s): %s: the context must be done at once on resuming", i, tr, k)
			case strings.HasSuffix(k, ".cause"), strings.HasSuffix(k, ".unlock"):
				assert.Equal(t, "lease lost", v, "trial %d (%s): %s", i, tr, k)
			case strings.HasSuffix(k, ".done"):
				assert.Equal(t, "closed", v, "trial %d (%s): %s: Done must be closed by the first check", i, tr, k)
			}
		}
		if release != nil {
			assert.NoError(t, release(), "trial %d (%s): the other owner's hold was genuine", i, tr)
		}
		eventually(t, 5*time.Second, "nothing of "+name+" left in Redis", func() bool {
			ks, err := admin.Keys(bg, "*"+name+"*").Result()
			if tr.kind == "semaphore" { // its total stays
				ks = slices.DeleteFunc(ks, func(k string) bool { return k == name })
			}
			if tr.kind == "election" { // its term counter stays
				ks = slices.DeleteFunc(ks, func(k string) bool { return strings.Contains(k, ":elect-term:") })
			}
			return err == nil && len(ks) == 0
		})
	}
	next("done")
}

const (
	pausedChildEnv = "REDISYNC_PAUSED_CHILD"
	pausedLease    = 300 * time.Millisecond
)

// pausedTrial is one stop of the child: the kind of lock it holds, and
// whether another owner takes it meanwhile.
type pausedTrial struct {
	kind  string // "mutex", "mutex fixed" (WithLease), "fair", "rw write", "rw read", "semaphore", "multilock", "election"
	taken bool
	first string // the context the child looks at first on resuming, or "unlock": it unlocks first
}

func (tr pausedTrial) String() string {
	if tr.taken {
		return tr.kind + ", taken meanwhile, " + tr.first + " first"
	}
	return tr.kind + ", key expired, " + tr.first + " first"
}

func (tr pausedTrial) name(i int) string {
	return fmt.Sprintf("paused:%d:%s", i, strings.ReplaceAll(tr.kind, " ", "-"))
}

var pausedTrials = []pausedTrial{
	{"mutex", true, "hold"},
	{"mutex", false, "reentry"},
	{"mutex fixed", true, "reentry"},
	{"mutex fixed", false, "hold"},
	{"fair", true, "reentry"},
	{"fair", false, "hold"},
	{"rw write", true, "downgrade"},
	{"rw write", false, "reentry"},
	{"rw read", true, "hold"},
	{"rw read", false, "reentry"},
	{"semaphore", true, "reentry"},
	{"semaphore", false, "hold"},
	// Unlock at once on resuming, before looking at any context.
	{"mutex", true, "unlock"},
	{"mutex fixed", false, "unlock"},
	{"fair", true, "unlock"},
	{"rw write", false, "unlock"},
	{"rw read", true, "unlock"},
	{"semaphore", false, "unlock"},
	{"multilock", true, "reentry"},
	{"multilock", false, "unlock"},
	{"election", true, "hold"},
	{"election", false, "unlock"},
}

// pausedRival takes the lock the child holds in a trial of kind, as
// another owner would; it returns how to release it.
func pausedRival(ctx context.Context, c *Client, kind, name string) (func() error, error) {
	switch kind {
	case "mutex", "mutex fixed":
		m := c.Mutex(name)
		hctx, err := m.Lock(ctx)
		return func() error { return m.Unlock(hctx) }, err
	case "fair":
		f := c.FairMutex(name)
		hctx, err := f.Lock(ctx)
		return func() error { return f.Unlock(hctx) }, err
	case "rw write", "rw read":
		r := c.RWMutex(name)
		hctx, err := r.Lock(ctx)
		return func() error { return r.Unlock(hctx) }, err
	case "multilock": // a Mutex of one of its names
		m := c.Mutex(name + ":b")
		hctx, err := m.Lock(ctx)
		return func() error { return m.Unlock(hctx) }, err
	case "election":
		e := c.Election(name)
		hctx, err := e.Campaign(ctx, "rival")
		return func() error { return e.Resign(hctx) }, err
	default:
		s := c.Semaphore(name)
		hctx, err := s.Acquire(ctx, pausedPermits)
		return func() error { return s.Release(hctx, pausedPermits) }, err
	}
}

// pausedPermits is the total of the trials' semaphores; the child holds
// all of them (one, then one more through a re-entry).
const pausedPermits = 2

// pausedFields parses "result <i> k=v k=v ...".
func pausedFields(line string) map[string]string {
	m := map[string]string{}
	for _, f := range strings.Fields(line)[2:] {
		k, v, _ := strings.Cut(f, "=")
		m[k] = strings.ReplaceAll(v, "_", " ")
	}
	return m
}

// TestHelperPausedHolder is the child process of
// TestPausedHolderIsToldAtOnce (skipped unless that test started it). It
// reports on stdout, each line prefixed "child: ".
func TestHelperPausedHolder(t *testing.T) {
	c, _ := childClient(t, pausedChildEnv, "TestPausedHolderIsToldAtOnce", pausedLease)
	say := childSays
	bg := context.Background()

	for i, tr := range pausedTrials {
		name := tr.name(i)
		type held struct {
			what   string
			ctx    context.Context
			unlock func(context.Context) error
		}
		var hs []held // released in this order on resuming
		var lctx, rctx, dctx context.Context
		lock := func(l func(context.Context) (context.Context, error), ctx context.Context) context.Context {
			hctx, err := l(ctx)
			require.NoError(t, err, "trial %d (%s)", i, tr)
			return hctx
		}
		// A trial that unlocks first holds the lock once (no re-entry),
		// so that its first Unlock is the hold's last.
		again := func(l func(context.Context) (context.Context, error), ctx context.Context) context.Context {
			if tr.first == "unlock" {
				return nil
			}
			return lock(l, ctx)
		}
		switch tr.kind {
		case "mutex", "mutex fixed":
			m := c.Mutex(name)
			if tr.kind == "mutex fixed" {
				m = c.Mutex(name, WithLease(pausedLease))
			}
			lctx = lock(m.Lock, bg)
			rctx = again(m.Lock, context.WithoutCancel(lctx))
			hs = []held{{"reentry", rctx, m.Unlock}, {"hold", lctx, m.Unlock}}
		case "fair":
			f := c.FairMutex(name)
			lctx = lock(f.Lock, bg)
			rctx = again(f.Lock, context.WithoutCancel(lctx))
			hs = []held{{"reentry", rctx, f.Unlock}, {"hold", lctx, f.Unlock}}
		case "rw write":
			r := c.RWMutex(name)
			lctx = lock(r.Lock, bg)
			rctx = again(r.Lock, context.WithoutCancel(lctx))
			dctx = lock(r.RLock, lctx)
			hs = []held{{"reentry", rctx, r.Unlock}, {"hold", lctx, r.Unlock}, {"downgrade", dctx, r.RUnlock}}
		case "rw read":
			r := c.RWMutex(name)
			lctx = lock(r.RLock, bg)
			rctx = again(r.RLock, context.WithoutCancel(lctx))
			hs = []held{{"reentry", rctx, r.RUnlock}, {"hold", lctx, r.RUnlock}}
		case "semaphore":
			s := c.Semaphore(name)
			require.NoError(t, s.SetPermits(bg, pausedPermits))
			acquire := func(ctx context.Context) (context.Context, error) { return s.Acquire(ctx, 1) }
			release := func(ctx context.Context) error { return s.Release(ctx, 1) }
			lctx = lock(acquire, bg)
			rctx = again(acquire, context.WithoutCancel(lctx))
			hs = []held{{"reentry", rctx, release}, {"hold", lctx, release}}
		case "multilock":
			m := c.MultiLock([]string{name + ":a", name + ":b"})
			lctx = lock(m.Lock, bg)
			rctx = again(m.Lock, context.WithoutCancel(lctx))
			hs = []held{{"reentry", rctx, m.Unlock}, {"hold", lctx, m.Unlock}}
		case "election": // a leadership is not re-entered
			e := c.Election(name)
			lctx = lock(func(ctx context.Context) (context.Context, error) { return e.Campaign(ctx, "child") }, bg)
			hs = []held{{"hold", lctx, e.Resign}}
		}
		hs = slices.DeleteFunc(hs, func(h held) bool { return h.ctx == nil })
		derived, cancel := context.WithCancel(lctx)
		defer cancel()
		// Look first at the trial's first context, then at the others.
		for j, h := range hs {
			if h.what == tr.first {
				hs[0], hs[j] = hs[j], hs[0]
			}
		}
		for _, h := range hs {
			require.NoError(t, h.ctx.Err(), "trial %d (%s): %s live before the stop", i, tr, h.what)
		}

		// Wait, spinning on one CPU, for the stop: it shows as a jump of
		// the (monotonic) clock. Spinning keeps the runtime from running
		// the hold's timers before the checks below on resuming.
		prev := time.Now() // before saying ready: the stop may come at once
		say("ready %d %s", i, tr)
		var gap time.Duration
		for limit := time.Now().Add(time.Minute); ; {
			now := time.Now()
			if gap = now.Sub(prev); gap > pausedLease*3/2 {
				break
			}
			if now.After(limit) {
				say("never stopped")
				return
			}
			prev = now
		}
		var out []string
		word := func(s string) string { return strings.ReplaceAll(s, " ", "_") }
		unlock := func() {
			for _, h := range hs {
				err := h.unlock(h.ctx)
				res := "nil"
				switch {
				case errors.Is(err, ErrLeaseLost) && errors.Is(err, ErrNotHeld):
					res = "lease lost"
				case err != nil:
					res = err.Error()
				}
				out = append(out, h.what+".unlock="+word(res))
			}
		}
		if tr.first == "unlock" {
			unlock()
		}
		for _, h := range hs {
			errText := "nil"
			if err := h.ctx.Err(); errors.Is(err, context.Canceled) {
				errText = "canceled"
			} else if err != nil {
				errText = word(err.Error())
			}
			cause := "nil"
			if err := context.Cause(h.ctx); errors.Is(err, ErrLeaseLost) {
				cause = "lease lost"
			} else if err != nil {
				cause = err.Error()
			}
			done := "open"
			select {
			case <-h.ctx.Done():
				done = "closed"
			default:
			}
			out = append(out, h.what+".err="+errText, h.what+".cause="+word(cause), h.what+".done="+done)
		}
		derivedErr := "nil"
		if derived.Err() != nil {
			derivedErr = "canceled"
		}
		out = append(out, "derived.err="+derivedErr)
		cancel()
		if tr.first != "unlock" {
			unlock()
		}
		say("result %d %s gap=%v", i, strings.Join(out, " "), gap.Round(time.Millisecond))
	}
	say("done")
}
