//go:build unix

package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redisync-go/redisync/internal/redistest"
)

// TestShellRestartWithoutPersistence: a Redis restarted without
// persistence forgets the lock, so a second holder runs while the first
// still does, until the first's next renewal tells it (the README's shell
// section says so). -fence is the answer: the second holder's
// REDISYNC_TOKEN is greater than the first's, though the counter was lost
// too, so a resource that checks tokens refuses the first's late writes.
func TestShellRestartWithoutPersistence(t *testing.T) {
	sh := buildShell(t)
	srv := redistest.Start(t) // no persistence
	f := filepath.Join(t.TempDir(), "log")
	conn := []string{"-redis", srv.Addr(), "-fence"}
	first := sh.start(t, nil, append(append([]string{"lock"}, conn...), "-lease", "3s", "fenced", "--",
		"sh", "-c", `echo first $REDISYNC_TOKEN >> `+f+`; trap 'exit 9' TERM; while :; do sleep 0.02; done`)...)
	waitFile(t, f, 1, 30*time.Second)
	srv.Restart(t)
	second := sh.run(t, append(append([]string{"lock"}, conn...), "-wait", "10s", "fenced", "--",
		"sh", "-c", `echo second $REDISYNC_TOKEN >> `+f)...)
	if second.code != 0 {
		t.Fatalf("the second holder: exit %d: %s", second.code, second.stderr.String())
	}
	if code := first.wait(t, 30*time.Second); code != exitLost || !strings.Contains(first.stderr.String(), "lost") {
		t.Fatalf("the first holder: exit %d: %s", code, first.stderr.String())
	}
	lines := readLines(f) // "first_TOKEN", "second_TOKEN"
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "first_") || !strings.HasPrefix(lines[1], "second_") {
		t.Fatalf("log: %q", lines)
	}
	a, errA := strconv.ParseInt(strings.TrimPrefix(lines[0], "first_"), 10, 64)
	b, errB := strconv.ParseInt(strings.TrimPrefix(lines[1], "second_"), 10, 64)
	if errA != nil || errB != nil || b <= a {
		t.Fatalf("tokens %q then %q: the second holder's must be greater", lines[0], lines[1])
	}
	t.Logf("tokens %d then %d across a restart that lost the data", a, b)
}
