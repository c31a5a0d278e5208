package lease

import (
	"container/heap"
	"time"
)

// The keeper's deadlines. Each live hold's local deadline is in one heap,
// the earliest first, and one timer of the keeper's is set for the
// earliest: when it fires, the holds whose deadlines have passed end as
// lost (and are given back), whatever the renewal rounds are doing. One
// timer for every hold, where a timer each would cost a Lock two
// allocations and its renewals a Reset each. The heap is changed without
// allocating once it has grown. A timer set earlier than needed (the hold
// it was set for has ended, or its deadline moved on) fires, finds
// nothing due and is set again: a deadline that moves later (a renewal)
// does not touch it.

// dlHeap is the heap of the live holds by deadline (container/heap).
type dlHeap []*Hold

func (q dlHeap) Len() int           { return len(q) }
func (q dlHeap) Less(i, j int) bool { return q[i].dlPos < q[j].dlPos }
func (q dlHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].heapAt, q[j].heapAt = i+1, j+1
}
func (q *dlHeap) Push(x any) {
	h := x.(*Hold)
	h.heapAt = len(*q) + 1
	*q = append(*q, h)
}
func (q *dlHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	h.heapAt = 0
	return h
}

// watch puts h, whose deadline at (clockAt.pos) was just set, in the heap,
// or moves it there.
func (w *Keeper) watch(h *Hold, at int64) {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	h.dlPos = at
	if h.heapAt == 0 {
		heap.Push(&w.dls, h)
	} else {
		heap.Fix(&w.dls, h.heapAt-1)
	}
	w.arm()
}

// moved moves h's deadline in the heap to at, if h is there.
func (w *Keeper) moved(h *Hold, at int64) {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	if h.heapAt != 0 {
		h.dlPos = at
		heap.Fix(&w.dls, h.heapAt-1)
	}
}

// unwatch takes h out of the heap.
func (w *Keeper) unwatch(h *Hold) {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	if h.heapAt != 0 {
		heap.Remove(&w.dls, h.heapAt-1)
	}
}

// arm sets the timer for the earliest deadline, unless it is set for that
// or earlier. Called under w.dmu.
func (w *Keeper) arm() {
	if len(w.dls) == 0 {
		return
	}
	at := w.dls[0].dlPos
	if w.dlAt != 0 && w.dlAt <= at {
		return
	}
	w.dlAt = at
	w.dlTimer.Reset(time.Duration(max(0, at-now().pos())))
}

// rearm sets the timer again for the earliest deadline: the holds' clock
// jumped (see resumed), and the timer, which counts monotonic time, would
// fire late.
func (w *Keeper) rearm() {
	w.dmu.Lock()
	defer w.dmu.Unlock()
	w.dlAt = 0
	w.arm()
}

// expire ends the holds whose deadlines have passed, as lost unless their
// context's end came first (Settle), and gives them back: Redis may keep
// them a little longer. It is the timer's.
func (w *Keeper) expire() {
	var due []*Hold
	w.dmu.Lock()
	w.dlAt = 0
	n := now().pos()
	for len(w.dls) > 0 && w.dls[0].dlPos-n <= 0 {
		due = append(due, heap.Pop(&w.dls).(*Hold))
	}
	w.arm()
	w.dmu.Unlock()
	for _, h := range due {
		if !h.dl.passed() {
			// Renewed as it was taken out (Extend): watched again, if
			// it still lives.
			h.tmu.Lock()
			if h.why == NotEnded {
				w.watch(h, h.at) // under tmu: an end after it takes it out
			}
			h.tmu.Unlock()
			continue
		}
		h.Settle()
	}
}
