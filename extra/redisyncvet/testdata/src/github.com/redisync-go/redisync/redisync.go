// Package redisync is a stub of github.com/redisync-go/redisync for the
// analyzer's tests: the lock types and the methods of theirs that take or
// release a hold (TestStubMatchesCore checks them against the core).
package redisync

import (
	"context"
	"time"
)

type Client struct{}

func (c *Client) Mutex(name string) *Mutex            { return &Mutex{} }
func (c *Client) FairMutex(name string) *FairMutex    { return &FairMutex{} }
func (c *Client) RWMutex(name string) *RWMutex        { return &RWMutex{} }
func (c *Client) Semaphore(name string) *Semaphore    { return &Semaphore{} }
func (c *Client) MultiLock(names []string) *MultiLock { return &MultiLock{} }
func (c *Client) Election(name string) *Election      { return &Election{} }

type (
	Mutex     struct{}
	FairMutex struct{}
	RWMutex   struct{}
	Semaphore struct{}
	MultiLock struct{}
	Election  struct{}
)

func (m *Mutex) Do(ctx context.Context, fn func(lctx context.Context) error) error     { return nil }
func (f *FairMutex) Do(ctx context.Context, fn func(lctx context.Context) error) error { return nil }
func (r *RWMutex) Do(ctx context.Context, fn func(lctx context.Context) error) error   { return nil }
func (s *Semaphore) Do(ctx context.Context, n int, fn func(lctx context.Context) error) error {
	return nil
}
func (m *MultiLock) Do(ctx context.Context, fn func(lctx context.Context) error) error { return nil }
func (e *Election) Campaign(ctx context.Context, value string) (context.Context, error) {
	return ctx, nil
}
func (e *Election) TryCampaignFor(ctx context.Context, value string, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (e *Election) Resign(ctx context.Context) error                      { return nil }
func (f *FairMutex) Lock(ctx context.Context) (context.Context, error)    { return ctx, nil }
func (f *FairMutex) TryLock(ctx context.Context) (context.Context, error) { return ctx, nil }
func (f *FairMutex) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (f *FairMutex) Unlock(ctx context.Context) error                     { return nil }
func (f *FairMutex) HoldCount(ctx context.Context) (int, error)           { return 0, nil }
func (m *MultiLock) Lock(ctx context.Context) (context.Context, error)    { return ctx, nil }
func (m *MultiLock) TryLock(ctx context.Context) (context.Context, error) { return ctx, nil }
func (m *MultiLock) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (m *MultiLock) Unlock(ctx context.Context) error                 { return nil }
func (m *MultiLock) HoldCount(ctx context.Context) (int, error)       { return 0, nil }
func (m *Mutex) Lock(ctx context.Context) (context.Context, error)    { return ctx, nil }
func (m *Mutex) TryLock(ctx context.Context) (context.Context, error) { return ctx, nil }
func (m *Mutex) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (m *Mutex) Unlock(ctx context.Context) error                        { return nil }
func (m *Mutex) HoldCount(ctx context.Context) (int, error)              { return 0, nil }
func (r *RWMutex) RLock(ctx context.Context) (context.Context, error)    { return ctx, nil }
func (r *RWMutex) TryRLock(ctx context.Context) (context.Context, error) { return ctx, nil }
func (r *RWMutex) TryRLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (r *RWMutex) Lock(ctx context.Context) (context.Context, error)    { return ctx, nil }
func (r *RWMutex) TryLock(ctx context.Context) (context.Context, error) { return ctx, nil }
func (r *RWMutex) TryLockFor(ctx context.Context, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (r *RWMutex) RUnlock(ctx context.Context) error                                { return nil }
func (r *RWMutex) Unlock(ctx context.Context) error                                 { return nil }
func (r *RWMutex) HoldCount(ctx context.Context) (int, error)                       { return 0, nil }
func (s *Semaphore) Acquire(ctx context.Context, n int) (context.Context, error)    { return ctx, nil }
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (context.Context, error) { return ctx, nil }
func (s *Semaphore) TryAcquireFor(ctx context.Context, n int, wait time.Duration) (context.Context, error) {
	return ctx, nil
}
func (s *Semaphore) Release(ctx context.Context, n int) error { return nil }
