package main

import (
	"fmt"
	"io"
)

// usageText is what "redisync help" prints; the README's "From the shell"
// shows the same examples.
const usageText = `usage:
  redisync lock      [conn] [-wait D] [-lease D] [-grace D] [-fence] [-conflict-exit-code N] [-v] NAME -- CMD [ARGS...]
      run CMD while this process holds the lock NAME (a redisync.Mutex)
  redisync semaphore [conn] -permits N [-n K] [-wait D] [-lease D] [-grace D] [-conflict-exit-code N] [-v] NAME -- CMD [ARGS...]
      run CMD while it holds K (default 1) of the N permits of the semaphore NAME
  redisync semaphore [conn] -permits N -set NAME
      change the semaphore's total to N, with no command (permits held stay held)
  redisync elect     [conn] [-value V] [-wait D] [-lease D] [-grace D] [-conflict-exit-code N] [-v] NAME -- CMD [ARGS...]
      run CMD while it leads the election NAME (-value: default "host pid N")
  redisync inspect   [conn] NAME...
      tell what each name is (lock, fair lock, rw lock, semaphore, election, latch) and its
      state: holders, hold counts, leases and waiters; on a Redis Cluster, on which master
  redisync version
      the version redisync was built from, as Go's build information has it
  redisync demo [-redis host:port] [-servers N] [-budget CENTS]
      the red-packet scenario: N servers hand out one budget, without a lock and with redisync.Mutex

conn: -url URL (default $REDIS_URL: redis://[user:password@]host:port[/db], rediss:// for TLS)
      | -redis host:port (default 127.0.0.1:6379; a Cluster node is detected)
      | -cluster host:port,... | -sentinel MASTER@host:port,...
-wait D   wait at most D to acquire (0: try once); default: for ever
-lease D  the hold's lease (15s), renewed every third of it while redisync runs
-grace D  when the hold is lost, how long CMD has between SIGTERM and SIGKILL (10s)
-conflict-exit-code N  the status when not acquired (75); with 0, a skipped run says nothing
-v        say when the hold is acquired and released, and when a run is skipped
-permits N sets a semaphore never set to N, and refuses one set to another total (-set changes it).
CMD has REDISYNC_NAME and REDISYNC_TOKEN (the fencing token with -fence; the term with elect) in
its environment; SIGINT, SIGTERM and SIGHUP to redisync are passed on to it.

CMD and every process it starts, on Linux and the other Unix systems (macOS, the BSDs):
  CMD runs in a process group of its own, under a small supervising redisync process, and
  every process of that group ends when redisync ends or loses the hold: if redisync is killed,
  even with kill -9, the supervisor kills the group (SIGKILL) at once; if the hold is lost, the
  group gets SIGTERM, then SIGKILL after -grace; when CMD exits, what it left running in its
  group gets the same before the lock is released. A process that leaves the group (setsid, a
  daemon) escapes all of this.
  From an interactive shell CMD has the terminal: it can read it, and ^C and ^Z reach it. ^Z
  stops CMD and redisync together, and the lease is not renewed meanwhile: on fg or bg,
  redisync asks Redis whether it still holds the lock before CMD runs again, and if not it
  kills CMD's stopped group (SIGKILL) and exits 70.
Elsewhere (Windows): signals and the end of a lost hold reach CMD itself, not what it started,
and if redisync is killed CMD runs on; Redis frees the lock when the lease ends.
A Redis restarted without persistence (or a failover that lost the lock) forgets it: two holders
can run at once until the first one's next renewal tells it. Where that matters, use -fence and
have the resource refuse a REDISYNC_TOKEN lower than one it has seen.
exit: CMD's status (128+N for signal N); 75 not acquired (-conflict-exit-code); 70 the hold was
      lost while CMD ran; 64 bad usage; 126, 127 CMD cannot run, not found; 1 other errors

examples:
  # crontab of every machine: the nightly report runs on one of them, the others skip it quietly
  REDIS_URL=redis://redis.internal:6379
  0 3 * * * redisync lock -wait 0 -conflict-exit-code 0 report:nightly -- /usr/local/bin/report
  # every replica migrates on start, one at a time: the first applies it, the others find it done
  redisync lock -url "$REDIS_URL" migrate:orders -- ./migrate -path db/migrations up
  # at most 4 backups at a time, across all machines; later, allow 6
  redisync semaphore -permits 4 backups -- ./backup.sh
  redisync semaphore -permits 6 -set backups
A lock excludes overlaps, not repeats: make a cron job idempotent if a late clock could start it
after another machine finished it.`

func usage(w io.Writer) { fmt.Fprintln(w, usageText) }
