//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
	"github.com/redisync-go/redisync/internal/keys"
	"github.com/redisync-go/redisync/internal/redistest"
)

// TestShell runs the built redisync against a real redis-server, with
// shell commands as children that write what they do to files.
func TestShell(t *testing.T) {
	sh := buildShell(t)
	ctx := context.Background()
	lib, err := redisync.New(sh.srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lib.Close() })
	rdb := sh.srv.Client(t)

	// Five redisync lock racing on one name never overlap: every child's
	// start is followed by its own end.
	t.Run("LockExcludes", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join(t.TempDir(), "log")
		var ps []*proc
		for range 5 {
			ps = append(ps, sh.start(t, nil, sh.args("lock", "-lease", "1s", "excl", "--",
				"sh", "-c", `echo start-$$ >> `+f+`; sleep 0.1; echo end-$$ >> `+f)...))
		}
		for _, p := range ps {
			if code := p.wait(t, time.Minute); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr.String())
			}
		}
		lines := readLines(f)
		if len(lines) != 10 {
			t.Fatalf("want 10 lines, got %q", lines)
		}
		for i := 0; i < len(lines); i += 2 {
			if !strings.HasPrefix(lines[i], "start-") || lines[i+1] != "end-"+strings.TrimPrefix(lines[i], "start-") {
				t.Fatalf("overlap at line %d: %q", i, lines)
			}
		}
	})

	// Against a lock held elsewhere: -wait 0 exits 75 at once, saying who
	// holds it; -conflict-exit-code chooses the status; -wait D waits D.
	t.Run("TryOnce", func(t *testing.T) {
		t.Parallel()
		m := lib.Mutex("held")
		h, err := m.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Unlock(h) })
		ran := filepath.Join(t.TempDir(), "ran")
		p := sh.run(t, sh.args("lock", "-wait", "0", "held", "--", "touch", ran)...)
		if p.code != exitNotAcquired || p.took > 5*time.Second {
			t.Fatalf("exit %d after %v, want %d at once: %s", p.code, p.took, exitNotAcquired, p.stderr.String())
		}
		if want := "held by client " + lib.ID(); !strings.Contains(p.stderr.String(), want) {
			t.Fatalf("stderr does not say %q: %s", want, p.stderr.String())
		}
		t.Logf("-wait 0: %v: %s", p.took, p.stderr.String())
		p = sh.run(t, sh.args("lock", "-wait", "0", "-conflict-exit-code", "0", "held", "--", "touch", ran)...)
		if p.code != 0 {
			t.Fatalf("-conflict-exit-code 0: exit %d", p.code)
		}
		p = sh.run(t, sh.args("lock", "-wait", "300ms", "held", "--", "touch", ran)...)
		if p.code != exitNotAcquired || p.took < 300*time.Millisecond {
			t.Fatalf("-wait 300ms: exit %d after %v", p.code, p.took)
		}
		if _, err := os.Stat(ran); err == nil {
			t.Fatal("the command ran without the lock")
		}

		// A signal ends a wait with 128+N, leaving no waiter behind.
		w := sh.start(t, nil, sh.args("lock", "held", "--", "touch", ran)...)
		time.Sleep(500 * time.Millisecond)
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		if code := w.wait(t, 30*time.Second); code != 128+15 || !strings.Contains(w.stderr.String(), "terminated while waiting") {
			t.Fatalf("SIGTERM while waiting: exit %d: %s", code, w.stderr.String())
		}
		if hs, err := m.Holders(ctx); err != nil || len(hs) != 1 || hs[0].ClientID != lib.ID() {
			t.Fatalf("holders after the wait: %v, %v", hs, err)
		}

		// A semaphore whose permits are all held: the same.
		s := lib.Semaphore("full")
		if err := s.SetPermits(ctx, 1); err != nil {
			t.Fatal(err)
		}
		sh2, err := s.Acquire(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Release(sh2, 1) })
		p = sh.run(t, sh.args("semaphore", "-permits", "1", "-wait", "0", "full", "--", "touch", ran)...)
		if want := "held by client " + lib.ID() + " (1 permits"; p.code != exitNotAcquired || !strings.Contains(p.stderr.String(), want) {
			t.Fatalf("exit %d, want %d and %q: %s", p.code, exitNotAcquired, want, p.stderr.String())
		}
	})

	// The child's status passes through (128+N for a signal), and its
	// environment has REDISYNC_NAME and, with -fence, REDISYNC_TOKEN: the
	// fencing token, which is the library's counter.
	t.Run("Status", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			cmd  string
			want int
		}{{"exit 7", 7}, {"kill -TERM $$", 128 + 15}, {"true", 0}} {
			if p := sh.run(t, sh.args("lock", "st", "--", "sh", "-c", c.cmd)...); p.code != c.want {
				t.Errorf("%s: exit %d, want %d: %s", c.cmd, p.code, c.want, p.stderr.String())
			}
		}
		if p := sh.run(t, sh.args("lock", "st", "--", "no-such-command-here")...); p.code != exitNotFound {
			t.Errorf("a missing command: exit %d, want %d: %s", p.code, exitNotFound, p.stderr.String())
		}
		p := sh.run(t, sh.args("lock", "-fence", "st:fenced", "--", "sh", "-c", `echo "$REDISYNC_NAME" "$REDISYNC_TOKEN"`)...)
		fence := rdb.Get(ctx, keys.Companion("st:fenced", "fence")).Val()
		if got, want := strings.TrimSpace(p.stdout.String()), "st:fenced "+fence; p.code != 0 || fence == "" || got != want {
			t.Fatalf("exit %d, child saw %q, want %q", p.code, got, want)
		}
		p = sh.run(t, sh.args("lock", "st", "--", "sh", "-c", `echo "[$REDISYNC_TOKEN]"`)...)
		if got := strings.TrimSpace(p.stdout.String()); got != "[]" {
			t.Fatalf("without -fence REDISYNC_TOKEN is %q", got)
		}
	})

	// SIGINT, SIGTERM and SIGHUP to redisync reach the child, and the lock
	// is free once it has exited.
	t.Run("Signals", func(t *testing.T) {
		t.Parallel()
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
			t.Run(sig.String(), func(t *testing.T) {
				t.Parallel()
				f := filepath.Join(t.TempDir(), "log")
				name := "sig:" + strconv.Itoa(int(sig))
				trap := fmt.Sprintf(`trap 'echo got >> %s; exit 5' %d; echo ready >> %s; while :; do sleep 0.05; done`, f, sig, f)
				p := sh.start(t, nil, sh.args("lock", name, "--", "sh", "-c", trap)...)
				waitFile(t, f, 1, 30*time.Second)
				_ = p.cmd.Process.Signal(sig)
				if code := p.wait(t, 30*time.Second); code != 5 {
					t.Fatalf("exit %d, want the child's 5: %s", code, p.stderr.String())
				}
				if lines := readLines(f); len(lines) != 2 || lines[1] != "got" {
					t.Fatalf("the child did not get %v: %q", sig, lines)
				}
				if n := rdb.Exists(ctx, name).Val(); n != 0 {
					t.Fatal("the lock is still held")
				}
			})
		}
	})

	// A lease lost while the child runs (its key deleted, or ForceUnlock
	// by another Client) terminates the child within the lease: SIGTERM,
	// then SIGKILL after -grace for a child that ignores it; redisync says
	// so and exits 70.
	t.Run("LeaseLost", func(t *testing.T) {
		t.Parallel()
		const lease = time.Second
		for _, c := range []struct {
			name  string
			take  func(name string) error
			child func(path string) []string
			grace string
		}{
			{"Del", func(name string) error { return rdb.Del(ctx, name).Err() }, looper, "10s"},
			{"ForceUnlock", func(name string) error { _, err := lib.Mutex(name).ForceUnlock(ctx); return err }, looper, "10s"},
			{"Kill", func(name string) error { return rdb.Del(ctx, name).Err() }, func(path string) []string {
				return []string{"sh", "-c", `trap 'echo term >> ` + path + `' TERM; echo ready >> ` + path + `; while :; do sleep 0.05; done`}
			}, "300ms"},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				f := filepath.Join(t.TempDir(), "log")
				name := "lost:" + c.name
				p := sh.start(t, nil, append(sh.args("lock", "-lease", lease.String(), "-grace", c.grace, name, "--"), c.child(f)...)...)
				waitFile(t, f, 1, 30*time.Second)
				taken := time.Now()
				if err := c.take(name); err != nil {
					t.Fatal(err)
				}
				lines := waitFile(t, f, 2, 30*time.Second)
				told := time.Since(taken)
				code := p.wait(t, 30*time.Second)
				t.Logf("%s: the child was told %v after, redisync exited %v after: %s", c.name, told, time.Since(taken), p.stderr.String())
				if lines[1] != "term" || code != exitLost || !strings.Contains(p.stderr.String(), "lease lost") {
					t.Fatalf("exit %d, child's log %q, stderr: %s", code, lines, p.stderr.String())
				}
				// Renewals run every third of the lease: the next one finds the
				// key gone. Generous for a loaded machine, well under the grace.
				if told > lease+2*time.Second {
					t.Fatalf("the child was told %v after its lock was taken (lease %v)", told, lease)
				}
				if c.name == "Kill" && !strings.Contains(p.stderr.String(), "SIGKILL") {
					t.Fatalf("no SIGKILL after the grace: %s", p.stderr.String())
				}
			})
		}
	})

	// semaphore -permits 2 never runs more than 2 of 5 children at once
	// (and does run 2), and refuses a run that says the semaphore has 3.
	t.Run("Semaphore", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join(t.TempDir(), "log")
		var ps []*proc
		for range 5 {
			ps = append(ps, sh.start(t, nil, sh.args("semaphore", "-permits", "2", "-lease", "1s", "sem", "--",
				"sh", "-c", `echo start >> `+f+`; sleep 0.3; echo end >> `+f)...))
		}
		for _, p := range ps {
			if code := p.wait(t, time.Minute); code != 0 {
				t.Fatalf("exit %d: %s", code, p.stderr.String())
			}
		}
		running, most, starts := 0, 0, 0
		for _, l := range readLines(f) {
			if l == "start" {
				running++
				starts++
			} else {
				running--
			}
			most = max(most, running)
		}
		if most != 2 || starts != 5 {
			t.Fatalf("%d children ran, at most %d at once: %q", starts, most, readLines(f))
		}
		p := sh.run(t, sh.args("semaphore", "-permits", "3", "sem", "--", "true")...)
		if p.code == 0 || !strings.Contains(p.stderr.String(), `semaphore "sem" has 2 permits in Redis, not 3`) {
			t.Fatalf("exit %d: %s", p.code, p.stderr.String())
		}
	})

	// elect runs one child; when its redisync is killed (SIGKILL), its child
	// dies with it (its supervisor kills it), and another candidate's child runs within the lease,
	// with a greater term.
	t.Run("Elect", func(t *testing.T) {
		t.Parallel()
		const lease = time.Second
		f := filepath.Join(t.TempDir(), "log")
		// $PPID is the supervisor; its parent, the redisync.
		child := []string{"sh", "-c", `echo $(ps -o ppid= -p $PPID | tr -d ' '):$$:$REDISYNC_TOKEN >> ` + f + `; while :; do sleep 0.05; done`}
		ps := map[int]*proc{}
		for range 3 {
			p := sh.start(t, nil, append(sh.args("elect", "-lease", lease.String(), "leader", "--"), child...)...)
			ps[p.cmd.Process.Pid] = p
		}
		first := waitFile(t, f, 1, 30*time.Second)
		time.Sleep(lease / 2)
		if lines := readLines(f); len(lines) != 1 {
			t.Fatalf("two leaders: %q", lines)
		}
		busy := sh.run(t, sh.args("elect", "-wait", "0", "leader", "--", "true")...)
		if busy.code != exitNotAcquired || !strings.Contains(busy.stderr.String(), `not acquired at once (-wait 0); led by "`) {
			t.Fatalf("-wait 0 while led: exit %d: %s", busy.code, busy.stderr.String())
		}
		var parent, pid int
		var term int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(first[0], ":", " "), "%d %d %d", &parent, &pid, &term); err != nil || ps[parent] == nil {
			t.Fatalf("the child wrote %q (%v)", first[0], err)
		}
		_ = ps[parent].cmd.Process.Kill()
		killed := time.Now()
		lines := waitFile(t, f, 2, 30*time.Second)
		took := time.Since(killed)
		var parent2, pid2 int
		var term2 int64
		if _, err := fmt.Sscanf(strings.ReplaceAll(lines[1], ":", " "), "%d %d %d", &parent2, &pid2, &term2); err != nil || ps[parent2] == nil || parent2 == parent {
			t.Fatalf("the next leader wrote %q (%v)", lines[1], err)
		}
		t.Logf("the next leader ran %v after the first's redisync was killed", took)
		if term2 <= term {
			t.Fatalf("term %d after term %d", term2, term)
		}
		if took > lease+2*time.Second {
			t.Fatalf("the next leader ran %v after, with a lease of %v", took, lease)
		}
		for deadline := time.Now().Add(10 * time.Second); alive(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				t.Fatal("the killed redisync's child runs on")
			}
		}
	})

	// Bad input is refused with a message and a non-zero status, and a
	// Redis that does not answer is given up within the dial timeout.
	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		silent, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = silent.Close() })
		go func() { // accepts, never answers
			for {
				c, err := silent.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { _ = c.Close() })
			}
		}()
		refused, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_ = refused.Close()
		for _, c := range []struct {
			args []string
			code int
			says string
		}{
			{sh.args("lock", "x", "true"), exitUsage, "no -- before the command"},
			{sh.args("lock", "x", "--"), exitUsage, "no command after --"},
			{sh.args("lock", "", "--", "true"), exitUsage, "an empty NAME"},
			{sh.args("lock", "--", "true"), exitUsage, "no -- before the command"},
			{sh.args("lock", "a", "b", "--", "true"), exitUsage, "one NAME before --"},
			{sh.args("lock", "-lease", "0s", "x", "--", "true"), exitUsage, "-lease 0s"},
			{sh.args("semaphore", "x", "--", "true"), exitUsage, "-permits N (N > 0) is required"},
			{sh.args("lock", "-nope", "x", "--", "true"), exitUsage, "flag provided but not defined"},
			{[]string{"lock", "-url", "http://x", "x", "--", "true"}, exitUsage, "bad Redis URL"},
			{[]string{"lock", "-url", "redis://127.0.0.1:1/x", "x", "--", "true"}, exitUsage, "bad Redis URL"},
			{[]string{"lock", "-redis", "127.0.0.1:1", "-cluster", "127.0.0.1:2", "x", "--", "true"}, exitUsage, "give one of"},
			{[]string{"lock", "-sentinel", "127.0.0.1:1", "x", "--", "true"}, exitUsage, "want MASTER@host:port"},
			{[]string{"lock", "-redis", refused.Addr().String(), "x", "--", "true"}, exitFailed, "connection refused"},
			{[]string{"lock", "-url", "redis://" + silent.Addr().String() + "/?dial_timeout=1s", "x", "--", "true"}, exitFailed, "no answer within 1s"},
			{[]string{"inspect", "-url", "redis://" + silent.Addr().String() + "/?dial_timeout=1s", "x"}, exitFailed, "no answer within 1s"},
		} {
			p := sh.run(t, c.args...)
			if p.code != c.code || !strings.Contains(p.stderr.String(), c.says) {
				t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, p.code, p.stderr.String(), c.code, c.says)
			}
			if p.took > 10*time.Second {
				t.Errorf("%q: took %v", c.args, p.took)
			}
		}
	})

	// A Redis Cluster (named, or detected from one node) and a master
	// found through Sentinel: the lock is taken there, as its fencing
	// counter shows.
	t.Run("Topologies", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t, 3)
		master := redistest.Start(t)
		sen := redistest.StartSentinel(t, master, "main", 0)
		for _, c := range []struct {
			conn []string
			rdb  redis.UniversalClient
		}{
			{[]string{"-cluster", strings.Join(cl.Addrs(), ",")}, cl.Client(t)},
			{[]string{"-redis", cl.Addrs()[1]}, cl.Client(t)},
			{[]string{"-sentinel", "main@" + sen.Addr()}, master.Client(t)},
		} {
			for _, name := range []string{"a", "b", "c"} { // on several masters
				args := append(append([]string{"lock", "-fence"}, c.conn...), name, "--", "sh", "-c", "echo $REDISYNC_TOKEN")
				p := sh.run(t, args...)
				fence := c.rdb.Get(ctx, keys.Companion(name, "fence")).Val()
				if got := strings.TrimSpace(p.stdout.String()); p.code != 0 || fence == "" || got != fence {
					t.Fatalf("%v: exit %d, token %q, counter %q: %s", c.conn, p.code, got, fence, p.stderr.String())
				}
			}
		}
	})

	// The URL's user, password and database are used, from -url or
	// REDIS_URL; help shows the examples.
	t.Run("URL", func(t *testing.T) {
		t.Parallel()
		if err := rdb.Do(ctx, "ACL", "SETUSER", "cli", "on", ">secret", "~*", "&*", "+@all").Err(); err != nil {
			t.Fatal(err)
		}
		url := "redis://cli:secret@" + sh.srv.Addr() + "/3"
		f := filepath.Join(t.TempDir(), "log")
		p := sh.start(t, nil, append([]string{"lock", "-url", url, "in-db-3", "--"}, looper(f)...)...)
		waitFile(t, f, 1, 30*time.Second)
		db3 := redis.NewClient(&redis.Options{Addr: sh.srv.Addr(), DB: 3})
		defer db3.Close()
		if db3.Exists(ctx, "in-db-3").Val() != 1 || rdb.Exists(ctx, "in-db-3").Val() != 0 {
			t.Fatal("the lock is not in database 3")
		}
		other := sh.start(t, []string{"REDIS_URL=" + url}, "lock", "-wait", "0", "in-db-3", "--", "true")
		if code := other.wait(t, time.Minute); code != exitNotAcquired {
			t.Fatalf("REDIS_URL: exit %d: %s", code, other.stderr.String())
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t, time.Minute); code != 9 {
			t.Fatalf("exit %d: %s", code, p.stderr.String())
		}
		bad := sh.run(t, "lock", "-url", "redis://cli:wrong@"+sh.srv.Addr()+"/3", "x", "--", "true")
		if bad.code != exitFailed || !strings.Contains(bad.stderr.String(), "WRONGPASS") {
			t.Fatalf("a wrong password: exit %d: %s", bad.code, bad.stderr.String())
		}
		var out bytes.Buffer
		if err := run(ctx, []string{"help"}, &out); err != nil || !strings.Contains(out.String(), "0 3 * * * redisync lock -wait 0") {
			t.Fatalf("help: %v\n%s", err, out.String())
		}
	})
}
