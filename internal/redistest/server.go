// Package redistest starts private, throw-away redis-server processes for
// tests: single servers, replicas and small clusters, all bound to
// 127.0.0.1 on free ports, with persistence disabled and stopped
// automatically when the test ends.
//
// If redis-server is not installed the calling test is skipped, unless the
// environment variable REDISYNC_REQUIRE_REDIS=1 is set (as scripts/test.sh
// does), in which case it fails.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	readyTimeout   = 10 * time.Second // how long to wait for a new server to answer PING
	stopGrace      = 3 * time.Second  // SIGTERM to SIGKILL delay in Stop
	rebindDuration = 5 * time.Second  // how long Restart retries binding its old port
	startAttempts  = 10               // fresh ports tried by Start on bind failures
)

// Server is a redis-server process owned by a test.
// Its methods are safe for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	args []string // extra arguments, replayed by Restart
	conf string   // a config file read first (Sentinel mode), or ""

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd has been waited for
	paused bool          // stopped by Pause (SIGSTOP) and not yet resumed
}

// errBind reports that redis-server could not listen on its port.
var errBind = errors.New("redis-server could not bind its port")

// Start starts a redis-server on a free 127.0.0.1 port with persistence
// disabled plus the extra command-line args, waits until it answers PING,
// and stops it when tb's test ends. It skips tb (or fails it when
// REDISYNC_REQUIRE_REDIS=1) if redis-server is not installed.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return start(tb, func(int) []string { return args })
}

