package redisync

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/errs"
	"github.com/redisync-go/redisync/internal/lease"
)

// Sentinel errors. Match them with errors.Is: the errors redisync returns wrap
// them and name the lock involved ("redisync: lock \"x\": not acquired").
var (
	// ErrNotAcquired is returned by the Try methods when the lock or the
	// permits are held elsewhere, and by the TryLockFor family when their
	// wait ran out.
	ErrNotAcquired = errs.NotAcquired

	// ErrNotHeld is returned when the context carries no hold of what it
	// tries to release, or a hold that has already ended.
	ErrNotHeld = errs.NotHeld

	// ErrLeaseLost is the cause of a hold's context being cancelled when its
	// lease could not be renewed in time or was taken away (read it with
	// context.Cause), and is wrapped by a call through a hold found lost.
	ErrLeaseLost = errs.LeaseLost

	// ErrClosed is returned by calls on a closed Client and ends the waits
	// that were in progress when it closed.
	ErrClosed = errs.Closed

	// ErrInvalid is wrapped by every error about bad input: an empty name, a
	// non-positive lease, timeout, wait or count, a nil client or option.
	ErrInvalid = errs.Invalid

	// ErrNotReplicated is returned, with WithReplicaAck, by an acquisition
	// or re-entry that fewer than the required replicas acknowledged within
	// the timeout: it was undone in Redis, and no hold was handed out. Its
	// text says otherwise when the undo failed (the lease frees what it
	// took) or was still on its way when the call's context ended. It
	// also matches the error a renewal logs when it was not acknowledged.
	ErrNotReplicated = errs.NotReplicated

	// ErrWrongType is wrapped by the error of a call on a lock whose key
	// holds a value of another type, or another kind of lock (Redis's
	// WRONGTYPE): a string a peer library such as redislock wrote, a
	// Semaphore's hash under a Mutex's name. The value is left as it was;
	// the error names the key, and also wraps Redis's reply.
	ErrWrongType = errs.WrongType
)

// lockError is an error about one named lock, latch or semaphore.
type lockError struct {
	what  string // "lock", "fair lock", "rw lock", "semaphore", "latch", "multilock", "election"
	name  string
	label string // how Error shows the name: "" for the name quoted
	err   error
}

func (e *lockError) Error() string {
	label := e.label
	if label == "" {
		label = strconv.Quote(e.name)
	}
	return "redisync: " + e.what + " " + label + ": " + strings.TrimPrefix(e.err.Error(), "redisync: ")
}

func (e *lockError) Unwrap() error { return e.err }

// keyType is one key of a primitive and the Redis type redisync keeps in it.
type keyType struct{ key, typ string }

// wrapFor returns the wrap function of a primitive whose keys are layout:
// it names the primitive and translates Redis's WRONGTYPE replies (see
// wrongTypeError).
func wrapFor(c *Client, what, name string, layout ...keyType) func(error) error {
	return wrapLabelled(c, what, name, "", layout...)
}

// wrapLabelled is wrapFor for a primitive whose errors show its name as
// label (a MultiLock's names, each quoted).
func wrapLabelled(c *Client, what, name, label string, layout ...keyType) func(error) error {
	return func(err error) error {
		if err == nil {
			return nil
		}
		var le *lockError
		if errors.As(err, &le) && le.name == name {
			return err
		}
		if isWrongType(err) && c != nil {
			err = wrongType(c, err, layout)
		}
		return &lockError{what: what, name: name, label: label, err: err}
	}
}

// wrongTypeError replaces Redis's WRONGTYPE reply to a script, whose text
// carries the script's SHA and line, with one that says which keys the
// lock uses: one of them holds a value of another type. It matches
// ErrWrongType and unwraps to Redis's reply.
type wrongTypeError struct {
	keys []string
	err  error
}

func (e *wrongTypeError) Error() string {
	if len(e.keys) == 1 {
		return fmt.Sprintf("key %q holds a value of another type, or another kind of lock (WRONGTYPE)", e.keys[0])
	}
	return fmt.Sprintf("one of its keys %q holds a value of another type, or another kind of lock (WRONGTYPE)", e.keys)
}

func (e *wrongTypeError) Unwrap() []error { return []error{errs.WrongType, e.err} }

// isWrongType reports whether err is Redis's WRONGTYPE reply: a command's,
// a script's (redis.call's error, or one of redisync's scripts refusing
// another kind of lock), or miniredis's words for a script's ("ERR Error
// compiling script ...: WRONGTYPE ...").
func isWrongType(err error) bool {
	if lease.IsGone(err) {
		return true
	}
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(err.Error(), "ERR ") && strings.Contains(err.Error(), ": WRONGTYPE ")
}

// wrongType finds which of layout's keys hold a value of another type (an
// error path, so a few TYPE commands are affordable).
func wrongType(c *Client, err error, layout []keyType) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var bad, all []string
	for _, k := range layout {
		all = append(all, k.key)
		if t, terr := c.rdb.Type(ctx, k.key).Result(); terr == nil && t != "none" && t != k.typ {
			bad = append(bad, k.key)
		}
	}
	if len(bad) == 0 {
		bad = all
	}
	return &wrongTypeError{keys: bad, err: err}
}
