package redisync

import (
	"fmt"
	"time"

	"github.com/redisync-go/redisync/internal/lease"
)

// The options of the locks are typed per primitive: each constructor takes
// its own option type (MutexOption, FairOption, RWOption, SemaphoreOption,
// MultiLockOption, ElectionOption), and an option that does not apply to a
// constructor does not compile there (Mutex("x", WithPermits(3)) is a
// compile error, not a run-time one). An option that applies to several
// primitives has a type that is each of their option types:
//
//	WithLease, WithRenewedLease   LockOption: every lock (all six)
//	WithFencing                   FencingOption: Mutex, FairMutex, RWMutex,
//	                              MultiLock (an Election's terms are its
//	                              tokens: it does not take the option)
//	WithWaiterTimeout             WaiterOption: FairMutex, RWMutex
//	WithPermits                   SemaphoreOption
//
// The option types are sealed (their methods are unexported): options come
// from these functions only. A list of options for one constructor is a
// slice of its type ([]MutexOption), which any option that applies to it
// can be put in.

// option is what every option type has: it sets its part of a lock's
// configuration, or says why it cannot.
type option interface {
	apply(*lockConfig) error
}

// MutexOption configures a Mutex (Client.Mutex): WithLease,
// WithRenewedLease and WithFencing are MutexOptions.
type MutexOption interface {
	option
	mutexOption()
}

// FairOption configures a FairMutex (Client.FairMutex): WithLease,
// WithRenewedLease, WithFencing and WithWaiterTimeout are FairOptions.
type FairOption interface {
	option
	fairOption()
}

// RWOption configures an RWMutex (Client.RWMutex): WithLease,
// WithRenewedLease, WithFencing and WithWaiterTimeout are RWOptions.
type RWOption interface {
	option
	rwOption()
}

// SemaphoreOption configures a Semaphore (Client.Semaphore): WithLease,
// WithRenewedLease and WithPermits are SemaphoreOptions.
type SemaphoreOption interface {
	option
	semaphoreOption()
}

// MultiLockOption configures a MultiLock (Client.MultiLock): WithLease,
// WithRenewedLease and WithFencing are MultiLockOptions.
type MultiLockOption interface {
	option
	multiLockOption()
}

// ElectionOption configures an Election (Client.Election): WithLease and
// WithRenewedLease are ElectionOptions. WithFencing is not: an Election's
// terms are its fencing tokens, always.
type ElectionOption interface {
	option
	electionOption()
}

// LockOption is an option of every lock: a MutexOption, FairOption,
// RWOption, SemaphoreOption, MultiLockOption and ElectionOption.
// WithLease and WithRenewedLease are LockOptions.
//
// It is a return type only, as FencingOption and WaiterOption are: no
// function takes one, and code outside this package cannot implement it.
// A LockOption kept in a variable can be given to every constructor; a
// list of options is a slice of one constructor's type ([]MutexOption).
type LockOption interface {
	MutexOption
	FairOption
	RWOption
	SemaphoreOption
	MultiLockOption
	ElectionOption
}

// FencingOption is the option of the locks that give fencing tokens when
// asked: a MutexOption, FairOption, RWOption and MultiLockOption.
// WithFencing is one. It is a return type only (see LockOption).
type FencingOption interface {
	MutexOption
	FairOption
	RWOption
	MultiLockOption
}

// WaiterOption is the option of the locks whose waiters register in
// Redis: a FairOption and an RWOption. WithWaiterTimeout is one. It is a
// return type only (see LockOption).
type WaiterOption interface {
	FairOption
	RWOption
}

// The concrete option types: each implements exactly the option types of
// the primitives it applies to.
type (
	leaseOpt   func(*lockConfig) error // every lock
	fencingOpt func(*lockConfig) error // all but the Semaphore
	waiterOpt  func(*lockConfig) error // FairMutex, RWMutex
	permitsOpt func(*lockConfig) error // Semaphore
)

func (o leaseOpt) apply(lc *lockConfig) error { return o(lc) }
func (leaseOpt) mutexOption()                 {}
func (leaseOpt) fairOption()                  {}
func (leaseOpt) rwOption()                    {}
func (leaseOpt) semaphoreOption()             {}
func (leaseOpt) multiLockOption()             {}
func (leaseOpt) electionOption()              {}

func (o fencingOpt) apply(lc *lockConfig) error { return o(lc) }
func (fencingOpt) mutexOption()                 {}
func (fencingOpt) fairOption()                  {}
func (fencingOpt) rwOption()                    {}
func (fencingOpt) multiLockOption()             {}

func (o waiterOpt) apply(lc *lockConfig) error { return o(lc) }
func (waiterOpt) fairOption()                  {}
func (waiterOpt) rwOption()                    {}

