package redistest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
)

// Lasting is a testing.TB for servers shared by several tests of a
// package: what is started with it lasts until Close (call it from
// TestMain, after m.Run), not until the end of the test that started it.
// Start, StartCluster and the others use it as they use a test's TB; a
// failure there (Fatal, Fatalf) or a missing redis-server (Skip) ends Do
// with an error instead of failing a test.
//
// Only the methods of testing.TB that this package calls are implemented;
// it is not for other uses.
type Lasting struct {
	testing.TB // nil: the methods this package uses are defined below

	name     string
	mu       sync.Mutex
	cleanups []func()
}

// NewLasting returns a Lasting named name (for messages).
func NewLasting(name string) *Lasting { return &Lasting{name: name} }

// lastingStop is the panic that Fatal, Fatalf and Skip end Do with.
type lastingStop struct {
	err error
}

// ErrSkipped is wrapped by Do's error when the servers could not be
// started because redis-server is not installed (a test would be skipped).
var ErrSkipped = errors.New("redistest: skipped")

// Do runs f, which starts servers with l, and returns the error that a
// Fatal, Fatalf or Skip in f ended it with, or nil.
func (l *Lasting) Do(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s, ok := r.(lastingStop)
			if !ok {
				panic(r)
			}
			err = s.err
		}
	}()
	f()
	return nil
}

// Close runs the cleanups registered with l, the latest first: it stops
// the servers started with it and removes their directories.
func (l *Lasting) Close() {
	l.mu.Lock()
	fs := l.cleanups
	l.cleanups = nil
	l.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// The methods of testing.TB this package calls.

func (l *Lasting) Name() string { return l.name }

func (l *Lasting) Helper() {}

func (l *Lasting) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

func (l *Lasting) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest-lasting-")
	if err != nil {
		l.Fatalf("redistest: TempDir: %v", err)
	}
	l.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (l *Lasting) Fatalf(format string, args ...any) {
	panic(lastingStop{fmt.Errorf("%s: %s", l.name, fmt.Sprintf(format, args...))})
}

func (l *Lasting) Fatal(args ...any) {
	panic(lastingStop{fmt.Errorf("%s: %s", l.name, fmt.Sprint(args...))})
}

func (l *Lasting) Skip(args ...any) {
	panic(lastingStop{fmt.Errorf("%w: %s: %s", ErrSkipped, l.name, fmt.Sprint(args...))})
}
