package redisync

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// The fenced holders of TestChaos: a Mutex taken WithFencing, whose holders
// write to a resource outside Redis (here, in the test) that refuses a token
// lower than the highest it has seen, as the README says to. Across every
// fault, restarts that lose the data included:
//
//   - tokens keep increasing: a first acquisition's token is above every
//     token of the acquisitions that returned before its call began;
//   - the resource is never locked out: a holder whose call began after the
//     acquisition of the token the resource holds had returned is never
//     refused (before issue 19, a restart that lost the counter had every
//     later holder refused).

// chaosFence is the fenced holders' shared state.
type chaosFence struct {
	mu       sync.Mutex
	got      []time.Time // when each acquisition returned, in order
	maxUpTo  []int64     // the highest token among got[:i+1]
	highest  int64       // the highest token given so far
	resource int64       // the highest token the resource has seen
	resGot   time.Time   // when the acquisition of that token returned
	accepted int
	refused  int
	tokens   int
	restarts int // restarts that lost the data while a fenced holder held
}

// chaosFencedOps is a fenced Mutex as a plain lock, with its token.
func chaosFencedOps(m *Mutex, tr *chaosTracker) chaosOps {
	ops := chaosMutexOps(m, tr)
	ops.prim = "FencedMutex"
	ops.token = m.Token
	return ops
}

// acquired checks the token of a first acquisition whose call began at
// began and returned at ret, and records it.
func (ch *chaos) fenceAcquired(who string, token int64, began, ret time.Time) {
	f := &ch.fence
	f.mu.Lock()
	// The acquisitions that returned before began.
	i := sort.Search(len(f.got), func(i int) bool { return !f.got[i].Before(began) })
	before := int64(0)
	if i > 0 {
		before = f.maxUpTo[i-1]
	}
	if len(f.got) == 0 || !ret.Before(f.got[len(f.got)-1]) {
		f.got = append(f.got, ret)
		f.maxUpTo = append(f.maxUpTo, max(token, f.highest))
	}
	f.highest = max(f.highest, token)
	f.tokens++
	f.mu.Unlock()
	if token <= before {
		ch.violate("fencing token did not increase: %s got %d (call began %s), but a token of %d was given before it began",
			who, token, ch.since(began), before)
	}
}

// fenceWrite is a write of the resource with token, by the holder h; it
// reports whether the resource took it.
func (ch *chaos) fenceWrite(h *chaosHolder, token int64) bool {
	f := &ch.fence
	f.mu.Lock()
	ok := token >= f.resource
	held, heldGot := f.resource, f.resGot
	if ok {
		f.resource, f.resGot = token, h.got
		f.accepted++
	} else {
		f.refused++
	}
	f.mu.Unlock()
	if !ok && h.began.After(heldGot) {
		ch.violate("resource locked out: %s (call began %s) writes with token %d and is refused: the resource holds %d, whose acquisition returned at %s, before it began",
			h.who, ch.since(h.began), token, held, ch.since(heldGot))
	}
	return ok
}

// fenceSummary describes what the fenced holders did.
func (ch *chaos) fenceSummary() string {
	f := &ch.fence
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("%d tokens; resource writes accepted %d, refused %d (stale holders); restarts that lost the data while a fenced holder held: %d",
		f.tokens, f.accepted, f.refused, f.restarts)
}

// holding reports whether a holder of tr's lock has a live context now.
func (tr *chaosTracker) holding() bool {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for h := range tr.in {
		if h.ctx.Err() == nil {
			return true
		}
	}
	return false
}
