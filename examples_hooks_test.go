package redisync_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync"
)

// scriptCounter is a go-redis hook that counts the commands it sees, by
// name.
type scriptCounter struct {
	mu     sync.Mutex
	byName map[string]int
}

func (s *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.byName[cmd.Name()]++
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// redisync sends its scripts on connections of its own: a hook added to
// the go-redis client does not see them; one given to WithHooks does, one
// command per call (EVALSHA, or EVAL when Redis lacks the script).
func ExampleWithHooks() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	onClient := &scriptCounter{byName: map[string]int{}}
	rdb.AddHook(onClient)
	onScripts := &scriptCounter{byName: map[string]int{}}
	c, err := redisync.New(rdb, redisync.WithHooks(onScripts))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	m := c.Mutex("orders:42")
	lctx, err := m.Lock(context.Background())
	if err != nil {
		panic(err)
	}
	if err := m.Unlock(lctx); err != nil {
		panic(err)
	}
	fmt.Println("on the go-redis client:", onClient.byName["evalsha"]+onClient.byName["eval"])
	fmt.Println("through WithHooks:", onScripts.byName["evalsha"]+onScripts.byName["eval"])
	// Output:
	// on the go-redis client: 0
	// through WithHooks: 4
}
