package redisync_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// With WithReplicaAck, an acquisition that its replicas did not acknowledge
// is undone and fails with ErrNotReplicated. An embedded Redis has no
// replica, so nothing can be acknowledged here.
func ExampleWithReplicaAck() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := redisync.New(rdb, redisync.WithReplicaAck(1, 100*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	m := c.Mutex("orders:42")
	_, err = m.Lock(context.Background())
	fmt.Println("not replicated:", errors.Is(err, redisync.ErrNotReplicated))
	locked, _ := m.IsLocked(context.Background())
	fmt.Println("left locked:", locked)
	// Output:
	// not replicated: true
	// left locked: false
}

// On a Sentinel deployment, wait for one replica after every acquisition:
// a failover to that replica keeps the lock with its holder.
func ExampleWithReplicaAck_sentinel() {
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    "mymaster",
		SentinelAddrs: []string{"127.0.0.1:26379"},
	})
	defer rdb.Close()
	// WAIT's timeout must stay below the client's ReadTimeout (3s by default).
	c, err := redisync.New(rdb, redisync.WithReplicaAck(1, 500*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	m := c.Mutex("orders:42")
	lctx, err := m.Lock(context.Background())
	if errors.Is(err, redisync.ErrNotReplicated) {
		fmt.Println("the replica did not acknowledge in time; nothing is held")
		return
	}
	if err != nil {
		fmt.Println("lock:", err)
		return
	}
	defer m.Unlock(lctx)
	// ... work under the lock, using lctx.
}
