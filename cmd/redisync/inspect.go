package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
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
// It reads the server at addr, or the Redis Cluster whose nodes (some of
// them) are cluster; addr is read as a Cluster too when it is a Cluster
// node. On a Cluster, each name is read on the master of its slot, where its
// companion keys are too, and its block says which master that is.
func inspect(ctx context.Context, out io.Writer, addr string, cluster []string, names []string) error {
	if len(names) == 0 {
		return fmt.Errorf("inspect: name at least one lock")
	}
	for _, name := range names {
		if name == "" {
			return fmt.Errorf("inspect: an empty name is no lock's name")
		}
	}
	rdb, err := connect(ctx, addr, cluster)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	defer rdb.Close()
	cc, _ := rdb.(*redis.ClusterClient)
	for _, name := range names {
		s, err := read(ctx, rdb, name)
		if err != nil {
			if cc == nil && redis.HasErrorPrefix(err, "MOVED") {
				err = fmt.Errorf("%w (%s is a Redis Cluster node: name its nodes with -cluster)", err, addr)
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

// connect returns a Cluster client when cluster names nodes, or when the
// server at addr says it is a Cluster node (INFO cluster: cluster_enabled:1);
// a client of the server at addr otherwise, also when that server refuses
// INFO.
func connect(ctx context.Context, addr string, cluster []string) (redis.UniversalClient, error) {
	if len(cluster) > 0 {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster}), nil
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	info, err := c.Info(ctx, "cluster").Result()
	var refused redis.Error
	switch {
	case err == nil && strings.Contains(info, "cluster_enabled:1"):
		_ = c.Close()
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}}), nil
	case err == nil, errors.As(err, &refused):
		return c, nil
	default:
		_ = c.Close()
		return nil, err
	}
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

// view is one primitive found at a name: a head line and detail lines.
type view struct {
	head  string
	lines []string
}

// describe tells what the name is from its own key, then adds a view for
// every other primitive whose companion keys are present (a free FairMutex
// with waiters, a semaphore whose main key was deleted, leftovers).
func (s *snapshot) describe() []view {
	fair := s.has("fair-queue", "fair-timeouts")
	rw := s.has("rw-readers", "rw-writers", "rw-waiting", "rw-admitted")
	sem := s.holders != nil || s.has("sem-expiry")
	var views []view
	switch s.typ {
	case "none":
	case "hash":
		_, mode := s.hash["mode"]
		_, permits := s.hash["permits"]
		_, used := s.hash["used"]
		switch {
		case electionShaped(s.hash):
			views = append(views, s.election(s.hash))
		case mode:
			views, rw = append(views, s.rw(s.hash)), false
		case permits || used:
			views, sem = append(views, s.sem(s.hash)), false
		case lockShaped(s.hash):
			views, fair = append(views, s.lock(s.hash, fair)), false
		default:
			views = append(views, view{head: "a hash, not a redisync primitive"})
		}
	case "string":
		if n, err := strconv.ParseInt(s.str, 10, 64); err != nil {
			views = append(views, view{head: "a string, not a redisync primitive"})
		} else if n > 0 {
			views = append(views, view{head: fmt.Sprintf("latch, counting, %d left", n)})
		} else {
			views = append(views, view{head: fmt.Sprintf("latch, open (count %d)", n)})
		}
	default:
		views = append(views, view{head: fmt.Sprintf("a %s, not a redisync primitive", s.typ)})
	}
	if s.round != "" && s.typ != "string" {
		views = append(views, view{head: "latch, open (its round key was left behind)"})
	}
	if s.round != "" {
		views[0].lines = append(views[0].lines, s.round)
	}
	if fair {
		views = append(views, s.lock(nil, true))
	}
	if rw {
		views = append(views, s.rw(nil))
	}
	if sem {
		views = append(views, s.sem(nil))
	}
	switch {
	case len(views) == 0 && s.term != "":
		views = append(views, view{head: "election, nobody leads (its term counter stays)"})
	case len(views) == 0 && len(s.foreign) == 0 && s.fence == "":
		return []view{{head: "free (no keys)"}}
	case len(views) == 0 && s.fence != "":
		views = append(views, view{head: "free (a fenced lock: its fencing counter stays)"})
	case len(views) == 0:
		views = append(views, view{head: "free (no redisync keys)"})
	}
	if s.fence != "" {
		views[0].lines = append(views[0].lines, s.fence)
	}
	if s.term != "" {
		views[0].lines = append(views[0].lines, s.term)
	}
	views[0].lines = append(views[0].lines, s.foreign...)
	return views
}

// has reports whether any of the companion zsets named by tokens is present.
func (s *snapshot) has(tokens ...string) bool {
	for _, t := range tokens {
		if _, ok := s.zsets[t]; ok {
			return true
		}
	}
	return false
}

// lock describes a Mutex or FairMutex: hash is the lock's hash (nil when
// the name holds none), fair whether it is known to be a FairMutex.
func (s *snapshot) lock(hash map[string]string, fair bool) view {
	v := view{head: "lock (Mutex or FairMutex), "}
	if fair {
		v.head = "fair lock, "
	}
	if hash != nil {
		v.head += "held, " + s.lease()
	} else {
		v.head += "free"
	}
	for _, f := range slices.Sorted(maps.Keys(hash)) {
		v.lines = append(v.lines, line("holder", f, "holds "+hash[f]))
	}
	deadlines := scores(s.zsets["fair-timeouts"])
	live, dead := 0, 0
	for i, z := range s.zsets["fair-queue"] {
		f := z.Member.(string)
		detail := "no deadline"
		if d, ok := deadlines[f]; ok {
			detail = "deadline " + s.until(d)
			if s.alive(d) {
				live++
			} else {
				dead++
				detail += " (expired, not live)"
			}
			delete(deadlines, f)
		} else {
			live++
		}
		v.lines = append(v.lines, line(fmt.Sprintf("waiter %d:", i+1), f, detail))
	}
	for _, z := range s.zsets["fair-timeouts"] {
		if _, stray := deadlines[z.Member.(string)]; stray {
			v.lines = append(v.lines, line("deadline without a place in the queue:", z.Member.(string), "deadline "+s.until(z.Score)))
		}
	}
	if fair {
		v.head += fmt.Sprintf("; %d waiting", live)
		if dead > 0 {
			v.head += fmt.Sprintf(" (and %d expired)", dead)
		}
	}
	return v
}

// rw describes an RWMutex: hash is its hash (nil when the name holds none).
// Read holds and waiters whose deadline has passed are shown but not
// counted: the scripts purge them at the next change.
func (s *snapshot) rw(hash map[string]string) view {
	leases := scores(s.zsets["rw-readers"])
	var v view
	readers := 0
	for _, k := range slices.Sorted(maps.Keys(hash)) {
		switch {
		case strings.HasPrefix(k, "w:"):
			v.lines = append(v.lines, line("writer", k[2:], "holds "+hash[k]))
		case strings.HasPrefix(k, "r:"):
			f := k[2:]
			detail := "holds " + hash[k] + ", no read lease"
			if d, ok := leases[f]; ok {
				detail = "holds " + hash[k] + ", lease " + s.left(d)
				if s.alive(d) {
					readers++
				} else {
					detail += " (expired, not live)"
				}
				delete(leases, f)
			}
			v.lines = append(v.lines, line("reader", f, detail))
		}
	}
	for _, f := range slices.Sorted(maps.Keys(leases)) {
		v.lines = append(v.lines, line("read lease without a hold:", f, "lease "+s.left(leases[f])))
	}
	switch mode := hash["mode"]; {
	case hash == nil:
		v.head = "rw lock, free"
	case mode == "write":
		v.head = "rw lock, write-locked, " + s.lease()
	case mode == "read" && readers > 0:
		v.head = fmt.Sprintf("rw lock, read-locked by %s", plural(readers, "reader"))
	case mode == "read":
		v.head = "rw lock, free (its read holds expired, not yet purged)"
	default:
		v.head = fmt.Sprintf("rw lock, unknown mode %q", mode)
	}
	for _, w := range []struct{ token, label, what string }{
		{"rw-writers", "writer waiting", "writer waiting"},
		{"rw-waiting", "reader waiting", "reader waiting"},
		{"rw-admitted", "reader admitted", "reader admitted"}, // by a write unlock: before the next writer
	} {
		live := 0
		for _, z := range s.zsets[w.token] {
			detail := "deadline " + s.until(z.Score)
			if s.alive(z.Score) {
				live++
			} else {
				detail += " (expired, not live)"
			}
			v.lines = append(v.lines, line(w.label, z.Member.(string), detail))
		}
		if live > 0 {
			v.head += "; " + plural(live, w.what)
		}
	}
	return v
}

// sem describes a Semaphore: hash is its main hash (nil when the name holds
// none). Holders whose lease has ended are shown but not counted: the
// scripts reclaim their permits at the next call.
func (s *snapshot) sem(hash map[string]string) view {
	leases := scores(s.zsets["sem-expiry"])
	all := maps.Clone(leases)
	for f := range s.holders {
		all[f] = 0
	}
	fields := slices.Sorted(maps.Keys(all))
	var v view
	used, dead, deadPermits := 0, 0, 0
	for _, f := range fields {
		n, held := s.holders[f]
		permits, _ := strconv.Atoi(n)
		d, leased := leases[f]
		switch {
		case !held:
			v.lines = append(v.lines, line("lease without permits:", f, "lease "+s.left(d)))
		case !leased:
			used += permits
			v.lines = append(v.lines, line("holder", f, "holds "+n+", no lease"))
		case s.alive(d):
			used += permits
			v.lines = append(v.lines, line("holder", f, "holds "+n+", lease "+s.left(d)))
		default:
			dead, deadPermits = dead+1, deadPermits+permits
			v.lines = append(v.lines, line("holder", f, "holds "+n+", lease "+s.left(d)+" (expired, not live)"))
		}
	}
	if total, ok := hash["permits"]; ok {
		t, _ := strconv.Atoi(total)
		v.head = fmt.Sprintf("semaphore, %d of %s available (%d held)", max(t-used, 0), plural(t, "permit"), used)
	} else {
		v.head = fmt.Sprintf("semaphore, permits not set (%d held)", used)
	}
	if dead > 0 {
		v.head += fmt.Sprintf("; %s with %s expired, not yet reclaimed", plural(dead, "holder"), plural(deadPermits, "permit"))
	}
	return v
}

// lockShaped reports whether every field of hash is an owner field
// "<client uuid>:<n>", as in a Mutex's or FairMutex's hash.
func lockShaped(hash map[string]string) bool {
	for f := range hash {
		if _, _, ok := splitField(f); !ok {
			return false
		}
	}
	return len(hash) > 0
}

// electionShaped reports whether hash is an Election's: its leader's
// owner field, value and term.
func electionShaped(hash map[string]string) bool {
	_, owner := hash["owner"]
	_, term := hash["term"]
	_, value := hash["value"]
	return len(hash) == 3 && owner && term && value
}

// election describes an Election that someone leads.
func (s *snapshot) election(hash map[string]string) view {
	return view{
		head:  fmt.Sprintf("election, led by %q (term %s), %s", hash["value"], hash["term"], s.lease()),
		lines: []string{line("leader", hash["owner"], "value "+strconv.Quote(hash["value"])+", term "+hash["term"])},
	}
}

// splitField splits an owner field "<client uuid>:<n>" into the client's
// ID (redisync's Client.ID, or a Redisson client id) and the owner number.
func splitField(f string) (client, owner string, ok bool) {
	i := strings.LastIndexByte(f, ':')
	if i != 36 || i+1 == len(f) {
		return "", "", false
	}
	client, owner = f[:i], f[i+1:]
	for j, r := range client {
		if j == 8 || j == 13 || j == 18 || j == 23 {
			if r != '-' {
				return "", "", false
			}
		} else if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return "", "", false
		}
	}
	for _, r := range owner {
		if r < '0' || r > '9' {
			return "", "", false
		}
	}
	return client, owner, true
}