func (o permitsOpt) apply(lc *lockConfig) error { return o(lc) }
func (permitsOpt) semaphoreOption()             {}

type lockConfig struct {
	lease   time.Duration // WithLease; 0: kept alive by the watchdog
	renewed time.Duration // WithRenewedLease; 0: the Client's watchdog timeout
	waiter  time.Duration // WithWaiterTimeout; 0: DefaultWaiterTimeout
	fence   bool          // WithFencing
	permits int           // WithPermits; 0: none stated
}

// WithLease gives every hold of the lock a fixed lease of d that the
// watchdog does not renew (Redisson's lock(leaseTime)): Redis frees the
// lock d after its last acquisition or re-entry, and the hold's context is
// cancelled with ErrLeaseLost shortly before. Redis counts leases in whole
// milliseconds: d is rounded up to one; d below MinLease or above MaxLease
// is refused, as is WithRenewedLease on the same handle. A hold keeps the
// lease it was taken with: a re-entry through a handle with another lease
// is refused (ErrInvalid). It applies to every lock (a LockOption).
func WithLease(d time.Duration) LockOption {
	return leaseOpt(func(lc *lockConfig) error {
		if err := checkLease("lease", d); err != nil {
			return err
		}
		lc.lease = lease.WholeMs(d)
		return nil
	})
}

// WithRenewedLease gives the lock a lease of d, kept alive by the
// Client's watchdog, which renews it every d/3, instead of the Client's
// watchdog timeout (WithWatchdogTimeout, which stays the default of its
// other locks): a crashed holder frees the lock within d, and a holder
// whose lease cannot be renewed is told a little before d has passed. One
// Client can so keep short leases for some locks (a transfer's, freed
// within 2s of a crash) and long ones for others (a leader's), renewed in
// the same batches. Redis counts leases in whole milliseconds: d is
// rounded up to one; d below MinLease or above MaxLease is refused, as is
// WithLease on the same handle. A hold keeps the lease it was taken with:
// a re-entry through a handle with another lease is refused (ErrInvalid).
// It applies to every lock (a LockOption). Each renewal round must answer
// before the holds' local deadlines: within about 0.57*d of its start for
// leases of 200ms and more, 2d/3 - 21ms from 40ms to 200ms, and only
// d/6 - 1ms below 40ms, so a lease of tens of milliseconds is lost
// whenever a round is that late (a loaded machine, the race detector).
func WithRenewedLease(d time.Duration) LockOption {
	return leaseOpt(func(lc *lockConfig) error {
		if err := checkLease("renewed lease", d); err != nil {
			return err
		}
		lc.renewed = lease.WholeMs(d)
		return nil
	})
}

// leaseOf returns the lease of the lock's holds, and whether the watchdog
// renews it.
func (lc lockConfig) leaseOf(c *Client) (time.Duration, bool) {
	switch {
	case lc.lease > 0:
		return lc.lease, false
	case lc.renewed > 0:
		return lc.renewed, true
	}
	return c.lease, true
}

// lockSetup validates a lock's name and options; the error is kept by the
// lock and returned by each of its methods. The options' types say which
// primitive they apply to: what is left to check is their values.
func lockSetup[O option](name string, opts []O) (lockConfig, error) {
	var lc lockConfig
	if err := checkName(name); err != nil {
		return lc, err
	}
	for _, opt := range opts {
		if any(opt) == nil {
			return lc, fmt.Errorf("%w: nil lock option", ErrInvalid)
		}
		if err := opt.apply(&lc); err != nil {
			return lc, err
		}
	}
	if lc.lease > 0 && lc.renewed > 0 {
		return lc, fmt.Errorf("%w: WithLease (a fixed lease) and WithRenewedLease (a renewed one) exclude each other", ErrInvalid)
	}
	return lc, nil
}

// MinLease is the shortest lease redisync accepts (WithLease,
// WithWatchdogTimeout): below it, Redis's millisecond clock and a timer's
// latency leave no room to tell a holder before its lease runs out.
const MinLease = 20 * time.Millisecond

// MaxLease is the longest lease redisync accepts: a year.
const MaxLease = 365 * 24 * time.Hour

// checkLease refuses a lease (what names it) outside MinLease..MaxLease.
func checkLease(what string, d time.Duration) error {
	switch {
	case d <= 0:
		return fmt.Errorf("%w: %s %v is not positive", ErrInvalid, what, d)
	case d < MinLease:
		return fmt.Errorf("%w: %s %v is below MinLease (%v)", ErrInvalid, what, d, MinLease)
	case d > MaxLease:
		return fmt.Errorf("%w: %s %v is above MaxLease (%v)", ErrInvalid, what, d, MaxLease)
	}
	return nil
}
