package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a reply says about its call's next step. The engine knows, for each
// attempt, whether the call was written and what Redis answered:
//
//   - NOSCRIPT: the script did not run; it is sent again whole (EVAL), at
//     once, also for a caller who left (a release that is not the last one
//     must run, to be counted).
//   - LOADING, BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN: Redis refused it
//     without running it, for now; it is sent again after a pause, within
//     its bound (retryBound), unless it is Once.
//   - MOVED: its slot is served elsewhere; the slot map learns it at once
//     and the call goes there. ASK: its key is being migrated; the call is
//     sent to the node named, after ASKING, once. Past redirectsAtOnce,
//     a call is redirected after a pause, within its bound.
//   - READONLY: the server is no primary any more (a failover); the
//     switch is told (follow.go), and the call is sent to the primary now,
//     after a pause.
//   - Not written (no connection, or its connection failed before the
//     call was written whole): it did not run; it is sent again on another
//     connection, after a pause when it fails again, within its bound.
//   - Written, no reply (its connection failed after the write): it may
//     have run; it is never sent again, and its error says so (ErrNoReply).
//
// A caller who left has only NOSCRIPT followed: any other refusal goes to
// its give-back as it is (nothing ran).

// The next steps.
const (
	stepDone  = iota // the reply is the call's
	stepAgain        // send it again now
	stepPause        // send it again after a pause
)

// redirectsAtOnce is how many MOVED and ASK replies one call follows at
// once; it follows any further one after a pause, within its bound. While
// a slot's new owner is being agreed on (a migration ending, a failover),
// two masters can each name the other for seconds: a call sent back and
// forth at once would give up in microseconds.
const redirectsAtOnce = 2

// Pauses before a Call that Redis refused for now is sent again: the
// first, doubling up to the last.
const (
	notNowPause    = 10 * time.Millisecond
	notNowMaxPause = 200 * time.Millisecond
)

// next returns s's next step after o's outcome (n: the node it went to,
// nil when not known); gone: its caller left.
func (t *Transport) next(s *sendState, o *op, n *node, gone bool) int {
	err := o.err
	if err == nil && o.v.kind != kindErr {
		return stepDone
	}
	s.askAddr = ""
	if err == nil {
		msg := o.v.s
		switch {
		case s.k.Script != nil && strings.HasPrefix(msg, "NOSCRIPT"):
			s.eval = true
			return stepAgain
		case gone:
			return stepDone
		case strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK "):
			ask, slot, addr, ok := redirect(msg)
			if !ok {
				return stepDone
			}
			if ask {
				s.askAddr = addr
			} else {
				t.moved(slot, addr)
			}
			s.redirects++
			if s.redirects <= redirectsAtOnce {
				return stepAgain
			}
			return t.later(s)
		case strings.HasPrefix(msg, "READONLY"):
			t.readOnly(n)
			return t.later(s)
		case notNow(msg):
			return t.later(s)
		}
		return stepDone
	}
	if gone || !o.again || errors.Is(err, errClosed) || errors.Is(err, redis.ErrClosed) {
		return stepDone
	}
	if errors.Is(err, ErrNotPrimary) {
		// The server it was routed to is no longer the primary (a
		// failover): as after READONLY, sent again after a pause,
		// within its bound, once the route was read again.
		return t.later(s)
	}
	// Not written, on the engine's side: sent again once, at once, on
	// another connection (one Redis closed while idle, say); a second
	// failure (no connection to be had: Redis refuses them, the primary
	// is down) goes to the layer above, which keeps a release and waits
	// out a wait, rather than hold the caller here.
	if s.again == 0 {
		s.again++
		return stepAgain
	}
	return stepDone
}

// later returns stepPause when s's call may be sent again after its next
// pause, within its bound, and stepDone otherwise.
func (t *Transport) later(s *sendState) int {
	if s.k.Once || !time.Now().Add(pauseOf(s.tries)).Before(s.until) {
		return stepDone
	}
	return stepPause
}

func pauseOf(tries int) time.Duration {
	return min(notNowPause<<min(tries, 8), notNowMaxPause)
}

// pause waits before s's call is sent again (at most until its bound), or
// until ctx ends: then its error says so, with last, the last attempt's
// outcome.
func (t *Transport) pause(ctx context.Context, s *sendState, last *op) error {
	d := min(pauseOf(s.tries), time.Until(s.until))
	s.tries++
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
	}
	err := last.err
	why := "Redis could not be reached"
	if err == nil {
		err, why = RedisError(last.v.s), "refused by Redis"
	}
	return fmt.Errorf("redisync: %w (its caller left; %s, the last attempt: %w): %w", ErrNotSent, why, err, context.Cause(ctx))
}

// notNow reports a reply by which Redis refused a command before running
// it, for a while: TRYAGAIN (a command on several keys of a slot being
// migrated, some of which are on the other side, or a script that refused
// itself there before writing anything: lua/migrating.lua), CLUSTERDOWN,
// LOADING, BUSY (a script runs too long), MASTERDOWN.
func notNow(msg string) bool {
	for _, p := range [...]string{"TRYAGAIN", "CLUSTERDOWN", "LOADING", "BUSY ", "MASTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// redirect reads a MOVED or ASK reply: ask tells which, slot and addr
// where the slot (MOVED) or the key (ASK) is now.
func redirect(msg string) (ask bool, slot int, addr string, ok bool) {
	f := strings.Fields(msg) // MOVED|ASK <slot> <addr>
	if len(f) != 3 || f[0] != "MOVED" && f[0] != "ASK" {
		return false, 0, "", false
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil || slot < 0 || slot > 16383 {
		return false, 0, "", false
	}
	return f[0] == "ASK", slot, f[2], true
}

// retryBound returns until when a Call made now with ctx may be sent again
// after a Reply that refused it for now: ctx's deadline, at most
// Options.ReleaseTimeout from now.
func (t *Transport) retryBound(ctx context.Context) time.Time {
	until := time.Now().Add(t.opt.ReleaseTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d
	}
	return until
}
