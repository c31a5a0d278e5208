package redisync

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/lua"
)

// call is one script invocation, kept so it can be pipelined again.
type call struct {
	script *lua.Script
	keys   []string
	args   []any
}

// hold is one owner's hold on one lock (or on one semaphore's permits) in this
// process. While it is in the watchdog's table its lease is kept alive (or, for
// a fixed lease, watched), and its context is live.
type hold struct {
	id      string        // table key: the lock's key and the owner's field
	lease   time.Duration // the lease the scripts set
	renewed bool          // renewed by the watchdog; false for a fixed lease
	renew   call          // returns 1 while held, 0 once gone
	release call          // gives up the whole hold (Close)
	count   int           // hold count, guarded by the owner's mu
	ctx     context.Context
	cancel  context.CancelCauseFunc
	mu      sync.Mutex // guards sent, timer
	sent    time.Time  // when the newest successful renewal was sent
	timer   *time.Timer
	removed bool
}

// watchdog owns a Client's table of holds and the one goroutine that renews
// their leases: every interval (lease/3) it renews all of them in pipelined
// batches, so 10,000 holds cost a handful of round trips, not 10,000 timers.
//
// Each hold also has a local deadline, counted from when its newest successful
// renewal was sent, a margin before Redis could let its lease expire. A timer
// fires it independently of the renewal loop, so a renewal stuck on a silent
// connection cannot keep a holder from hearing that its lease is gone before
// anyone else can take the lock.
type watchdog struct {
	rdb      redis.UniversalClient
	lease    time.Duration
	interval time.Duration

	mu     sync.Mutex
	holds  map[string]*hold
	closed bool

	stop chan struct{}
	done chan struct{}
}

// batchSize bounds one pipeline; 10,000 holds take 5 round trips per tick.
const batchSize = 2000

func newWatchdog(rdb redis.UniversalClient, lease time.Duration) *watchdog {
	w := &watchdog{
		rdb:      rdb,
		lease:    lease,
		interval: lease / 3,
		holds:    map[string]*hold{},
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	go w.run()
	return w
}

// margin is how long before a lease's expiry in Redis its holder is told it
// is lost: room for the difference between the two clocks' rates and for the
// holder to react.
func margin(lease time.Duration) time.Duration { return lease / 10 }

// get returns the live hold with id, or nil.
func (w *watchdog) get(id string) *hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.holds[id]
}

// add registers h, whose lease was set by a script sent at sent. It reports
// false, registering nothing, once the client is closed.
func (w *watchdog) add(h *hold, sent time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if old := w.holds[h.id]; old != nil {
		// A hold the process had lost track of; replaced, not leaked.
		go w.lose(old, ErrLeaseLost)
	}
	w.holds[h.id] = h
	h.mu.Lock()
	h.sent = sent
	h.timer = time.AfterFunc(time.Until(sent.Add(h.lease-margin(h.lease))), func() { w.lose(h, ErrLeaseLost) })
	h.mu.Unlock()
	return true
}

// extend moves h's local deadline after a script sent at sent set its lease.
func (w *watchdog) extend(h *hold, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.removed || !sent.After(h.sent) {
		return
	}
	h.sent = sent
	h.timer.Reset(time.Until(sent.Add(h.lease - margin(h.lease))))
}

// remove takes h out of the table and stops its deadline. It reports whether
// h was still there; only one caller ever gets true.
func (w *watchdog) remove(h *hold) bool {
	w.mu.Lock()
	if w.holds[h.id] == h {
		delete(w.holds, h.id)
	}
	w.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.removed {
		return false
	}
	h.removed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	return true
}

// lose removes h and cancels its context with cause.
func (w *watchdog) lose(h *hold, cause error) {
	if w.remove(h) {
		h.cancel(cause)
	}
}

// unhold gives up one hold of h: send runs the release script with the hold
// count before it and returns the script's reply (1: holds remain, 2: the
// last was released, 0: not held, nothing changed). Renewals of a last hold
// stop before the script is sent, so none can follow it. It returns
// ErrNotHeld (h is then lost) or send's error, unwrapped. The caller holds
// the owner's mu.
func (w *watchdog) unhold(h *hold, send func(count int) (int64, error)) error {
	count := h.count
	last := count == 1
	if last {
		w.remove(h)
	}
	sent := time.Now()
	reply, err := send(count)
	switch {
	case err != nil:
		if last {
			h.cancel(nil) // Redis frees it when its lease ends
		}
		return err
	case reply == 0:
		w.lose(h, ErrLeaseLost)
		h.cancel(ErrLeaseLost) // no-op unless already removed above
		return ErrNotHeld
	case reply == 1:
		h.count = count - 1
		w.extend(h, sent)
	default:
		h.cancel(nil)
	}
	return nil
}

