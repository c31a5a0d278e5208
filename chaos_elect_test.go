package redisync

import (
	"context"
	"sync"
	"time"
)

// The MultiLock and the Election of TestChaos.

// chaosMultiOps is a MultiLock as a plain lock. Its names include the
// chaos Mutex's, so it shares that Mutex's tracker: a MultiLock holder and
// a Mutex holder must never both be live.
func chaosMultiOps(m *MultiLock, tr *chaosTracker) chaosOps {
	return chaosExclusiveOps("MultiLock", m, tr)
}

// chaosTerms checks that each leader's term is above the terms of every
// leader whose Campaign returned before its own began.
type chaosTerms struct {
	mu   sync.Mutex
	got  []time.Time // when each Campaign returned, in order
	term []int64     // its term
}

func (ct *chaosTerms) won(ch *chaos, who string, term int64, began, ret time.Time) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	for i, at := range ct.got {
		if at.Before(began) && ct.term[i] >= term {
			ch.violate("election: %s leads with term %d, not above term %d of a leader before it", who, term, ct.term[i])
			break
		}
	}
	ct.got = append(ct.got, ret)
	ct.term = append(ct.term, term)
}

// chaosElectionOps is an Election as a plain lock: Campaign for Lock (the
// Try forms campaign as long as their bound: the leadership then ends with
// it), Resign for Unlock; a leadership is not re-entered. Every term is
// checked against the earlier ones.
func chaosElectionOps(ch *chaos, e *Election, tr *chaosTracker, terms *chaosTerms) chaosOps {
	campaign := func(ctx context.Context, w time.Duration) (context.Context, error) {
		began := time.Now()
		cctx, cancel := context.WithTimeout(ctx, w)
		lctx, err := e.Campaign(cctx, "candidate")
		if err != nil {
			cancel()
			return nil, err
		}
		context.AfterFunc(lctx, cancel)
		if term, ok := e.Term(lctx); !ok {
			ch.violate("election: a leadership without a term")
		} else {
			terms.won(ch, "a leader", term, began, time.Now())
		}
		return lctx, nil
	}
	forever := time.Duration(1<<63 - 1)
	return chaosOps{
		prim: "Election", mode: modeExclusive, tr: tr,
		lock:   func(ctx context.Context, _ int) (context.Context, error) { return campaign(ctx, forever) },
		try:    func(ctx context.Context, _ int) (context.Context, error) { return campaign(ctx, forever) },
		tryFor: func(ctx context.Context, _ int, w time.Duration) (context.Context, error) { return campaign(ctx, w) },
		unlock: func(ctx context.Context, _ int) error { return e.Resign(ctx) },
	}
}
