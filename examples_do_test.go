package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redisync-go/redisync"
)

// Do is the lock in one call: fn runs under the lock with the hold's
// context, and the lock is released when fn returns. Its error is fn's,
// joined with the release's: ErrLeaseLost says the lock was lost before
// fn's end, and what fn wrote may have raced another holder.
func ExampleMutex_Do() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	m := c.Mutex("lock:orders:42")

	err := m.Do(ctx, func(lctx context.Context) error {
		locked, _ := m.IsLocked(lctx)
		fmt.Println("locked inside:", locked)
		return nil // pass lctx to the work: it ends if the lock is lost
	})
	locked, _ := m.IsLocked(ctx)
	fmt.Println("err:", err, "- locked after:", locked)

	// The lock is taken away while fn runs (here by a ForceUnlock, as an
	// operator would): Do says so, beside fn's own error.
	errWrite := errors.New("the write failed")
	err = m.Do(ctx, func(lctx context.Context) error {
		m.ForceUnlock(ctx)
		<-lctx.Done() // told at once, with cause ErrLeaseLost
		return errWrite
	})
	fmt.Println(errors.Is(err, errWrite), errors.Is(err, redisync.ErrLeaseLost))
	// Output:
	// locked inside: true
	// err: <nil> - locked after: false
	// true true
}

// DoFor bounds the wait, not the work: fn is not called when the lock
// stays held elsewhere for longer than the wait.
func ExampleMutex_DoFor() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	m := c.Mutex("lock:report")

	other, _ := m.Lock(redisync.WithOwner(ctx)) // another owner holds it
	err := m.DoFor(ctx, 50*time.Millisecond, func(lctx context.Context) error {
		fmt.Println("not printed")
		return nil
	})
	fmt.Println("while held elsewhere:", errors.Is(err, redisync.ErrNotAcquired))

	m.Unlock(other)
	err = m.DoFor(ctx, time.Second, func(lctx context.Context) error {
		fmt.Println("writing the report")
		return nil
	})
	fmt.Println("once free:", err)
	// Output:
	// while held elsewhere: true
	// writing the report
	// once free: <nil>
}

// RDo runs fn under the read lock: readers share it, a writer's Do waits
// for them.
func ExampleRWMutex_RDo() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	rw := c.RWMutex("lock:config")
	config := map[string]string{} // stands for what the lock guards

	err := rw.Do(ctx, func(lctx context.Context) error {
		config["mode"] = "fast"
		return nil
	})
	if err != nil {
		panic(err)
	}
	err = rw.RDo(ctx, func(lctx context.Context) error {
		// Another reader gets in beside this one.
		other, err := rw.TryRLock(redisync.WithOwner(ctx))
		fmt.Println("a second reader:", err == nil, "- mode:", config["mode"])
		if err != nil {
			return err
		}
		return rw.RUnlock(other)
	})
	fmt.Println("err:", err)
	// Output:
	// a second reader: true - mode: fast
	// err: <nil>
}

// Semaphore.Do holds n permits while fn runs, and gives them back after.
func ExampleSemaphore_Do() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	sem := c.Semaphore("jobs", redisync.WithPermits(3))

	err := sem.Do(ctx, 2, func(hctx context.Context) error {
		free, _ := sem.Available(hctx)
		fmt.Println("free while running:", free)
		return nil
	})
	free, _ := sem.Available(ctx)
	fmt.Println("err:", err, "- free after:", free)
	// Output:
	// free while running: 1
	// err: <nil> - free after: 3
}