// line formats one owner or waiter: its label, its field, details, and the
// field's client and owner parts when it has them.
func line(label, field, detail string) string {
	l := label + " " + field + "  " + detail
	if client, owner, ok := splitField(field); ok {
		l += fmt.Sprintf("  (client %s, owner %s)", client, owner)
	}
	return l
}

// lease tells the remaining lease of the name's own key.
func (s *snapshot) lease() string {
	if s.ttl < 0 {
		return "no expiry"
	}
	return fmt.Sprintf("lease %s left", secs(s.ttl.Milliseconds()))
}

// alive reports whether a deadline on Redis's clock is still ahead.
func (s *snapshot) alive(deadline float64) bool { return int64(deadline) > s.now }

// left tells how long until a lease deadline on Redis's clock.
func (s *snapshot) left(deadline float64) string {
	d := int64(deadline) - s.now
	if d <= 0 {
		return "ended " + secs(-d) + " ago"
	}
	return secs(d) + " left"
}

// until tells how long until a waiter's deadline on Redis's clock.
func (s *snapshot) until(deadline float64) string {
	d := int64(deadline) - s.now
	if d <= 0 {
		return "passed " + secs(-d) + " ago"
	}
	return "in " + secs(d)
}

func secs(ms int64) string { return fmt.Sprintf("%.1fs", float64(ms)/1000) }

// scores maps a zset's members to their scores.
func scores(zs []redis.Z) map[string]float64 {
	m := make(map[string]float64, len(zs))
	for _, z := range zs {
		m[z.Member.(string)] = z.Score
	}
	return m
}

// plural returns "1 reader", "2 readers", "1 writer waiting", "2 writers
// waiting": the s goes on the first word.
func plural(n int, what string) string {
	if n != 1 {
		first, rest, _ := strings.Cut(what, " ")
		what = strings.TrimSpace(first + "s " + rest)
	}
	return fmt.Sprintf("%d %s", n, what)
}
