package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/redisync-go/redisync/internal/redistest"
)

// session is a pty whose session leader is the job-control shell of
// jobshell_linux_test.go, run by a test.
type session struct {
	t      *testing.T
	master *os.File
	ctl    *os.File
	events chan string
	job    int // the last job's process group (its first process's pid)

	mu  sync.Mutex
	out strings.Builder // what the terminal showed
}

// startSession opens a pty and starts the shell on it.
func startSession(t *testing.T) *session {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pty: %v", err)
	}
	t.Cleanup(func() { _ = master.Close() })
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer slave.Close()
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), jobShellEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.ExtraFiles = []*os.File{ctlR, evW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_, _ = ctlR.Close(), evW.Close()
	s := &session{t: t, master: master, ctl: ctlW, events: make(chan string, 16)}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			s.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(evR)
		for sc.Scan() {
			s.events <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if s.job != 0 { // a job left running: SIGKILL to redisync, whose supervisor kills the command
			_ = syscall.Kill(-s.job, syscall.SIGKILL)
		}
		_ = ctlW.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = evR.Close()
	})
	return s
}

// screen is what the terminal has shown so far.
func (s *session) screen() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// start starts argv as the shell's job, in the foreground (fg) or in the
// background, and returns its process group.
func (s *session) start(fg bool, argv ...string) int {
	s.t.Helper()
	b, _ := json.Marshal(argv)
	verb := "bg"
	if fg {
		verb = "run"
	}
	s.send(verb + " " + string(b))
	ev := s.next("started", 30*time.Second)
	pgid, err := strconv.Atoi(strings.TrimPrefix(ev, "started "))
	if err != nil {
		s.t.Fatalf("shell: %q", ev)
	}
	s.job = pgid
	return pgid
}

func (s *session) send(line string) {
	s.t.Helper()
	if _, err := fmt.Fprintln(s.ctl, line); err != nil {
		s.t.Fatal(err)
	}
}

// next returns the shell's next event, which must start with want, within d.
func (s *session) next(want string, d time.Duration) string {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok || !strings.HasPrefix(ev, want) {
			s.t.Fatalf("shell said %q (open %v), want %q; terminal:\n%s", ev, ok, want, s.screen())
		}
		return ev
	case <-time.After(d):
		s.t.Fatalf("shell said no %q within %v; terminal:\n%s", want, d, s.screen())
		return ""
	}
}

// exited waits for the job's end and checks its status and that the
// terminal's foreground was given back to the job's group (redisync's).
func (s *session) exited(status int) {
	s.t.Helper()
	ev := s.next("exited", 30*time.Second)
	var code, fg int
	if _, err := fmt.Sscanf(ev, "exited %d %d", &code, &fg); err != nil {
		s.t.Fatalf("shell: %q", ev)
	}
	if code != status || fg != s.job {
		s.t.Fatalf("exit %d (want %d), the terminal's foreground %d at exit (want redisync's %d); terminal:\n%s",
			code, status, fg, s.job, s.screen())
	}
	s.job = 0
}

// shows waits up to d for the terminal to show want. What redisync writes
// reaches the pty's reader on its own schedule, not before the shell's
// report of its exit, which comes on another pipe.
func (s *session) shows(want string, d time.Duration) {
	s.t.Helper()
	for deadline := time.Now().Add(d); !strings.Contains(s.screen(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatalf("the terminal showed no %q within %v:\n%s", want, d, s.screen())
		}
	}
}

// keys types text on the terminal.
func (s *session) keys(text string) {
	s.t.Helper()
	if _, err := s.master.WriteString(text); err != nil {
		s.t.Fatal(err)
	}
}

// waitStopped waits up to 10s for process pid to be stopped (from /proc).
// "D" counts: dash vforks, and a parent waiting for its vforked child,
// stopped before its exec, is in D, not T, and runs no more than it. The
// tests also check that the command writes nothing meanwhile.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); stateOf(pid) != "T" && stateOf(pid) != "D"; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is in state %q, not stopped", pid, stateOf(pid))
		}
	}
}

