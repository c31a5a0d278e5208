package redisync

import "fmt"

// WithPermits states a Semaphore's total of n permits on its handle, so
// that the semaphore never goes without one: every acquisition through the
// handle (Acquire, TryAcquire, TryAcquireFor, and adding permits to a
// hold) that finds the total missing in Redis sets it to n, atomically, in
// the same script that acquires. The total is missing before anyone set it
// (so no process has to call TrySetPermits first) and after Redis lost its
// data (a restart without persistence, a failover to a replica that did
// not have it), when a total set once with TrySetPermits would be gone
// for good and every Acquire would wait until shutdown. Available through
// the handle reports a missing total as n.
//
// It only ever creates a missing total, never changes one that is set:
// SetPermits and AddPermits still change the total (a handle stating
// another n does not undo them), TrySetPermits keeps a total WithPermits
// created, and AddPermits on a missing total still counts it as 0 (and
// then the total is no longer missing). Give every handle of a semaphore
// the same n, and change it with SetPermits as well when the
// configuration changes.
//
// n must be positive and at most 2^50. It applies to the Semaphore only
// (a SemaphoreOption).
func WithPermits(n int) SemaphoreOption {
	return permitsOpt(func(lc *lockConfig) error {
		if n <= 0 || n > maxPermits {
			return fmt.Errorf("%w: WithPermits(%d): the total must be 1 to %d", ErrInvalid, n, maxPermits)
		}
		lc.permits = n
		return nil
	})
}
