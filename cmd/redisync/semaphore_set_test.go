//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSemaphoreSet: "semaphore -permits N -set NAME" changes a
// semaphore's total, with no command (issue 43, item 7): held permits stay
// held, the new permit is free at once for a run with the new total, and
// runs with the old -permits are refused from then on.
func TestSemaphoreSet(t *testing.T) {
	sh := buildShell(t)
	rdb := sh.srv.Client(t)
	dir := t.TempDir()
	f, g := filepath.Join(dir, "held"), filepath.Join(dir, "ran")

	first := sh.start(t, nil, append(sh.args("semaphore", "-permits", "1", "sem-set", "--"), looper(f)...)...)
	waitFile(t, f, 1, 30*time.Second)

	p := sh.run(t, sh.args("semaphore", "-permits", "2", "-set", "sem-set")...)
	if want := `semaphore "sem-set": 2 permits (was 1)`; p.code != 0 || strings.TrimSpace(p.stdout.String()) != want {
		t.Fatalf("exit %d, said %q, want %q: %s", p.code, p.stdout.String(), want, p.stderr.String())
	}
	if total := rdb.HGet(t.Context(), "sem-set", "permits").Val(); total != "2" {
		t.Fatalf("the total in Redis is %q", total)
	}
	if p := sh.run(t, sh.args("semaphore", "-permits", "2", "-wait", "0", "sem-set", "--", "sh", "-c", "echo ran > "+g)...); p.code != 0 || len(readLines(g)) != 1 {
		t.Fatalf("a run with the new total beside the holder: exit %d: %s", p.code, p.stderr.String())
	}
	if lines := readLines(f); len(lines) != 1 {
		t.Fatalf("the first holder's command was disturbed: %q", lines)
	}
	old := sh.run(t, sh.args("semaphore", "-permits", "1", "-wait", "0", "sem-set", "--", "true")...)
	if old.code == 0 || !strings.Contains(old.stderr.String(), `has 2 permits in Redis, not 1 (-permits)`) {
		t.Fatalf("the old total: exit %d: %s", old.code, old.stderr.String())
	}
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	first.wait(t, 30*time.Second)

	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"-set", "sem-set"}, "-set needs -permits N"},
		{[]string{"-permits", "-1", "-set", "sem-set"}, "-set needs -permits N"},
		{[]string{"-permits", "2", "-n", "2", "-set", "sem-set"}, "not [-n]"},
		{[]string{"-permits", "2", "-set", "sem-set", "--", "true"}, "one NAME and no command"},
		{[]string{"-permits", "2", "-set"}, "one NAME and no command"},
	} {
		p := sh.run(t, sh.args("semaphore", c.args...)...)
		if p.code != exitUsage || !strings.Contains(p.stderr.String(), c.says) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, p.code, p.stderr.String(), exitUsage, c.says)
		}
	}
	if p := sh.run(t, sh.args("semaphore", "-permits", "3", "-set", "sem-new")...); strings.TrimSpace(p.stdout.String()) != `semaphore "sem-new": 3 permits (was never set)` {
		t.Fatalf("a new semaphore: exit %d: %s %s", p.code, p.stdout.String(), p.stderr.String())
	}
}
