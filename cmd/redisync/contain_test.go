//go:build unix

package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisync-go/redisync"
)

// ticker is a command whose work is a grandchild: a subshell that appends
// "tick" to path every 20ms until killed (ignoring SIGTERM with
// ignoreTerm), its pid written to pidf; the command's first process (sh)
// waits for it.
func ticker(path, pidf string, ignoreTerm bool) []string {
	trap := ""
	if ignoreTerm {
		trap = `trap "" TERM; `
	}
	return []string{"sh", "-c", `(` + trap + `while :; do echo tick >> ` + path + `; sleep 0.02; done) & echo $! > ` + pidf + `; wait`}
}

// readPid reads the pid a command wrote to path, waiting up to 30s for it.
func readPid(t *testing.T, path string) int {
	t.Helper()
	line := waitFile(t, path, 1, 30*time.Second)[0]
	pid, err := strconv.Atoi(line)
	if err != nil {
		t.Fatalf("%s: %q", path, line)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// after returns the lines of path that follow the first line equal to
// mark, failing if there is none.
func after(t *testing.T, path, mark string) []string {
	t.Helper()
	lines := readLines(path)
	for i, l := range lines {
		if l == mark {
			return lines[i+1:]
		}
	}
	t.Fatalf("no %q in %s: %q", mark, path, lines)
	return nil
}

// TestContainment: the lock covers every process of the command, whose
// work here is a grandchild (a subshell of sh -c): when redisync is
// killed (SIGKILL), when the lease is lost and the first process exits on
// SIGTERM while the rest ignore it, and when the command exits leaving
// processes behind. Each check is an order: the grandchild writes nothing
// once the next holder has started, or once redisync has exited.
func TestContainment(t *testing.T) {
	sh := buildShell(t)
	rdb := sh.srv.Client(t)

	// Issue 42, break 1: a redisync killed with -9 took only the command's
	// first process with it (Pdeathsig); the grandchild ran on beside the
	// next holder. The supervisor kills the whole group.
	t.Run("RedisyncKilled", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f, pidf := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		p := sh.start(t, nil, append(sh.args("lock", "-lease", "1s", "killed", "--"), ticker(f, pidf, false)...)...)
		pid := readPid(t, pidf)
		waitFile(t, f, 3, 30*time.Second)
		_ = p.cmd.Process.Kill()
		p.wait(t, 30*time.Second)
		next := sh.run(t, sh.args("lock", "-wait", "30s", "killed", "--", "sh", "-c", "echo next >> "+f)...)
		if next.code != 0 {
			t.Fatalf("the next holder: exit %d: %s", next.code, next.stderr.String())
		}
		time.Sleep(100 * time.Millisecond) // a grandchild running on ticks every 20ms
		if rest := after(t, f, "next"); len(rest) > 0 || alive(pid) {
			t.Fatalf("the killed redisync's grandchild ran on beside the next holder (alive %v): %q after it", alive(pid), rest)
		}
		t.Logf("killed redisync's stderr: %s", p.stderr.String())
	})

	// Issue 42, break 2: once the command's first process had exited on
	// SIGTERM, the promised SIGKILL after -grace never came; the rest of
	// its group ran on without the lock.
	t.Run("LostAfterFirstExit", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f, pidf := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		p := sh.start(t, nil, append(sh.args("lock", "-lease", "1s", "-grace", "300ms", "lost-rest", "--"), ticker(f, pidf, true)...)...)
		pid := readPid(t, pidf)
		waitFile(t, f, 3, 30*time.Second)
		if err := rdb.Del(t.Context(), "lost-rest").Err(); err != nil {
			t.Fatal(err)
		}
		code := p.wait(t, 30*time.Second)
		ticks := len(readLines(f))
		gone := !alive(pid)
		time.Sleep(100 * time.Millisecond)
		if code != exitLost || !gone || len(readLines(f)) != ticks {
			t.Fatalf("exit %d (want %d); the grandchild that ignores SIGTERM alive after redisync exited: %v, ticks %d then %d\nstderr: %s",
				code, exitLost, !gone, ticks, len(readLines(f)), p.stderr.String())
		}
		if !strings.Contains(p.stderr.String(), "SIGKILL") {
			t.Fatalf("no SIGKILL said: %s", p.stderr.String())
		}
	})

	// A command that exits leaving processes in its group: they get
	// SIGTERM, then SIGKILL after -grace, and the lock is held until they
	// are gone: a waiter's command runs after their last tick.
	t.Run("Leftovers", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f, pidf := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		leave := `(trap "" TERM; while :; do echo tick >> ` + f + `; sleep 0.02; done) & echo $! > ` + pidf + `; sleep 0.2`
		p := sh.start(t, nil, sh.args("lock", "-grace", "500ms", "leftovers", "--", "sh", "-c", leave)...)
		pid := readPid(t, pidf)
		waitFile(t, f, 1, 30*time.Second)
		w := sh.start(t, nil, sh.args("lock", "leftovers", "--", "sh", "-c", "echo next >> "+f)...)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		if alive(pid) {
			t.Fatalf("the command's leftover runs on after redisync exited: %s", p.stderr.String())
		}
		if code := w.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("the waiter: exit %d: %s", code, w.stderr.String())
		}
		if rest := after(t, f, "next"); len(rest) > 0 {
			t.Fatalf("the leftover ran beside the next holder: %q after it", rest)
		}
		if s := p.stderr.String(); !strings.Contains(s, "leaving processes in its group") || !strings.Contains(s, "SIGKILL") {
			t.Fatalf("stderr: %s", s)
		}
	})

	// The supervisor killed: redisync kills the command's group (the
	// kernel has killed its first process, on Linux) and says so.
	t.Run("SupervisorKilled", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		f, pidf, supf := filepath.Join(dir, "log"), filepath.Join(dir, "pid"), filepath.Join(dir, "sup")
		cmd := `echo $PPID > ` + supf + `; (while :; do echo tick >> ` + f + `; sleep 0.02; done) & echo $! > ` + pidf + `; wait`
		p := sh.start(t, nil, sh.args("lock", "sup-killed", "--", "sh", "-c", cmd)...)
		pid, sup := readPid(t, pidf), readPid(t, supf)
		if sup == p.cmd.Process.Pid {
			t.Fatal("the command's parent is redisync, not a supervisor")
		}
		_ = syscall.Kill(sup, syscall.SIGKILL)
		if code := p.wait(t, 30*time.Second); code != exitFailed || !strings.Contains(p.stderr.String(), "supervisor ended unexpectedly") {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		if alive(pid) {
			t.Fatal("the grandchild runs on")
		}
		if n := rdb.Exists(t.Context(), "sup-killed").Val(); n != 0 {
			t.Fatal("the lock is still held")
		}
	})
}

// TestBinaryReplaced: a redisync whose binary was removed while it waited
// for the lock (an upgrade) still starts its supervisor once it holds it.
func TestBinaryReplaced(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/self/exe is Linux's")
	}
	sh := buildShell(t)
	lib, err := redisync.New(sh.srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lib.Close() })
	m := lib.Mutex("replaced")
	h, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sh.bin)
	if err != nil {
		t.Fatal(err)
	}
	copyBin := filepath.Join(t.TempDir(), "redisync")
	if err := os.WriteFile(copyBin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	p := (&shell{bin: copyBin, srv: sh.srv}).start(t, nil, sh.args("lock", "-v", "replaced", "--", "touch", ran)...)
	// Started (exec'd) by now; it waits for the lock.
	if err := os.Remove(copyBin); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(h); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr.String())
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("the command did not run")
	}
}

// stateOf returns a process's state letter from /proc (R, S, T, Z...),
// or "" when it is gone or unknown.
func stateOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
