package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// noReapEnv makes the test binary a subreaper that reaps nothing but the
// command it runs (asHelper), as a container's first process that is not
// an init: the orphans it adopts stay zombies.
const noReapEnv = "REDISYNC_TEST_NOREAP"

// noReaper runs argv as a child, adopting the orphans below it and reaping
// none of them, and returns the child's status.
func noReaper(argv []string) int {
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 127
	}
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err == syscall.EINTR {
			continue
		} else if err != nil {
			return 1
		}
		return statusOfWait(ws)
	}
}

// TestOrphansReaped: where nothing reaps orphans (redisync under a
// container's first process that is not an init), a leftover of the
// command that died on SIGTERM is gone at once, not a zombie that keeps
// the command's group alive: the supervisor adopts and reaps them. Before,
// redisync waited for it through the grace (20s here) and SIGKILL's bound.
func TestOrphansReaped(t *testing.T) {
	sh := buildShell(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pidf := filepath.Join(t.TempDir(), "pid")
	p := &proc{cmd: exec.Command(self, append([]string{sh.bin}, sh.args("lock", "-grace", "20s", "orphans", "--",
		"sh", "-c", `sleep 60 & echo $! > `+pidf)...)...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), noReapEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); p.code = statusOf(p.cmd.ProcessState); close(p.done) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	readPid(t, pidf)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Fatalf("exit %d: %s", code, p.stderr.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("redisync exited %v after its start, its command's dead leftover a zombie meanwhile: %s", took, p.stderr.String())
	}
}
