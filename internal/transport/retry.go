package transport

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// notNow reports a Reply by which Redis refused a command before running
// it, for a while: TRYAGAIN (a command on several keys of a slot being
// migrated, some of which are on the other side, or a script that refused
// itself there before writing anything: lua/migrating.lua), CLUSTERDOWN,
// LOADING.
func notNow(err error) bool {
	if err == nil {
		return false // the common case, without errors.As's allocation
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "TRYAGAIN") || strings.HasPrefix(msg, "CLUSTERDOWN") || strings.HasPrefix(msg, "LOADING")
}

// Pauses before a Call that Redis refused for now is sent again: the
// first, doubling up to the last.
const (
	notNowPause    = 10 * time.Millisecond
	notNowMaxPause = 200 * time.Millisecond
)

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

// retry sends o, whose Reply o.r refused it for now, again after a pause,
// if its caller still waits (or nobody does: async) and the pause ends
// within o's bound; otherwise it delivers o.r.
func (t *Transport) retry(o *op) {
	pause := min(notNowPause<<min(o.tries, 8), notNowMaxPause)
	if o.Once || !time.Now().Add(pause).Before(o.until) || o.done != nil && !o.waited() {
		o.deliver(o.r)
		return
	}
	o.tries++
	o.redirects = 0
	t.workers.Add(1)
	time.AfterFunc(pause, func() {
		defer t.workers.Add(-1)
		if o.done != nil && !o.waited() {
			o.deliver(o.r) // the caller left: to its give-back
			return
		}
		refused(&o.Call)
		t.submit(o)
	})
}
