package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a redis-server in Sentinel mode watching one master.
type Sentinel struct {
	*Server
	// MasterName is the name the master is monitored under.
	MasterName string
}

// StartSentinel starts a Sentinel that monitors master under name with a
// quorum of 1, declares it down after 1s without answers and fails over to a
// replica, and waits until it knows the master's replicas. It is stopped when
// tb's test ends.
func StartSentinel(tb testing.TB, master *Server, name string, replicas int) *Sentinel {
	tb.Helper()
	s := &Server{bin: findRedis(tb), dir: tb.TempDir()}
	s.conf = filepath.Join(s.dir, "sentinel.conf")
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 10000\n", name, master.Port(), name, name)
	if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
		tb.Fatalf("redistest: write sentinel config: %v", err)
	}
	var err error
	for range startAttempts {
		s.port = freePort(tb)
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("redistest: start sentinel: %v", err)
	}
	tb.Cleanup(s.Stop)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	waitFor(tb, "sentinel to see the replicas", func(ctx context.Context) (bool, error) {
		rs, err := sc.Replicas(ctx, name).Result()
		return len(rs) >= replicas, err
	})
	return &Sentinel{Server: s, MasterName: name}
}

// Failover runs a planned failover (SENTINEL FAILOVER, asked again while
// the Sentinel answers NOGOODSLAVE: it has not yet seen a replica answer
// its INFO) and returns when the Sentinel announces the new primary
// (+switch-master), with that moment and the new primary's address. The
// old primary still answers as one until the Sentinel demotes it, about
// 10s later (its INFO period).
func (s *Sentinel) Failover(tb testing.TB) (switched time.Time, addr string) {
	tb.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr()})
	defer sc.Close()
	sub := sc.Subscribe(ctx, "+switch-master")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		tb.Fatalf("redistest: subscribe to +switch-master: %v", err)
	}
	waitFor(tb, "the Sentinel to accept SENTINEL FAILOVER", func(ctx context.Context) (bool, error) {
		err := sc.Failover(ctx, s.MasterName).Err()
		if err != nil && strings.HasPrefix(err.Error(), "NOGOODSLAVE") {
			return false, nil
		}
		return err == nil, err
	})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	if err != nil {
		tb.Fatalf("redistest: no +switch-master: %v", err)
	}
	switched = time.Now()
	// "<name> <old ip> <old port> <new ip> <new port>"
	f := strings.Fields(msg.Payload)
	if len(f) != 5 {
		tb.Fatalf("redistest: +switch-master %q", msg.Payload)
	}
	return switched, net.JoinHostPort(f[3], f[4])
}