// TestTerminal runs redisync as a job of an interactive shell on a pty
// (issue 42, breaks 3 and 4), with commands whose work is a grandchild.
func TestTerminal(t *testing.T) {
	sh := buildShell(t)
	lock := func(rest ...string) []string { return append([]string{sh.bin}, sh.args("lock", rest...)...) }

	// A command that reads the terminal reads it: its group has the
	// terminal's foreground (it was stopped for good by SIGTTIN), and
	// redisync's group has it back when it ends.
	t.Run("Read", func(t *testing.T) {
		t.Parallel()
		s := startSession(t)
		dir := t.TempDir()
		ready, out := filepath.Join(dir, "ready"), filepath.Join(dir, "out")
		s.start(true, lock("tty-read", "--", "sh", "-c", `echo ready > `+ready+`; head -n1 > `+out+`; true`)...)
		waitFile(t, ready, 1, 30*time.Second)
		s.keys("hello\n")
		if got := waitFile(t, out, 1, 30*time.Second); got[0] != "hello" {
			t.Fatalf("the command read %q", got)
		}
		s.exited(0)
	})

	// Started in the background (cmd &), the command stops when it reads
	// the terminal, and redisync with it, as a job; fg gives it the
	// terminal and it reads.
	t.Run("ReadAfterFg", func(t *testing.T) {
		t.Parallel()
		s := startSession(t)
		dir := t.TempDir()
		ready, out := filepath.Join(dir, "ready"), filepath.Join(dir, "out")
		s.start(false, lock("tty-bg", "--", "sh", "-c", `echo ready > `+ready+`; head -n1 > `+out+`; true`)...)
		waitFile(t, ready, 1, 30*time.Second)
		s.next("stopped", 30*time.Second)
		s.send("fg")
		s.keys("hello\n")
		if got := waitFile(t, out, 1, 30*time.Second); got[0] != "hello" {
			t.Fatalf("the command read %q", got)
		}
		s.exited(0)
	})

	// ^Z stops the command and redisync together: renewals stop with it.
	// Past the lease, another holder takes the lock (PastLease); or the
	// lock is taken away meanwhile (Taken: deleted, long before this
	// process could tell by itself, its lease being 10s) and another holder
	// runs, and Redis is slow to answer when fg comes (paused for 300ms):
	// a command continued before redisync knew would run meanwhile. On fg,
	// redisync finds its hold lost before the command runs again, kills
	// the stopped group and exits 70: nothing of the command ran after the
	// other holder.
	for _, c := range []struct {
		name, lease, wait string
		taken             bool
	}{
		{"PastLease", "1s", "30s", false},
		{"Taken", "10s", "0", true},
	} {
		t.Run("Stop"+c.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			lock := func(rest ...string) []string {
				return append([]string{sh.bin, "lock", "-redis", srv.Addr()}, rest...)
			}
			s := startSession(t)
			dir := t.TempDir()
			name := "tty-stop"
			f, pidf := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
			// Its work ticks without pause, so that it would tick at once if
			// it were continued before redisync knew it had lost the lock.
			spin := `(while :; do echo tick >> ` + f + `; done) & echo $! > ` + pidf + `; wait`
			job := s.start(true, lock("-lease", c.lease, name, "--", "sh", "-c", spin)...)
			pid := readPid(t, pidf)
			waitFile(t, f, 3, 30*time.Second)
			s.keys("\x1a") // ^Z
			s.next("stopped", 30*time.Second)
			waitStopped(t, pid)
			waitStopped(t, job)
			ticks := len(readLines(f))
			if c.taken {
				if err := srv.Client(t).Del(t.Context(), name).Err(); err != nil {
					t.Fatal(err)
				}
			}
			other := sh.run(t, lock("-wait", c.wait, name, "--", "sh", "-c", "echo other >> "+f)[1:]...)
			if other.code != 0 {
				t.Fatalf("the other holder: exit %d: %s", other.code, other.stderr.String())
			}
			if n := len(readLines(f)); n != ticks+1 {
				t.Fatalf("the stopped command ticked: %d lines, then %d with the other holder's", ticks, n)
			}
			if c.taken {
				srv.Pause()
				s.send("fg")
				time.Sleep(300 * time.Millisecond)
				srv.Resume()
			} else {
				s.send("fg")
			}
			s.exited(exitLost)
			if rest := after(t, f, "other"); len(rest) > 0 || alive(pid) {
				t.Fatalf("the command ran again after it lost the lock (alive %v): %d lines after the other holder's", alive(pid), len(rest))
			}
			s.shows("SIGKILL", 10*time.Second)
			t.Logf("terminal:\n%s", s.screen())
		})
	}

	// ^Z, then fg within the lease: the command goes on where it was and
	// finishes. SIGTSTP sent to redisync (kill -TSTP %1) stops both too.
	t.Run("StopAndGoOn", func(t *testing.T) {
		t.Parallel()
		s := startSession(t)
		dir := t.TempDir()
		f, pidf := filepath.Join(dir, "log"), filepath.Join(dir, "pid")
		const n = 50
		work := fmt.Sprintf(`(i=0; while [ $i -lt %d ]; do echo tick >> %s; i=$((i+1)); sleep 0.02; done) & echo $! > %s; wait`, n, f, pidf)
		job := s.start(true, lock("-lease", "10s", "tty-go-on", "--", "sh", "-c", work)...)
		pid := readPid(t, pidf)
		for _, stop := range []func(){
			func() { s.keys("\x1a") },
			func() { _ = syscall.Kill(job, syscall.SIGTSTP) },
		} {
			waitFile(t, f, len(readLines(f))+2, 30*time.Second)
			stop()
			s.next("stopped", 30*time.Second)
			waitStopped(t, pid)
			waitStopped(t, job)
			stopped := len(readLines(f))
			time.Sleep(100 * time.Millisecond)
			if now := len(readLines(f)); now != stopped {
				t.Fatalf("the stopped command ticked: %d ticks once stopped, %d 100ms later", stopped, now)
			}
			s.send("fg")
		}
		s.exited(0)
		if got := len(readLines(f)); got != n {
			t.Fatalf("%d ticks, want %d", got, n)
		}
	})
}
