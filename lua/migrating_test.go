package lua

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redisync-go/redisync/internal/redistest"
)

// While a slot migrates away from its master, that master runs a script
// only when it has every key the script declares, and refuses a command of
// the script on a key it lacks ("a non local key"), after what the script
// wrote before: a script must not touch a key again after it may have
// emptied it (see the package documentation). Each case puts its keys on
// the source of a migrating slot, in a state where the script empties one,
// and runs it there: it either completes, or refuses itself with TRYAGAIN
// before writing anything (migrating.lua); off a migration it completes.
func TestScriptsOnAMigratingSlot(t *testing.T) {
	ctx := context.Background()
	rc := redistest.StartClusterWithReplicas(t, 2, 0)
	src := rc.Masters[0].Client(t)
	past := "1"
	future := fmt.Sprint(time.Now().Add(time.Hour).UnixMilli())

	type zset map[string]string // member -> score
	type hash map[string]string
	type tc struct {
		name   string
		script *Script
		keys   func(tag string) []string
		state  func() []any // one value per key: hash or zset
		args   func(tag string) []any
		want   any   // the reply when it completes
		gone   []int // keys it deletes when it completes
		refuse bool  // on the migrating source: TRYAGAIN, nothing written
		offMig func(t *testing.T, r any)
	}
	ch := func(tag, what string) string { return tag + ":chan:" + what }
	rwKeys := func(tag string) []string {
		return []string{tag + "rw", tag + ":rw-readers", tag + ":rw-writers", tag + ":rw-waiting", tag + ":rw-admitted"}
	}
	cases := []tc{
		{name: "drop, the owner's last field", script: Drop,
			keys:  func(tag string) []string { return []string{tag + "m"} },
			state: func() []any { return []any{hash{"o": "1"}} },
			args:  func(tag string) []any { return []any{"o", "spublish", "0", ch(tag, "m")} },
			want:  int64(1), gone: []int{0}},
		{name: "unlock, the last hold (its HDEL empties the hash)", script: Unlock,
			keys:  func(tag string) []string { return []string{tag + "m"} },
			state: func() []any { return []any{hash{"o": "1"}} },
			args:  func(tag string) []any { return []any{"o", 1, 30000, "spublish", "0", ch(tag, "m")} },
			want:  int64(2), gone: []int{0}},
		{name: "multi_unlock, each lock's last field", script: MultiUnlock,
			keys:  func(tag string) []string { return []string{tag + "a", tag + "b"} },
			state: func() []any { return []any{hash{"o": "1"}, hash{"o": "1"}} },
			args: func(tag string) []any {
				return []any{"o", 1, 30000, "spublish", "0", ch(tag, "a"), ch(tag, "b")}
			},
			want: int64(2), gone: []int{0, 1}},
		{name: "fair_drop, the owner's last field", script: FairDrop,
			keys:  func(tag string) []string { return []string{tag + "f", tag + ":q", tag + ":t"} },
			state: func() []any { return []any{hash{"o": "1"}, zset{"w": "1"}, zset{"w": future}} },
			args:  func(tag string) []any { return []any{"o", ch(tag, "f:"), "spublish"} },
			want:  int64(1), gone: []int{0}},
		{name: "fair_unlock, every waiter dead", script: FairUnlock,
			keys: func(tag string) []string { return []string{tag + "f", tag + ":q", tag + ":t"} },
			state: func() []any {
				return []any{hash{"o": "1"}, zset{"a": "1", "b": "2"}, zset{"a": past, "b": past}}
			},
			args: func(tag string) []any { return []any{"o", 1, 30000, ch(tag, "f:"), "spublish"} },
			want: int64(2), gone: []int{0, 1, 2}},
		{name: "rw_runlock, the last reader", script: RWRUnlock, keys: rwKeys,
			state: func() []any {
				return []any{hash{"mode": "read", "r:f": "1"}, zset{"f": future}, zset{"w": future}, zset{"x": future}, zset{"y": future}}
			},
			args: func(tag string) []any { return []any{"f", 1, 30000, "spublish", ch(tag, "r"), ch(tag, "w")} },
			want: int64(2), gone: []int{0, 1}},
		{name: "rw_leave, the last waiting writer", script: RWLeave, keys: rwKeys,
			state: func() []any {
				return []any{hash{"mode": "write", "w:o": "1"}, zset{"r": future}, zset{"w": future}, zset{"x": future}, zset{"y": future}}
			},
			args: func(tag string) []any { return []any{"w", "spublish", ch(tag, "r"), ch(tag, "w")} },
			want: int64(1), gone: []int{2}},
		{name: "rw_lock, whose purge empties the waiting writers", script: RWLock, keys: rwKeys,
			state: func() []any {
				return []any{hash{"mode": "write", "w:o": "1"}, zset{"r": future}, zset{"w": past}, zset{"x": future}, zset{"y": future}}
			},
			args:   func(tag string) []any { return []any{30000, "n", 0, 1000, "", ch(tag, "r")} },
			refuse: true,
			offMig: func(t *testing.T, r any) {
				v, ok := r.([]any)
				require.True(t, ok, "%v", r)
				assert.EqualValues(t, 0, v[0], "held: the caller waits")
			}},
		{name: "sem_acquire, whose reclaim empties the holders", script: SemAcquire,
			keys: func(tag string) []string { return []string{tag + "s", tag + ":h", tag + ":e"} },
			state: func() []any {
				return []any{hash{"permits": "2", "used": "1"}, hash{"old": "1"}, zset{"old": past}}
			},
			args:   func(tag string) []any { return []any{"new", 1, 0, 30000, "spublish", 100, 0, ch(tag, "s")} },
			refuse: true,
			offMig: func(t *testing.T, r any) {
				v, ok := r.([]any)
				require.True(t, ok, "%v", r)
				assert.EqualValues(t, []any{int64(1), int64(1), int64(1)}, v, "granted")
			}},
	}

	// tagOn returns a hash tag whose slot Masters[0] serves.
	n := 0
	tagOn := func() (string, int) {
		for {
			n++
			tag := fmt.Sprintf("{mig%d}", n)
			slot := redistest.SlotOf(t, rc.Masters[0], tag)
			if m, err := rc.Client(t).MasterForKey(ctx, tag); err == nil && m.Options().Addr == rc.Masters[0].Addr() {
				return tag, slot
			}
		}
	}
	setUp := func(t *testing.T, c tc, tag string) []string {
		keys := c.keys(tag)
		p := src.Pipeline()
		for i, v := range c.state() {
			switch v := v.(type) {
			case hash:
				for f, x := range v {
					p.HSet(ctx, keys[i], f, x)
				}
			case zset:
				for m, s := range v {
					p.Do(ctx, "zadd", keys[i], s, m)
				}
			}
			p.PExpire(ctx, keys[i], time.Hour)
		}
		_, err := p.Exec(ctx)
		require.NoError(t, err)
		return keys
	}
	dump := func(t *testing.T, keys []string) []string {
		var out []string
		for _, k := range keys {
			v, err := src.Dump(ctx, k).Result()
			if err == redis.Nil {
				v, err = "(none)", nil
			}
			require.NoError(t, err)
			out = append(out, v)
		}
		return out
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tag, slot := tagOn()
			keys := setUp(t, c, tag)
			before := dump(t, keys)
			mig := rc.BeginMigration(t, slot, rc.Masters[1])
			r, err := c.script.Run(ctx, src, keys, c.args(tag)...).Result()
			if c.refuse {
				require.Error(t, err)
				require.True(t, strings.HasPrefix(err.Error(), "TRYAGAIN"), "%v", err)
				assert.Equal(t, before, dump(t, keys), "nothing written")
			} else {
				require.NoError(t, err)
				assert.Equal(t, c.want, r)
				for _, i := range c.gone {
					n, err := src.Exists(ctx, keys[i]).Result()
					if err == nil {
						assert.Zero(t, n, keys[i])
					} else {
						assert.True(t, strings.HasPrefix(err.Error(), "ASK"), "%s gone from the source: %v", keys[i], err)
					}
				}
			}
			mig.Finish(t)
			if c.offMig != nil {
				// Off a migration (the slot moved whole), the same
				// script on the same keys completes.
				for i := range keys {
					require.NoError(t, rc.Masters[1].Client(t).Del(ctx, keys[i]).Err())
				}
				tag2, _ := tagOn()
				keys2 := setUp(t, c, tag2)
				r, err := c.script.Run(ctx, src, keys2, c.args(tag2)...).Result()
				require.NoError(t, err)
				c.offMig(t, r)
			}
		})
	}
}
