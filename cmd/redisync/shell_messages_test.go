//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prefixOnce fails unless every line of redisync's in stderr says
// "redisync:" once, at its start (the others are the command's).
func prefixOnce(t *testing.T, stderr string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.Contains(l, "redisync") && (!strings.HasPrefix(l, "redisync: ") || strings.Count(l, "redisync:") != 1) {
			t.Errorf("a line that does not say its prefix once: %q", l)
		}
	}
}

// TestShellMessages: what redisync says, and when it says nothing
// (issue 43, item 7).
func TestShellMessages(t *testing.T) {
	sh := buildShell(t)
	rdb := sh.srv.Client(t)

	// With -conflict-exit-code 0, a skipped run says nothing (a cron line
	// on every machine mails nothing), unless -v; with another status it
	// says who holds the lock, as before.
	t.Run("Quiet", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join(t.TempDir(), "log")
		holder := sh.start(t, nil, append(sh.args("lock", "quiet", "--"), looper(f)...)...)
		waitFile(t, f, 1, 30*time.Second)
		for _, c := range []struct {
			flags []string
			code  int
			says  string // "": nothing
		}{
			{[]string{"-conflict-exit-code", "0"}, 0, ""},
			{[]string{"-conflict-exit-code", "0", "-v"}, 0, "not acquired at once (-wait 0); held by client "},
			{[]string{"-conflict-exit-code", "3"}, 3, "not acquired at once (-wait 0); held by client "},
			{nil, exitNotAcquired, "not acquired at once (-wait 0); held by client "},
		} {
			p := sh.run(t, sh.args("lock", append(append([]string{"-wait", "0"}, c.flags...), "quiet", "--", "true")...)...)
			switch got := p.stderr.String(); {
			case p.code != c.code:
				t.Errorf("%v: exit %d, want %d: %s", c.flags, p.code, c.code, got)
			case c.says == "" && got != "":
				t.Errorf("%v: said %q, want nothing", c.flags, got)
			case c.says != "" && !strings.Contains(got, c.says):
				t.Errorf("%v: said %q, want %q", c.flags, got, c.says)
			}
		}
		_ = holder.cmd.Process.Signal(syscall.SIGTERM)
		holder.wait(t, 30*time.Second)

		// -v also says when the hold was acquired and released.
		p := sh.run(t, sh.args("lock", "-v", "-fence", "quiet", "--", "true")...)
		if s := p.stderr.String(); p.code != 0 || !strings.Contains(s, `lock "quiet": acquired (REDISYNC_TOKEN `) ||
			!strings.Contains(s, `lock "quiet": released (the command's status: 0)`) {
			t.Fatalf("-v: exit %d: %s", p.code, s)
		}
		prefixOnce(t, p.stderr.String())
	})

	// A lease lost while the command runs: each line says "redisync:"
	// and the lock once (it said them twice: "(redisync: lease lost)").
	t.Run("LostWhileRunning", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join(t.TempDir(), "log")
		p := sh.start(t, nil, append(sh.args("lock", "-lease", "1s", "lost-running", "--"), looper(f)...)...)
		waitFile(t, f, 1, 30*time.Second)
		if err := rdb.Del(t.Context(), "lost-running").Err(); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != exitLost {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		s := p.stderr.String()
		if !strings.Contains(s, `redisync: lock "lost-running": lease lost while the command ran; the command was ended (status 9)`) {
			t.Fatalf("stderr: %s", s)
		}
		prefixOnce(t, s)
	})

	// A command that finished with status 0 after its hold was lost (the
	// release finds it gone): redisync exits 70 saying that it finished
	// but may have overlapped another holder.
	t.Run("FinishedButLost", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		ready, gone := filepath.Join(dir, "ready"), filepath.Join(dir, "gone")
		// A 30s lease: no renewal comes before the command ends.
		cmd := `echo ready > ` + ready + `; while [ ! -e ` + gone + ` ]; do sleep 0.01; done`
		p := sh.start(t, nil, sh.args("lock", "-lease", "30s", "finished-lost", "--", "sh", "-c", cmd)...)
		waitFile(t, ready, 1, 30*time.Second)
		if err := rdb.Del(t.Context(), "finished-lost").Err(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(gone, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 30*time.Second); code != exitLost {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		s := p.stderr.String()
		if !strings.Contains(s, `redisync: lock "finished-lost": the command finished (status 0), but the hold was lost before it did (not held: lease lost): it may have overlapped another holder`) {
			t.Fatalf("stderr: %s", s)
		}
		prefixOnce(t, s)
	})
}
