package main

import (
	"fmt"
	"io"
)

// usageText is what "redisync help" prints; the README's "From the shell"
// shows the same examples.
const usageText = `usage:
  redisync lock      [conn] [-wait D] [-lease D] [-grace D] [-fence] [-conflict-exit-code N] NAME -- CMD [ARGS...]
      run CMD while this process holds the lock NAME (a redisync.Mutex)
  redisync semaphore [conn] -permits N [-n K] [-wait D] [-lease D] [-grace D] NAME -- CMD [ARGS...]
      run CMD while it holds K (default 1) of the N permits of the semaphore NAME
  redisync elect     [conn] [-value V] [-wait D] [-lease D] [-grace D] NAME -- CMD [ARGS...]
      run CMD while it leads the election NAME (-value: default "host pid N")
  redisync inspect   [conn] NAME...
      tell what each name is (lock, fair lock, rw lock, semaphore, election, latch) and its
      state: holders, hold counts, leases and waiters; on a Redis Cluster, on which master
  redisync demo [-redis host:port] [-servers N] [-budget CENTS]
      the red-packet scenario: N servers hand out one budget, without a lock and with redisync.Mutex

conn: -url URL (default $REDIS_URL: redis://[user:password@]host:port[/db], rediss:// for TLS)
      | -redis host:port (default 127.0.0.1:6379; a Cluster node is detected)
      | -cluster host:port,... | -sentinel MASTER@host:port,...
-wait D   wait at most D to acquire (0: try once); default: for ever
-lease D  the hold's lease (15s), renewed while redisync runs; when it is lost, CMD's process
          group gets SIGTERM, and SIGKILL after -grace D (10s)
CMD runs in its own process group with REDISYNC_NAME and REDISYNC_TOKEN (the fencing token
with -fence; the term with elect) in its environment. SIGINT, SIGTERM and SIGHUP are passed
on to it; if redisync is killed, so is CMD (on Linux), and Redis frees the hold at its lease.
-permits N sets a semaphore never set to N, and refuses one set to another total.
exit: CMD's status (128+N for signal N); 75 not acquired (-conflict-exit-code); 70 the lease
      was lost while CMD ran; 64 bad usage; 126, 127 CMD cannot run, not found; 1 other errors

examples:
  # crontab of every machine: the nightly report runs on one of them, the others skip it
  REDIS_URL=redis://redis.internal:6379
  0 3 * * * redisync lock -wait 0 -conflict-exit-code 0 report:nightly -- /usr/local/bin/report
  # every replica migrates on start, one at a time: the first applies it, the others find it done
  redisync lock -url "$REDIS_URL" migrate:orders -- ./migrate -path db/migrations up
  # at most 4 backups at a time, across all machines
  redisync semaphore -permits 4 backups -- ./backup.sh
A lock excludes overlaps, not repeats: make a cron job idempotent if a late clock could start it
after another machine finished it.`

func usage(w io.Writer) { fmt.Fprintln(w, usageText) }
