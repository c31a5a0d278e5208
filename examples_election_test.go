package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// A scheduler that runs only on the leader: each node campaigns with its
// address, runs the scheduled jobs under the leadership's context, and
// stops as soon as that context ends (it resigned, lost its lease, or the
// node shuts down). Another Client observes who leads.
func ExampleElection() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// scheduler runs on one node until ctx ends (the node shuts down); it
	// says when it first runs a job in each term.
	scheduler := func(ctx context.Context, c *redisync.Client, addr string, running chan<- string) {
		e := c.Election("scheduler")
		for ctx.Err() == nil {
			lctx, err := e.Campaign(ctx, addr) // waits until this node leads
			if err != nil {
				continue // ctx ended (or Redis is unreachable: campaign again)
			}
			tick := time.NewTicker(10 * time.Millisecond)
			for first := true; lctx.Err() == nil; first = false {
				// A job, here just a report; real ones take lctx and the
				// term (e.Term) with them, as a fencing token.
				if first {
					select {
					case running <- addr:
					case <-lctx.Done():
					}
				}
				select {
				case <-tick.C:
				case <-lctx.Done(): // not the leader any more: stop at once
				}
			}
			tick.Stop()
		}
	}

	node := func(addr string) (stop func(), running chan string) {
		c, _ := redisync.New(rdb)
		ctx, cancel := context.WithCancel(context.Background())
		running = make(chan string)
		done := make(chan struct{})
		go func() {
			defer close(done)
			scheduler(ctx, c, addr, running)
		}()
		return func() { cancel(); <-done; c.Close() }, running
	}

	watcher, _ := redisync.New(rdb)
	defer watcher.Close()
	octx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	changes := watcher.Election("scheduler").Observe(octx)
	say := func(l redisync.Leadership) {
		if l.Term == 0 {
			fmt.Println("observer: nobody leads")
		} else {
			fmt.Println("observer:", l.Value, "leads")
		}
	}
	say(<-changes)

	stop1, running1 := node("10.0.0.1:8080")
	first := <-changes
	say(first)
	fmt.Println("the scheduler runs on", <-running1)

	stop2, running2 := node("10.0.0.2:8080") // waits: node 1 leads
	stop1()                                  // node 1 shuts down: its leadership ends with it
	fmt.Println("node 1 stopped")
	say(<-changes)
	second := <-changes
	say(second)
	fmt.Println("the scheduler runs on", <-running2)
	fmt.Println("the term went up:", second.Term > first.Term)

	stop2()
	say(<-changes)
	// Output:
	// observer: nobody leads
	// observer: 10.0.0.1:8080 leads
	// the scheduler runs on 10.0.0.1:8080
	// node 1 stopped
	// observer: nobody leads
	// observer: 10.0.0.2:8080 leads
	// the scheduler runs on 10.0.0.2:8080
	// the term went up: true
	// observer: nobody leads
}

// Leader reads who leads, in one round trip; Resign hands the leadership
// on at once.
func ExampleElection_Resign() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	e := c.Election("reports")

	lctx, _ := e.Campaign(ctx, "worker-a")
	l, _ := e.Leader(ctx)
	fmt.Println("leader:", l.Value)

	next := make(chan context.Context)
	go func() {
		lctx, _ := e.Campaign(ctx, "worker-b") // another candidate waits
		next <- lctx
	}()
	time.Sleep(20 * time.Millisecond)
	e.Resign(lctx)
	fmt.Println("worker-a resigned; its context:", lctx.Err())
	bctx := <-next
	l, _ = e.Leader(ctx)
	fmt.Println("leader:", l.Value)
	ta, _ := e.Term(lctx)
	tb, _ := e.Term(bctx)
	fmt.Println("worker-b's term is greater:", tb > ta)
	e.Resign(bctx)
	l, _ = e.Leader(ctx)
	fmt.Println("nobody leads:", l.Term == 0)
	// Output:
	// leader: worker-a
	// worker-a resigned; its context: context canceled
	// leader: worker-b
	// worker-b's term is greater: true
	// nobody leads: true
}

// TryCampaignFor bounds only the wait: a node that starts with a deadline
// for becoming leader (here, 100ms) gives up after it, leaving nothing
// behind; a leadership it wins lasts as long as the context it campaigned
// with (the node's life), not the bound.
func ExampleElection_TryCampaignFor() {
	c, done := exampleClient()
	defer done()
	node, stop := context.WithCancel(context.Background()) // the node's life
	defer stop()
	e := c.Election("compactor")

	lctx, err := e.TryCampaignFor(node, "node-a", 100*time.Millisecond)
	fmt.Println("node-a leads:", err == nil)

	_, err = e.TryCampaignFor(node, "node-b", 100*time.Millisecond)
	fmt.Println("node-b gave up:", errors.Is(err, redisync.ErrNotAcquired))

	time.Sleep(200 * time.Millisecond) // past both bounds
	l, _ := e.Leader(node)
	fmt.Println("leader:", l.Value, "- its context:", lctx.Err())

	stop() // the node shuts down: its leadership ends with it
	<-lctx.Done()
	// Output:
	// node-a leads: true
	// node-b gave up: true
	// leader: node-a - its context: <nil>
}

// An observer that cannot read the election says so: once it has been
// blind for longer than its lease (here 300ms; Redis is down), it sends
// the last leader it knew with Err set, and a value without Err as soon
// as it sees again. A router that sends writes to the leader can stop
// trusting its routing meanwhile.
func ExampleElection_Observe() {
	mr, _ := miniredis.Run()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()

	node, _ := redisync.New(rdb)
	defer node.Close()
	lctx, _ := node.Election("primary").Campaign(ctx, "db-1")
	defer node.Election("primary").Resign(lctx)

	router, _ := redisync.New(rdb, redisync.WithWatchdogTimeout(300*time.Millisecond))
	defer router.Close()
	octx, stop := context.WithCancel(ctx)
	defer stop()
	changes := router.Election("primary").Observe(octx)

	l := <-changes
	fmt.Println("route writes to", l.Value)
	mr.Close() // Redis goes down
	l = <-changes
	fmt.Println("blind:", l.Err != nil, "- last known leader:", l.Value)
	mr.Restart() // and comes back
	l = <-changes
	fmt.Println("sees again:", l.Err == nil, "- route writes to", l.Value)
	// Output:
	// route writes to db-1
	// blind: true - last known leader: db-1
	// sees again: true - route writes to db-1
}