// loseAll cancels, with ErrLeaseLost, every hold whose id starts with prefix.
func (w *watchdog) loseAll(prefix string) {
	w.mu.Lock()
	var hs []*hold
	for id, h := range w.holds {
		if strings.HasPrefix(id, prefix) {
			hs = append(hs, h)
		}
	}
	w.mu.Unlock()
	for _, h := range hs {
		w.lose(h, ErrLeaseLost)
	}
}

// snapshot returns the holds the watchdog renews.
func (w *watchdog) snapshot() []*hold {
	w.mu.Lock()
	defer w.mu.Unlock()
	hs := make([]*hold, 0, len(w.holds))
	for _, h := range w.holds {
		if h.renewed {
			hs = append(hs, h)
		}
	}
	return hs
}

func (w *watchdog) run() {
	defer close(w.done)
	t := time.NewTimer(w.interval)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		// Ticks are counted from the start of a round, so a slow round
		// does not stretch the time between two renewals of a lease.
		start := time.Now()
		next := w.interval
		if !w.renewAll() {
			// Retry failed renewals sooner, so a blip costs little of
			// the lease; the deadlines still stand.
			next = min(w.interval/3, time.Second)
		}
		t.Reset(max(next-time.Since(start), 0))
	}
}

// renewAll renews every renewed hold, reporting false if any renewal failed
// for a reason other than the hold being gone.
func (w *watchdog) renewAll() bool {
	hs := w.snapshot()
	ok := true
	for len(hs) > 0 {
		n := min(len(hs), batchSize)
		if !w.renewBatch(hs[:n]) {
			ok = false
		}
		hs = hs[n:]
	}
	return ok
}

func (w *watchdog) renewBatch(hs []*hold) bool {
	ctx := context.Background()
	sent := time.Now()
	cmds := w.exec(ctx, hs, false)
	var retry []*hold
	var retryIdx []int
	for i, cmd := range cmds {
		if lua.IsNoScript(cmd.Err()) {
			retry = append(retry, hs[i])
			retryIdx = append(retryIdx, i)
		}
	}
	if len(retry) > 0 {
		// Redis lost its script cache (a restart): send the source.
		sent2 := time.Now()
		for j, cmd := range w.exec(ctx, retry, true) {
			cmds[retryIdx[j]] = cmd
		}
		sent = sent2
	}
	ok := true
	for i, cmd := range cmds {
		h := hs[i]
		n, err := cmd.Int64()
		switch {
		case err == nil && n == 1:
			w.extend(h, sent)
		case err == nil || isGone(err):
			w.lose(h, ErrLeaseLost)
		default:
			ok = false // transient: retried until the deadline fires
		}
	}
	return ok
}

// exec pipelines the renewal of hs, as EVALSHA or, with eval, as EVAL.
func (w *watchdog) exec(ctx context.Context, hs []*hold, eval bool) []*redis.Cmd {
	pipe := w.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(hs))
	for i, h := range hs {
		r := h.renew
		if eval {
			cmds[i] = r.script.PipeEval(ctx, pipe, r.keys, r.args...)
		} else {
			cmds[i] = r.script.Pipe(ctx, pipe, r.keys, r.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command
	return cmds
}

// isGone reports whether a renewal error means the hold cannot exist any
// more: its key now holds another type of value.
func isGone(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(err.Error(), "WRONGTYPE")
}

// close stops the renewal loop and releases every hold best-effort, cancelling
// their contexts with cause ErrClosed (which wraps ErrLeaseLost).
func (w *watchdog) close() {
	w.mu.Lock()
	w.closed = true
	hs := make([]*hold, 0, len(w.holds))
	for _, h := range w.holds {
		hs = append(hs, h)
	}
	w.mu.Unlock()
	close(w.stop)
	<-w.done

	var live []*hold
	for _, h := range hs {
		if w.remove(h) {
			live = append(live, h)
		}
	}
	if len(live) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pipe := w.rdb.Pipeline()
		for _, h := range live {
			r := h.release
			r.script.Pipe(ctx, pipe, r.keys, r.args...)
		}
		cmds, _ := pipe.Exec(ctx)
		var again []*hold
		for i, cmd := range cmds {
			if lua.IsNoScript(cmd.Err()) {
				again = append(again, live[i])
			}
		}
		if len(again) > 0 {
			pipe = w.rdb.Pipeline()
			for _, h := range again {
				r := h.release
				r.script.PipeEval(ctx, pipe, r.keys, r.args...)
			}
			_, _ = pipe.Exec(ctx)
		}
		cancel()
	}
	for _, h := range live {
		h.cancel(errClosedHold)
	}
}

// errClosedHold is the cause of the contexts of holds ended by Close.
var errClosedHold = closedHoldError{}

type closedHoldError struct{}

func (closedHoldError) Error() string { return "redisync: client closed; lease released" }
func (closedHoldError) Is(target error) bool {
	return target == ErrClosed || target == ErrLeaseLost
}
