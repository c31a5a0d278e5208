package redisync

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/holds"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/lease"
	"github.com/redisync-go/redisync/internal/notify"
	"github.com/redisync-go/redisync/lua"
)

// Leadership is who leads an election: the value its leader campaigned
// with and its term. Term 0 means that nobody leads (Value is then "").
type Leadership struct {
	Value string
	Term  int64
	// Err is set by Observe only, on a value that says the observer is
	// blind: it has been unable to read the election for longer than a
	// lease (Redis paused or unreachable), and Value and Term are the
	// last leader it knew, who may no longer lead. It is sent once; a
	// value without Err follows as soon as the observer reads the
	// election again, even when nothing changed.
	Err error
}

// Election is a leader election among the candidates that campaign on one
// name, in any process (etcd's concurrency.Election is the guide): at most
// one leads at a time, for as long as its leadership's context is live.
//
// Leadership is a hold, with a lease kept by the Client's watchdog (or a
// fixed one, WithLease), and the hold's promise: Campaign returns a
// context that is live exactly while its candidate leads, cancelled
// (cause ErrLeaseLost) before the lease can run out in Redis when it can
// no longer be renewed, so the leader is told before anyone else can lead.
// A leader whose process dies is replaced within one lease; one that
// resigns, or whose campaign's context ends, at once.
//
// Every leader gets a term, strictly greater than every earlier leader's
// of the name: a fencing token (see WithFencing) that a resource can use
// to refuse the writes of a leader that was stopped past its lease.
//
// In Redis an election is its name, a hash of the leader's owner field,
// value and term with a PEXPIRE lease, which exists exactly while someone
// leads; its term counter "{tag}:elect-term:<name>", which never expires;
// and its channel "{tag}:elect:<name>", on which every change is
// published: "<term> <value>" when a leader wins, "<term>" when that term
// has ended and nobody leads (tag is the name's hash tag, or the name:
// all three are in one Cluster slot).
//
// An Election is a cheap handle, safe for concurrent use.
type Election struct {
	c       *Client
	name    string
	keys    []string // the election, its term counter
	channel string
	spec    holds.Spec
	err     error
}

// Election returns a handle on the election name. Bad input (an empty
// name, a name that cannot share its slot with companion keys, a bad
// option) is reported by every method of the handle (Observe returns a
// closed channel).
//
// WithLease gives each leadership a fixed lease that the watchdog does not
// renew: a leader leads for that long at most; WithRenewedLease a lease
// of its own that the watchdog renews (a leader that crashes is replaced
// within it). These are its options (ElectionOption); an Election takes
// no WithFencing: its terms are its fencing tokens.
func (c *Client) Election(name string, opts ...ElectionOption) *Election {
	e := &Election{c: c, name: name, keys: []string{name, ""}}
	if keys.Taggable(name) {
		e.channel = keys.Companion(name, "elect")
		e.keys = []string{name, keys.Companion(name, "elect-term")}
	}
	e.spec.Wrap = wrapFor(c, "election", name, keyType{name, "hash"}, keyType{e.keys[1], "string"})
	if c == nil {
		e.err = e.spec.Wrap(fmt.Errorf("%w: nil Client", ErrInvalid))
		return e
	}
	lc, err := lockSetup(name, opts)
	if err == nil && !keys.Taggable(name) {
		err = fmt.Errorf("%w: election name %q contains \"}\" without a hash tag", ErrInvalid, name)
	}
	e.err = e.spec.Wrap(err)
	e.spec.Ref = lease.Ref{Owner: c, Kind: string(KindElection), Name: name}
	e.spec.Busy = (*electionBusy)(e)
	e.spec.Fenced = true // terms are its tokens
	e.spec.Lease, e.spec.Renewed = lc.leaseOf(c)
	return e
}

// Name returns the election's name, which is also its main Redis key ("" for
// a nil handle).
func (e *Election) Name() string {
	if e == nil {
		return ""
	}
	return e.name
}

func (e *Election) check(ctx context.Context) error {
	if e == nil {
		return fmt.Errorf("%w: nil Election", ErrInvalid)
	}
	if e.err != nil {
		return e.err
	}
	return e.wrap(usable(ctx, e.c, e.spec.Wrap))
}

func (e *Election) wrap(err error) error { return wrapOr(e.spec.Wrap, err) }

