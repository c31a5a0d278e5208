//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The supervisor: a second redisync process, re-executed from the same
// binary, between the redisync that holds the lock and the command. It
// starts the command in a process group of its own (in the terminal's
// foreground when redisync is there), tells redisync what becomes of the
// command's first process (started, stopped, exited) on an events pipe,
// and watches a control pipe whose only writer is redisync: when that pipe
// ends without "done" — redisync was killed, even with SIGKILL — it sends
// SIGKILL to the command's whole process group. It is in a process group
// of its own too, so that neither the terminal's signals nor a kill of
// redisync's job (kill -9 %1) reach it.
//
// It is started as: redisync <superviseArg> fg|bg -- COMMAND [ARGS...],
// with the control pipe's read end as fd 3 and the events pipe's write
// end as fd 4.

// Lines on the events pipe, from the supervisor to redisync.
const (
	evPid  = "pid"  // pid N: the command runs, leading process group N
	evFail = "fail" // fail CODE MESSAGE: it could not be started
	evStop = "stop" // stop SIG: its first process was stopped by SIG
	evExit = "exit" // exit STATUS: its first process ended (128+N for signal N)
)

// ctlDone is what redisync writes on the control pipe when it ends in
// order: the supervisor then exits without killing anything.
const ctlDone = "done\n"

// superviseMain is the supervisor's main; it returns its exit status.
func superviseMain(args []string) int {
	if len(args) < 3 || args[1] != "--" || (args[0] != "fg" && args[0] != "bg") {
		fmt.Fprintln(os.Stderr, "redisync: the supervisor is started by redisync itself")
		return exitUsage
	}
	syscall.CloseOnExec(3) // neither pipe reaches the command
	syscall.CloseOnExec(4)
	ctl, events := os.NewFile(3, "control"), os.NewFile(4, "events")
	s := &supervisor{events: events, chld: make(chan os.Signal, 1)}
	signal.Notify(s.chld, syscall.SIGCHLD)
	adoptOrphans()

	orderly := make(chan bool, 1)
	go func() {
		line, err := bufio.NewReader(ctl).ReadString('\n')
		orderly <- err == nil && line == ctlDone
	}()
	select {
	case <-orderly: // redisync is gone, or done, before anything ran
		return 0
	default:
	}
	pgid, err := s.start(args[0] == "fg", args[2:])
	if err != nil {
		return 0
	}
	// Ignored from here on (the command's dispositions were set when it
	// started): only redisync ends the supervisor, or a SIGKILL.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
		syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU, syscall.SIGPIPE)
	if <-orderly {
		return 0
	}
	// redisync ended without saying done: it was killed. Kill first, then
	// say so (a write to a closed stderr may end this process).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	fmt.Fprintf(os.Stderr, "redisync: the redisync holding the lock has died: SIGKILL sent to the command's process group %d\n", pgid)
	return 0
}

// supervisor is the state of a supervisor process.
type supervisor struct {
	mu     sync.Mutex
	events io.Writer
	chld   chan os.Signal // SIGCHLD
}

// tell writes one line to redisync.
func (s *supervisor) tell(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = fmt.Fprintf(s.events, format+"\n", args...)
}

// start starts argv as the leader of a new process group, in the
// terminal's foreground if fg, and follows its first process; it returns
// the group's ID.
func (s *supervisor) start(fg bool, argv []string) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr()
	if fg {
		if tty, err := openTTY(); err == nil {
			defer tty.Close()
			cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, int(tty.Fd())
		}
	}
	if err := cmd.Start(); err != nil {
		code := exitCannotRun
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			code = exitNotFound
		}
		s.tell("%s %d cannot run %q: %v", evFail, code, argv[0], err)
		return 0, err
	}
	pid := cmd.Process.Pid
	s.tell("%s %d", evPid, pid)
	go s.follow(pid, s.chld)
	return pid, nil
}

// follow waits for the command's first process and tells redisync each
// time it stops, and once it ends. It never calls cmd.Wait: stops are
// seen only with WUNTRACED. It also reaps the processes the command
// orphans, which a subreaper adopts (Linux: see adoptOrphans), so that a
// dead one is gone from the group at once, even where nothing else would
// reap it; chld tells when there may be one to reap.
func (s *supervisor) follow(pid int, chld <-chan os.Signal) {
	leaderDone := false
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
		case errors.Is(err, syscall.ECHILD) && leaderDone:
			<-chld // none now; an orphan may be adopted later
		case err != nil:
			if !leaderDone {
				s.tell("%s %d", evExit, exitFailed)
			}
			return
		case got != pid: // an orphan of the command's, adopted and reaped
		case ws.Stopped():
			s.tell("%s %d", evStop, int(ws.StopSignal()))
		case ws.Exited():
			s.tell("%s %d", evExit, ws.ExitStatus())
			leaderDone = true
		case ws.Signaled():
			s.tell("%s %d", evExit, 128+int(ws.Signal()))
			leaderDone = true
		}
	}
}

// event is one line from the supervisor.
type event struct {
	kind string
	n    int    // the pid, status, signal or code
	msg  string // fail's message
}

// readEvents sends the supervisor's lines on a channel, closed when the
// supervisor's end of the pipe closes.
func readEvents(r io.Reader) <-chan event {
	ch := make(chan event, 8)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			num, msg, _ := strings.Cut(rest, " ")
			n, err := strconv.Atoi(num)
			if err != nil {
				continue
			}
			ch <- event{kind: kind, n: n, msg: msg}
		}
	}()
	return ch
}
