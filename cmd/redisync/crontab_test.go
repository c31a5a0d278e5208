//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redisync-go/redisync/internal/redistest"
)

// TestCrontabLoop is issue 42's "done when" trial, a new user's crontab
// line on three machines in a loop: every round three `redisync lock
// -wait 0 -conflict-exit-code 0` start at once against one Redis with
// appendonly yes; a job outlasts the rounds between ticks, and its work
// is a child process. Redis is restarted once, keeping its data, while a
// job runs, and the redisync holding the lock is killed with -9 once. No
// two jobs ever run at once: in the jobs' shared log, once a job has
// started no earlier job writes again, and a job starts only after the
// one before it has ended, or was killed or told of a lost lease. Runs
// skipped print nothing. Not parallel: it runs alone in the package, its
// lease being short (1s) for a loaded machine.
func TestCrontabLoop(t *testing.T) {
	const (
		rounds    = 32
		period    = 400 * time.Millisecond // between cron's ticks
		restartAt = 8
		killAt    = 18
	)
	sh := buildShell(t)
	srv := redistest.Start(t, "--appendonly", "yes")
	lag := redistest.WatchLag(t) // reported: a lease of 1s is told lost 100ms before Redis frees it
	log := filepath.Join(t.TempDir(), "log")
	// A job: its work is a subshell that writes "ID start", 80 ticks 30ms
	// apart, then "ID end" (about 3s, longer than the lease of 1s: the work
	// of a redisync killed early in its job, running on, would meet the
	// next job).
	job := func(id string) []string {
		return []string{"sh", "-c", `(echo ` + id + ` start >> ` + log + `; i=0; while [ $i -lt 80 ]; do echo ` + id +
			` tick >> ` + log + `; i=$((i+1)); sleep 0.03; done; echo ` + id + ` end >> ` + log + `) & wait`}
	}
	procs := map[string]*proc{}
	var restarted time.Duration
	var killedID string
	start := time.Now()
	for r := range rounds {
		tick := start.Add(time.Duration(r) * period)
		time.Sleep(time.Until(tick))
		// While a job runs, just before a round's invocations: the restart
		// at the first such round from restartAt, the kill at the first
		// from killAt that finds a job in its first 20 ticks.
		if running, ticks := runningJob(log); running != "" {
			switch {
			case r >= restartAt && restarted == 0:
				began := time.Now()
				srv.Restart(t) // SIGTERM: Redis writes its AOF and exits; the same data comes back
				restarted = time.Since(began)
			case r >= killAt && killedID == "" && ticks <= 20:
				killedID = running
				_ = procs[killedID].cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		for m := range 3 {
			id := fmt.Sprintf("r%02dm%d", r, m)
			procs[id] = sh.start(t, nil, append([]string{"lock", "-redis", srv.Addr(), "-wait", "0", "-conflict-exit-code", "0",
				"-lease", "1s", "cron:report", "--"}, job(id)...)...)
		}
	}
	statuses := map[int]int{}
	for id, p := range procs {
		code := p.wait(t, time.Minute)
		statuses[code]++
		if id != killedID && code == 0 && !strings.Contains(readFile(log), id+" start") && p.stderr.Len() > 0 {
			t.Errorf("%s skipped, but said: %s", id, p.stderr.String())
		}
		if code != 0 && id != killedID {
			t.Logf("%s: exit %d: %s", id, code, p.stderr.String())
		}
	}

	// The check: one job at a time, in the log's order (appends to one
	// file are ordered).
	var (
		cur     string
		ran     []string
		done    = map[string]bool{} // its job wrote end, or its redisync ended without (killed, lost)
		started = map[string]bool{}
	)
	for i, l := range strings.Split(strings.TrimSpace(readFile(log)), "\n") {
		id, kind, _ := strings.Cut(l, " ")
		switch {
		case kind == "start" && cur != "" && !done[cur] && !ended(procs[cur], cur == killedID):
			t.Fatalf("line %d: %s started while %s had not ended", i+1, id, cur)
		case kind == "start":
			cur, started[id] = id, true
			ran = append(ran, id)
		case id != cur:
			t.Fatalf("line %d: %s wrote %q after %s had started:\n%s", i+1, id, kind, cur, readFile(log))
		case kind == "end":
			done[id] = true
		}
	}
	if restarted == 0 || killedID == "" {
		t.Fatalf("Redis restarted in %v, %q killed: a fault did not happen while a job ran", restarted, killedID)
	}
	if !started[killedID] || done[killedID] {
		t.Fatalf("the killed redisync's job %s: started %v, ended %v", killedID, started[killedID], done[killedID])
	}
	t.Logf("%d rounds of 3 every %v in %v: %d jobs ran (%v), Redis restarted in %v, %s killed with -9; exit statuses %v; worst scheduling delay %v",
		rounds, period, time.Since(start).Round(time.Millisecond), len(ran), ran, restarted.Round(time.Millisecond), killedID, statuses, lag.Worst())
	if len(ran) < 4 {
		t.Fatalf("only %d jobs ran: %v", len(ran), ran)
	}
}

// runningJob returns the ID of the job running now (its start is the
// log's last start, it has not ended, and it ticked last) and how many
// times it has ticked, or "".
func runningJob(log string) (string, int) {
	lines := strings.Split(strings.TrimSpace(readFile(log)), "\n")
	last, ticks := "", 0
	for _, l := range lines {
		switch id, kind, _ := strings.Cut(l, " "); {
		case kind == "start":
			last, ticks = id, 0
		case kind == "end" && id == last:
			last = ""
		case kind == "tick" && id == last:
			ticks++
		}
	}
	if last != "" && strings.HasSuffix(lines[len(lines)-1], " tick") {
		return last, ticks
	}
	return "", 0
}

// ended tells whether a job that wrote no end was ended by its redisync:
// killed with -9, or told its lease was lost (exit 70). Its work never
// writes again after that: the log's order checks it.
func ended(p *proc, killed bool) bool {
	<-p.done
	return killed || p.code == exitLost
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