// Campaign makes the caller a candidate with value (what Leader and
// Observe report of it, such as the node's address), and blocks until it
// leads or ctx ends (then it returns an error that wraps ctx's error,
// leaving nothing behind; it says why Redis did not answer as Mutex.Lock's
// does). Candidates wait for the unlock of the
// leadership, woken by pub/sub when a leader resigns or its campaign's
// context ends, and bounded by the leader's lease when it crashes.
//
// It returns the leadership's context, derived from ctx: live exactly
// while the caller leads. It is cancelled with cause ErrLeaseLost when the
// lease can no longer be renewed (before another candidate can lead), and
// plainly by Resign; when ctx ends, the leadership ends too and the next
// candidate leads at once. Term reads its term. A Campaign through a
// context that leads this election already is refused (ErrInvalid): the
// leadership is not counted twice; WithOwner(ctx) campaigns as another
// candidate. On error, Campaign returns a nil context.
//
// To bound only the wait (a request's deadline that should not end the
// leadership), use TryCampaignFor.
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	return e.campaign(ctx, ctx, value, false)
}

// TryCampaignFor is Campaign waiting at most wait (wait > 0): after it, it
// returns an error wrapping ErrNotAcquired and a nil context, leaving
// nothing behind (a candidate whose winning reply comes after the bound
// gives the leadership back at once). The bound is on the wait only: a
// leadership it wins lasts as Campaign's does, as long as ctx, as a hold
// of Mutex.TryLockFor does. When ctx ends first, it returns ctx's error.
func (e *Election) TryCampaignFor(ctx context.Context, value string, wait time.Duration) (context.Context, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	if err := checkWait(wait); err != nil {
		return nil, e.wrap(err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return e.campaign(ctx, wctx, value, true)
}

// campaign campaigns for a leadership bound to parent, waiting as long as
// wctx lasts; bounded says wctx is TryCampaignFor's.
func (e *Election) campaign(parent, wctx context.Context, value string, bounded bool) (lctx context.Context, err error) {
	if err := e.check(parent); err != nil {
		return nil, err
	}
	if err := wctx.Err(); err != nil {
		return nil, e.wrap(errs.Wait(err, parent, bounded))
	}
	h, err := holds.Entry(parent, e.spec.Ref)
	if err != nil {
		return nil, e.wrap(err)
	}
	if h != nil {
		return nil, e.wrap(fmt.Errorf("%w: the context leads the election already (term %d): Resign first, or campaign as another candidate with WithOwner", ErrInvalid, h.Token))
	}
	leaseMs := e.spec.Lease.Milliseconds()
	var term atomic.Int64 // of the latest win, for its give-back
	a := e.c.holds.Begin(&e.spec, parent, wctx, true, nil, func(field string) call {
		return e.resign(field, term.Load())
	})
	defer func() { err = a.Finish(err) }()
	try := func() (bool, time.Duration, error) {
		field, r, d, err := a.Send(func(field string) call {
			return script(lua.ElectCampaign, e.keys, leaseMs, field, value, publish, e.channel)
		})
		if r == nil {
			return false, d, err
		}
		if r[0] != 1 {
			return false, lease.Bound(r[1], e.spec.Lease/3), nil
		}
		term.Store(a.Token)
		return a.Grant(field, 1, []call{script(lua.ElectRenew, e.keys[:1], field, leaseMs)})
	}
	done, next, err := try()
	if err == nil && !done {
		err = e.c.holds.Await(wctx, e.channel, wakeEnded, next, try)
	}
	if err != nil {
		return nil, e.wrap(errs.Wait(err, parent, bounded))
	}
	return a.HoldCtx, nil
}

// wakeEnded is an election's wake policy: a message that a term ended
// ("<term>") wakes one candidate; one that a leader won ("<term> <value>")
// wakes none, since somebody leads.
func wakeEnded(payload string) int {
	if strings.Contains(payload, " ") {
		return 0
	}
	return 1
}

// resign is the call that ends field's leadership of term (0: not known).
func (e *Election) resign(field string, term int64) call {
	return script(lua.ElectResign, e.keys, field, strconv.FormatInt(term, 10), publish, e.channel)
}

// Term returns the term of the leadership ctx carries, without a round
// trip: ok is false when ctx carries none (outside a WithOwner scope of
// ctx's). A term is strictly greater than the terms of every earlier
// leader of the election: pass it as a fencing token with every write the
// leader makes, and have the resource refuse a token lower than the
// highest it has seen (see WithFencing). It stays ctx's after the
// leadership ends; whether it is live is ctx.Err()'s to say.
func (e *Election) Term(ctx context.Context) (int64, bool) {
	if e == nil {
		return 0, false
	}
	return tokenOf(ctx, e.spec.Ref)
}

// Resign ends the leadership ctx carries: its context is cancelled, then
// the election is freed in Redis and the next candidate, in any process,
// leads at once (woken by pub/sub, without waiting for a lease). It works
// with a cancelled ctx. It returns nil when the leadership already ended
// with the context it was won with (at once: redisync frees the election in
// the background, as Mutex.Unlock says), and an error wrapping ErrNotHeld when
// ctx carries no leadership of this election, or one that has ended; that
// error also wraps ErrLeaseLost when the leadership was lost, as
// Mutex.Unlock tells it: by the leadership's local deadline (a process
// stopped past its lease learns it here), or by Redis no longer having it
// (a leadership lost before its deadline, a deleted key). It returns by the
// end of the context the leadership was won with at the latest, and within
// 5s, with the results Mutex.Unlock has then.
func (e *Election) Resign(ctx context.Context) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	return e.c.holds.Release(ctx, &e.spec, 1, func(ctx context.Context, h *lease.Hold, _ int) (int64, time.Time, error) {
		return e.c.holds.ReleaseBy(ctx, e.resign(h.Field, h.Token))
	})
}

// Leader returns who leads the election now, in one round trip: the
// leader's value and term, or Term 0 when nobody leads. A leader whose
// lease has run out in Redis is never reported.
func (e *Election) Leader(ctx context.Context) (Leadership, error) {
	if err := e.check(ctx); err != nil {
		return Leadership{}, err
	}
	st, err := e.read(ctx)
	return st.Leadership, e.wrap(err)
}

// electState is what one read of an election says.
type electState struct {
	Leadership
	pttl time.Duration // the leader's remaining lease
	last int64         // the latest term given
}

func (e *Election) read(ctx context.Context) (electState, error) {
	v, err := e.c.tr.Do(ctx, script(lua.ElectLeader, e.keys), nil).Slice()
	if err != nil {
		return electState{}, err
	}
	if len(v) != 4 {
		return electState{}, fmt.Errorf("redisync: unexpected reply %v", v)
	}
	term, _ := v[0].(int64)
	value, _ := v[1].(string)
	pttl, _ := v[2].(int64)
	last, _ := v[3].(int64)
	return electState{Leadership: Leadership{Value: value, Term: term}, pttl: time.Duration(pttl) * time.Millisecond, last: last}, nil
}

// Observe reports every change of the election's leader on the channel it
// returns: first who leads when it starts (a Leadership with Term 0 when
// nobody does), then each new leader, and Term 0 whenever a leadership
// ends with nobody leading after it. The channel is closed when ctx ends
// or the Client closes (at once for a bad handle or a closed Client).
//
// Changes come by pub/sub, within milliseconds. Each observer sees the
// leaders' terms in increasing order and never the same change twice: a
// message that comes late, after a newer change, is dropped. A message can
// be lost (a subscription connection dies), and a leader that crashes
// says nothing: while no message comes, the observer reads the election
// again at least every third of its handle's lease (the Client's watchdog
// timeout, or WithLease), and when the leader's lease seen at its last
// read would end, and as soon as its subscription is back; so a lost
// message costs a delay, never a hang, and a change that came and went
// meanwhile is not seen. The observer takes a
// change only when the previous one has been received from the channel:
// a reader that falls behind sees the latest state, not every step.
//
// An observer that cannot read the election (Redis paused, unreachable)
// says so rather than go on reporting a leader it cannot see: once it has
// been unable to read it, and has had no message, for longer than its
// handle's lease, it sends the last leader it told with Err set (once),
// and as soon as it reads the election again a value without Err, even
// when nothing changed (with the leader's term, which may then be the
// one of the value with Err). Its reads are bounded so that a read
// hanging on a silent Redis does not delay that.
func (e *Election) Observe(ctx context.Context) <-chan Leadership {
	out := make(chan Leadership)
	if e.check(ctx) != nil {
		close(out)
		return out
	}
	w, err := e.c.ps.Watch(e.channel, wakeEnded)
	if err != nil {
		close(out)
		return out
	}
	if !e.c.holds.Go(func() { e.observe(ctx, w, out) }) {
		w.Leave()
		close(out)
	}
	return out
}

// observe is an observer's goroutine: see Observe.
func (e *Election) observe(ctx context.Context, w *notify.Waiter, out chan<- Leadership) {
	defer close(out)
	defer w.Leave()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-e.c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	emit := func(l Leadership) bool {
		select {
		case out <- l:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var seen watched
	lease := e.spec.Lease
	every := lease / 3
	// Subscribed first, so that no change after the first read is missed:
	// what came before the read, the read has.
	if w.Ready(ctx, every) != nil {
		return
	}
	w.Take()
	reread := true
	backoff := holds.RetryAfter // after a read that failed, doubled up to every
	read := time.Now()          // when it last read the election (or had news of it)
	blind := false              // it told that it cannot read the election
	for {
		next := every
		if reread {
			st, err := e.readWithin(ctx, e.readBound(read, blind))
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				e.c.log.Warn("redisync: an election's observer cannot read it; retrying", "name", e.name, "error", err)
				next, backoff = min(every, backoff), min(every, 2*backoff)
				if !blind && time.Since(read) >= lease {
					blind = true
					if !emit(seen.blind(e.wrap(fmt.Errorf("the observer could not read the election for %v: %w", time.Since(read).Round(time.Millisecond), err)))) {
						return
					}
				} else if !blind {
					// Tell it on time: read again when a lease has passed.
					next = min(next, max(time.Until(read.Add(lease)), time.Millisecond))
				}
			default:
				read, backoff = time.Now(), holds.RetryAfter
				l, ok := seen.state(st)
				if blind {
					// It sees again: said even when nothing changed.
					l, ok, blind = seen.cur, true, false
				}
				if ok && !emit(l) {
					return
				}
				if st.Term > 0 && st.pttl > 0 {
					next = min(next, st.pttl+time.Millisecond) // a crashed leader's end
				}
			}
		}
		msgs, missed := w.Take()
		if len(msgs) > 0 {
			read = time.Now()
		}
		for _, m := range msgs {
			l, ok, bad := seen.message(m)
			if bad {
				missed = true
			}
			if ok {
				blind = false
				if !emit(l) {
					return
				}
			}
		}
		if reread = missed; reread {
			continue
		}
		woken, err := w.Wait(ctx, next)
		if err != nil {
			return
		}
		reread = !woken
	}
}

// readBound is how long an observer's read may take: a third of the
// lease, and no longer than until a lease has passed since it last read
// (read), so that a read hanging on a paused Redis does not keep it from
// telling that it is blind.
func (e *Election) readBound(read time.Time, blind bool) time.Duration {
	d := e.spec.Lease / 3
	if !blind {
		d = min(d, max(time.Until(read.Add(e.spec.Lease)), time.Millisecond))
	}
	return d
}

// readWithin is read bounded by d.
func (e *Election) readWithin(ctx context.Context, d time.Duration) (electState, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return e.read(ctx)
}

// watched is what an observer has told, to drop what it has told already
// and what comes late.
type watched struct {
	last int64      // the highest term known to have begun or ended
	none bool       // the latest change told was that nobody leads
	told bool       // something has been told
	cur  Leadership // the latest change told
}

// lead takes the news that the leader of term t, with value v, won.
func (s *watched) lead(t int64, v string) (Leadership, bool) {
	if s.told && t <= s.last {
		return Leadership{}, false
	}
	s.last, s.none, s.told = t, false, true
	s.cur = Leadership{Value: v, Term: t}
	return s.cur, true
}

// blind is the value that tells that the observer cannot read the
// election, with err: the latest change told.
func (s *watched) blind(err error) Leadership {
	l := s.cur
	l.Err = err
	return l
}

// ended takes the news that term t ended, and nobody leads after it.
func (s *watched) ended(t int64) (Leadership, bool) {
	if s.told && t < s.last {
		return Leadership{}, false
	}
	s.last = t
	if s.told && s.none {
		return Leadership{}, false
	}
	s.none, s.told, s.cur = true, true, Leadership{}
	return Leadership{}, true
}

// state takes a read of the election. A read is newer than every message
// told before it, so when it finds that nobody leads, nobody does, even
// when its term counter is below the last term told: Redis lost the
// counter with its data, and with it the leadership.
func (s *watched) state(st electState) (Leadership, bool) {
	if st.Term > 0 {
		return s.lead(st.Term, st.Value)
	}
	return s.ended(max(st.last, s.last))
}

// message takes a message of the election's channel; bad reports one it
// cannot read.
func (s *watched) message(payload string) (l Leadership, ok, bad bool) {
	ts, value, won := strings.Cut(payload, " ")
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || t <= 0 {
		return Leadership{}, false, true
	}
	if won {
		l, ok = s.lead(t, value)
	} else {
		l, ok = s.ended(t)
	}
	return l, ok, false
}
