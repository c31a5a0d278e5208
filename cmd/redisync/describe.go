package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// How a snapshot reads: the primitive its keys make (a Mutex, FairMutex,
// RWMutex, Semaphore, Election), its holders and waiters, and their
// leases on Redis's clock.

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
