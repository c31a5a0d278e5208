package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/keys"
)

// companions are the keys a name may have besides its own, as
// keys.Companion tokens with the Redis type the library gives them.
var companions = []struct{ token, typ string }{
	{"fair-queue", "zset"},    // FairMutex: waiter field -> arrival number
	{"fair-timeouts", "zset"}, // FairMutex: waiter field -> deadline (ms, Redis clock)
	{"rw-readers", "zset"},    // RWMutex: reader field -> read-lease deadline
	{"rw-writers", "zset"},    // RWMutex: waiting writer -> deadline
	{"rw-waiting", "zset"},    // RWMutex: reader waiting behind a writer -> deadline
	{"rw-admitted", "zset"},   // RWMutex: reader admitted by a write unlock -> deadline
	{"sem-holders", "hash"},   // Semaphore: owner field -> permits held
	{"sem-expiry", "zset"},    // Semaphore: owner field -> lease end
	{"fence", "string"},       // WithFencing: the last fencing token given
	{"elect-term", "string"},  // Election: the last term given
	{"latch-round", "string"}, // CountDownLatch: the round being counted
}

// inspect prints, for each name, which redisync primitive it is and its
// state as stored in Redis: owners with their hold counts and remaining
// leases, and the waiters registered in Redis. Each name is read in one
// MULTI/EXEC with Redis's clock (TIME), so a block is a consistent snapshot
// and deadlines are counted on the clock the library's scripts use.
//
// It reads the Redis that conn names (a Cluster too, given -cluster or
// the address of one of its nodes). On a Cluster, each name is read on the
// master of its slot, where its companion keys are too, and its block says
// which master that is.
func inspect(ctx context.Context, out io.Writer, conn connFlags, names []string) error {
	if len(names) == 0 {
		return usageErr("inspect: name at least one lock")
	}
	for _, name := range names {
		if name == "" {
			return usageErr("inspect: an empty name is no lock's name")
		}
	}
	rdb, err := conn.open(ctx)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	defer rdb.Close()
	cc, _ := rdb.(*redis.ClusterClient)
	for _, name := range names {
		s, err := read(ctx, rdb, name)
		if err != nil {
			if cc == nil && redis.HasErrorPrefix(err, "MOVED") {
				err = fmt.Errorf("%w (a Redis Cluster node: name its nodes with -cluster)", err)
			}
			return fmt.Errorf("inspect %q: %w", name, err)
		}
		views := s.describe()
		if cc != nil {
			where, err := masterOf(ctx, cc, name)
			if err != nil {
				return fmt.Errorf("inspect %q: %w", name, err)
			}
			views[0].lines = append(views[0].lines, where)
		}
		for i, v := range views {
			if i == 0 {
				fmt.Fprintf(out, "%s: %s\n", name, v.head)
			} else {
				fmt.Fprintf(out, "  also: %s\n", v.head)
			}
			for _, l := range v.lines {
				fmt.Fprintf(out, "  %s\n", l)
			}
		}
	}
	return nil
}

// masterOf tells which master serves name's slot.
func masterOf(ctx context.Context, cc *redis.ClusterClient, name string) (string, error) {
	node, err := cc.MasterForKey(ctx, name)
	if err != nil {
		return "", err
	}
	slot, err := node.ClusterKeySlot(ctx, name).Result()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("cluster slot %d, on master %s", slot, node.Options().Addr), nil
}

// snapshot is what Redis holds for one name at one instant.
type snapshot struct {
	now     int64                // Redis's clock (TIME), in ms
	typ     string               // TYPE of the name
	ttl     time.Duration        // PTTL of the name; negative: no expiry
	hash    map[string]string    // the name's fields, when it is a hash
	str     string               // the name's value, when it is a string
	zsets   map[string][]redis.Z // companion zsets present, by token, lowest score first
	holders map[string]string    // the sem-holders hash, when present
	fence   string               // the fencing counter (its key and value), when present
	term    string               // an election's term counter (its key and value), when present
	round   string               // a latch's round (its key and value), when present
	foreign []string             // companion keys of another type than the library's
}

// read takes a snapshot of name and of its companion keys in one
// transaction, on the node that serves name's slot when rdb is a Cluster
// client (the companions share the slot). Names the library cannot give
// companions (keys.Taggable) are read alone.
func read(ctx context.Context, rdb redis.UniversalClient, name string) (*snapshot, error) {
	var (
		now    *redis.TimeCmd
		typ    *redis.StatusCmd
		ttl    *redis.DurationCmd
		hash   *redis.MapStringStringCmd
		str    *redis.StringCmd
		ctyp   []*redis.StatusCmd
		cval   []redis.Cmder
		cnames []string
	)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		now, typ, ttl = p.Time(ctx), p.Type(ctx, name), p.PTTL(ctx, name)
		hash, str = p.HGetAll(ctx, name), p.Get(ctx, name)
		for _, c := range companions {
			if !keys.Taggable(name) {
				break // no companions: the library refuses such names
			}
			k := keys.Companion(name, c.token)
			cnames = append(cnames, k)
			ctyp = append(ctyp, p.Type(ctx, k))
			switch c.typ {
			case "hash":
				cval = append(cval, p.HGetAll(ctx, k))
			case "string":
				cval = append(cval, p.Get(ctx, k))
			default:
				cval = append(cval, p.ZRangeWithScores(ctx, k, 0, -1))
			}
		}
		return nil
	})
	// A read of a missing key (nil) or of a key of another type (WRONGTYPE)
	// fails alone and is not used: TYPE says which reads count. Any other
	// error fails them all.
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return nil, err
	}
	used := []redis.Cmder{now, typ, ttl}
	switch typ.Val() {
	case "hash":
		used = append(used, hash)
	case "string":
		used = append(used, str)
	}
	for i, c := range ctyp {
		used = append(used, c)
		if c.Val() == companions[i].typ {
			used = append(used, cval[i])
		}
	}
	for _, c := range used {
		if c.Err() != nil {
			return nil, c.Err()
		}
	}
	s := &snapshot{now: now.Val().UnixMilli(), typ: typ.Val(), ttl: ttl.Val(), zsets: map[string][]redis.Z{}}
	switch s.typ {
	case "hash":
		s.hash = hash.Val()
	case "string":
		s.str = str.Val()
	}
	for i, c := range ctyp {
		switch want := companions[i]; c.Val() {
		case "none":
		case want.typ:
			switch v := cval[i].(type) {
			case *redis.MapStringStringCmd:
				s.holders = v.Val()
			case *redis.StringCmd:
				_, err := strconv.ParseInt(v.Val(), 10, 64)
				switch {
				case want.token == "latch-round":
					s.round = fmt.Sprintf("round %s: %s", cnames[i], v.Val())
				case err != nil && want.token == "elect-term":
					s.foreign = append(s.foreign, fmt.Sprintf("%s: a string that is not a term counter", cnames[i]))
				case err != nil:
					s.foreign = append(s.foreign, fmt.Sprintf("%s: a string that is not a fencing counter", cnames[i]))
				case want.token == "elect-term":
					s.term = fmt.Sprintf("term counter %s: %s (the last term given)", cnames[i], v.Val())
				default:
					s.fence = fmt.Sprintf("fencing counter %s: %s (the last token given)", cnames[i], v.Val())
				}
			default:
				s.zsets[want.token] = v.(*redis.ZSliceCmd).Val()
			}
		default:
			s.foreign = append(s.foreign, fmt.Sprintf("%s: a %s, not a redisync key", cnames[i], c.Val()))
		}
	}
	return s, nil
}
