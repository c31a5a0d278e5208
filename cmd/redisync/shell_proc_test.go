//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisync-go/redisync/internal/redistest"
)

// Helpers of TestShell, the end-to-end tests of lock, semaphore and elect:
// they build the command once and run it against a real redis-server,
// with shell commands as children that write what they do to files.

// proc is a redisync process started by a test.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	start          time.Time
	done           chan struct{}
	code           int           // exit status, once done is closed
	took           time.Duration // from start to exit, once done is closed
}

// shell runs the built redisync against one redis-server.
type shell struct {
	bin string
	srv *redistest.Server
}

func (sh *shell) start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(sh.bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = redistest.ChildProcAttr()
	p.cmd.WaitDelay = 5 * time.Second // a child left behind may hold the output pipes
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.took = time.Since(p.start)
		p.code = statusOf(p.cmd.ProcessState)
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits at most d for p to exit and returns its status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(d):
		t.Fatalf("%v still running after %v\nstderr: %s", p.cmd.Args, d, p.stderr.String())
		return 0
	}
}

// run runs redisync to its end (at most a minute) and returns its status.
func (sh *shell) run(t *testing.T, args ...string) *proc {
	t.Helper()
	p := sh.start(t, nil, args...)
	p.wait(t, time.Minute)
	return p
}

// conn is the -redis flag of the test's server.
func (sh *shell) conn() []string { return []string{"-redis", sh.srv.Addr()} }

// args returns cmd, the connection flags, then rest.
func (sh *shell) args(cmd string, rest ...string) []string {
	return append(append([]string{cmd}, sh.conn()...), rest...)
}

// buildShell returns the redisync built for the tests that run it (built
// once per run of the package), and starts their redis-server.
func buildShell(t *testing.T) *shell {
	t.Helper()
	built.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			built.err = fmt.Errorf("no go command to build redisync with: %v", err)
			return
		}
		if built.dir, err = os.MkdirTemp("", "redisync-bin-"); err != nil {
			built.err = err
			return
		}
		bin := filepath.Join(built.dir, "redisync")
		if out, err := exec.Command(gobin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return &shell{bin: built.bin, srv: redistest.Start(t)}
}

// waitFile waits up to d for path to have at least n lines and returns them.
func waitFile(t *testing.T, path string, n int, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		lines := readLines(path)
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d lines after %v, want %d: %q", path, len(lines), d, n, lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

// alive tells whether process pid exists and is not a zombie.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// looper is a child that writes "ready" to path, then loops until a
// signal: on SIGTERM it writes "term" and exits 9.
func looper(path string) []string {
	return []string{"sh", "-c", `trap 'echo term >> ` + path + `; exit 9' TERM; echo ready >> ` + path + `; while :; do sleep 0.05; done`}
}
