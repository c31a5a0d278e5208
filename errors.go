package redisync

import "errors"

// Sentinel errors. Match them with errors.Is: the errors redisync returns wrap
// them with the name of the lock involved.
var (
	// ErrNotAcquired is returned by the Try methods when the lock or the
	// permits are held elsewhere.
	ErrNotAcquired = errors.New("redisync: not acquired")

	// ErrNotHeld is returned when the context's owner does not hold what it
	// tries to release. Nothing is changed in Redis.
	ErrNotHeld = errors.New("redisync: not held by this owner")

	// ErrLeaseLost is the cause of a hold's context being cancelled when its
	// lease could not be renewed in time or was taken away (read it with
	// context.Cause).
	ErrLeaseLost = errors.New("redisync: lease lost")

	// ErrClosed is returned by calls on a closed Client and ends the waits
	// that were in progress when it closed.
	ErrClosed = errors.New("redisync: client closed")

	// ErrInvalid is wrapped by every error about bad input: an empty name, a
	// non-positive lease, timeout or count, a nil client.
	ErrInvalid = errors.New("redisync: invalid argument")
)