// start is Start with arguments computed per candidate port.
func start(tb testing.TB, argsFor func(port int) []string) *Server {
	tb.Helper()
	s := &Server{bin: findRedis(tb), dir: tb.TempDir()}
	var err error
	for range startAttempts {
		s.port = freePort(tb)
		s.args = argsFor(s.port)
		if err = s.launch(); !errors.Is(err, errBind) {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// findRedis returns the redis-server binary path or skips/fails tb.
func findRedis(tb testing.TB) string {
	tb.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	if os.Getenv("REDISYNC_REQUIRE_REDIS") == "1" {
		tb.Fatal("redistest: redis-server not found in PATH, /usr/bin or /usr/sbin, " +
			"but REDISYNC_REQUIRE_REDIS=1; install it (e.g. apt-get install redis-server) or run scripts/test.sh")
	}
	tb.Skip("redis-server not installed; run the README test command")
	return ""
}

// freePort returns a loopback port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: pick free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir returns the server's working directory. A dump.rdb placed there is
// loaded by the next Restart (persistence is off, so the server never
// writes one itself): a way to make a restart answer LOADING for a while.
func (s *Server) Dir() string { return s.dir }

// Port returns the server's TCP port; it does not change across Restart.
func (s *Server) Port() int { return s.port }

// Client returns a new go-redis client for the server, closed when tb's
// test ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Stop shuts the server down gracefully (SIGTERM, then SIGKILL if it has not
// exited after a short grace period) and waits for the process. Stopping a
// stopped server does nothing.
func (s *Server) Stop() { s.signal(syscall.SIGTERM, stopGrace) }

// Kill crashes the server with SIGKILL and waits for the process.
// Killing a stopped server does nothing.
func (s *Server) Kill() { s.signal(syscall.SIGKILL, 0) }

// Restart stops the server and starts it again on the same port with the
// same arguments (so with an empty dataset), waiting until it is ready.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop()
	deadline := time.Now().Add(rebindDuration)
	for {
		err := s.launch()
		if err == nil {
			return
		}
		if !errors.Is(err, errBind) || time.Now().After(deadline) {
			tb.Fatalf("redistest: restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Pause freezes the server process (SIGSTOP), as a stall would: connections
// stay open and the kernel still accepts new ones, but nothing is answered
// and no command runs until Resume. Pausing a paused or stopped server does
// nothing; Stop, Kill and Restart work on a paused server.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.paused {
		return
	}
	if err := s.cmd.Process.Signal(sigStop); err == nil {
		s.paused = true
	}
}

// Resume lets a paused server run again (SIGCONT). Resuming a server that is
// not paused does nothing.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resume()
}

// resume is Resume with s.mu held.
func (s *Server) resume() {
	if s.cmd == nil || !s.paused {
		return
	}
	_ = s.cmd.Process.Signal(sigCont)
	s.paused = false
}

func (s *Server) signal(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	// A paused process handles a SIGTERM only once it runs again (a
	// SIGKILL needs no help).
	s.resume()
	if grace > 0 {
		select {
		case <-s.done:
		case <-time.After(grace):
			_ = s.cmd.Process.Kill()
		}
	}
	<-s.done
	s.cmd = nil
}

// launch starts the process on s.port and waits until it is ready.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logPath := filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", s.port))
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	var argv []string
	if s.conf != "" {
		argv = []string{s.conf, "--sentinel"}
	}
	argv = append(argv, "--save", "", "--appendonly", "no", "--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1", "--dir", s.dir)
	argv = append(argv, s.args...)
	cmd := exec.Command(s.bin, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = ChildProcAttr()
	off, _ := logf.Seek(0, io.SeekEnd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			out := readFrom(logPath, off)
			if strings.Contains(out, "Address already in use") || strings.Contains(out, "Failed listening on port") {
				return fmt.Errorf("%w %d: %s", errBind, s.port, out)
			}
			return fmt.Errorf("redis-server %v exited during startup: %s", argv, out)
		default:
		}
		if ping(s.Addr(), cmd.Process.Pid) == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d not ready after %v: %s", s.port, readyTimeout, readFrom(logPath, off))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFrom(path string, off int64) string {
	b, _ := os.ReadFile(path)
	if int64(len(b)) >= off {
		b = b[off:]
	}
	return strings.TrimSpace(string(b))
}

// ping checks that addr answers PING and is served by process pid (so not a
// stranger that grabbed the port).
func ping(addr string, pid int) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(c, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if err != nil || !strings.HasPrefix(line, "$") {
		return fmt.Errorf("INFO answered %q", line)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	if !strings.Contains(string(info), "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
		return errors.New("port served by another process")
	}
	return nil
}

// LoadingKeys matches the keys RestartLoading loads.
const LoadingKeys = "redistest:loading:*"

// SlowLoading returns the redis-server arguments that make a server load
// its data perKey a key (rounded to microseconds), answering LOADING
// meanwhile (the event loop runs every KiB loaded), as a server restarting
// with a large dataset does. Give them to Start, then RestartLoading.
func SlowLoading(perKey time.Duration) []string {
	return []string{"--key-load-delay", strconv.FormatInt(max(perKey.Microseconds(), 1), 10),
		"--loading-process-events-interval-bytes", "1024"}
}

var dumps sync.Map // n → []byte: a dump.rdb of n keys

// dump returns the bytes of a dump.rdb holding n keys matching
// LoadingKeys, made once per n by a server of its own.
func dump(tb testing.TB, n int) []byte {
	tb.Helper()
	if b, ok := dumps.Load(n); ok {
		return b.([]byte)
	}
	s := Start(tb)
	defer s.Stop()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx := context.Background()
	p := c.Pipeline()
	for i := range n {
		p.Set(ctx, "redistest:loading:"+strconv.Itoa(i), "x", 0)
	}
	if _, err := p.Exec(ctx); err != nil {
		tb.Fatalf("redistest: fill the dump: %v", err)
	}
	if err := c.Save(ctx).Err(); err != nil {
		tb.Fatalf("redistest: SAVE: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(s.dir, "dump.rdb"))
	if err != nil {
		tb.Fatalf("redistest: read the dump: %v", err)
	}
	dumps.Store(n, b)
	return b
}

// RestartLoading restarts s as Restart does, except that s loads n keys
// (matching LoadingKeys) as it starts: started with SlowLoading(d), it
// answers LOADING for about n×d before it is ready, and RestartLoading
// returns once it is. Every key s had is lost, as with Restart; the n keys
// loaded stay, for the caller to delete.
func (s *Server) RestartLoading(tb testing.TB, n int) {
	tb.Helper()
	b := dump(tb, n)
	path := filepath.Join(s.dir, "dump.rdb")
	s.Stop()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatalf("redistest: write the dump: %v", err)
	}
	defer os.Remove(path)
	s.Restart(tb)
}
