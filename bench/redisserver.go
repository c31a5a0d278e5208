package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is the private redis-server the benchmarks run against: a free
// 127.0.0.1 port, no persistence, killed by the kernel if this process dies
// (Pdeathsig) and stopped by stop() on a normal exit, a panic or a signal.
type redisServer struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

func findRedisServer(flagPath string) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("redis-server not found (install it, e.g. apt-get install redis-server, or pass -redis-server PATH)")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts a redis-server with the extra arguments (e.g. cluster
// mode) added to the defaults.
func startRedis(bin string, extra ...string) (*redisServer, error) {
	dir, err := os.MkdirTemp("", "redisync-bench-")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 10 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, done: make(chan struct{})}
		logPath := filepath.Join(dir, "redis.log")
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", logPath, "--daemonize", "no"}
		s.cmd = exec.Command(bin, append(args, extra...)...)
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
		if err := s.cmd.Start(); err != nil {
			return nil, err
		}
		go func() { _ = s.cmd.Wait(); close(s.done) }()
		if err := s.waitReady(10 * time.Second); err != nil {
			s.stop()
			log, _ := os.ReadFile(logPath)
			lastErr = fmt.Errorf("%v; log: %s", err, strings.TrimSpace(string(log)))
			if strings.Contains(string(log), "Address already in use") {
				continue
			}
			return nil, lastErr
		}
		return s, nil
	}
	return nil, lastErr
}

func (s *redisServer) waitReady(d time.Duration) error {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(d)
	for {
		select {
		case <-s.done:
			return errors.New("redis-server exited at start")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not ready after %v: %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop terminates the server (SIGTERM, SIGKILL after 3s) and removes its
// directory. Safe to call more than once and from a signal handler.
func (s *redisServer) stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(3 * time.Second):
				_ = s.cmd.Process.Kill()
				<-s.done
			}
		}
		_ = os.RemoveAll(s.dir)
	})
}
