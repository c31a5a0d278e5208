package transport

import (
	"cmp"
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redisync-go/redisync/internal/keys"
)

// Switches of the primary: the one place that learns that the primary
// serving a route changed (a failover, a slot served by another master)
// and tells its listeners (internal/notify's subscription, which moves to
// the new primary; the engine's connections).
//
// go-redis's failover client moves its command connections to the new
// primary as soon as a Sentinel announces it (+switch-master), but not its
// subscription connections; and the old primary of a planned failover
// still answers as a primary until the Sentinels demote it (about 10s
// later), so nothing tells a subscription left there that unlocks are now
// published elsewhere. Reports come from two sides:
//
//   - the watcher below, which runs while someone needs switches learned
//     (WatchSwitches: the subscription while it has channels), and asks
//     each primary who it is every SwitchEvery: on a Sentinel's failover
//     client, INFO replication through the client's command connections
//     (ReplID): a new replication id there is a new primary (a promoted
//     replica takes a new one), which go-redis has already moved to; on a
//     Cluster, INFO replication on each master of the cluster client's
//     slot map, and when one of them says it is no primary, has another
//     replication id, cannot be reached, or the masters are not those of
//     the last slot map read, CLUSTER SLOTS, whose differences from the
//     last one are the switches (and the cluster client reloads its map).
//     A plain single node (a *redis.Client that is no failover client) has
//     no other primary to switch to: no watcher runs there.
//   - anything else that meets one (Switched): the engine's connections
//     when they meet READONLY or MOVED, or redial onto another server.
//
// On a Sentinel failover client the watcher also looks at go-redis's
// pool every PoolEvery, and runs a round at once when go-redis closed
// connections, as its failover client does the moment a Sentinel
// announces a new primary (failoverPool).
//
// Cost: one INFO replication per primary every SwitchEvery (4 a second)
// while switches are wanted, nothing otherwise (under Sentinel, a read of
// go-redis's pool counters every PoolEvery meanwhile); on a Cluster, one CLUSTER
// SLOTS more per round while a change is suspected (a master down, or
// one that no longer is one until the slot map says so).

// SwitchEvery is how often the watcher asks each primary who it is while
// switches are wanted.
const SwitchEvery = 250 * time.Millisecond

// SwitchMerge is how long after a switch told for some routes a report
// for the same routes that names no new primary is taken for the same
// switch (see Switched).
const SwitchMerge = time.Second

// switchRound bounds one round of the watcher's questions.
const switchRound = 2 * time.Second

// failoverAddr is the Addr of a Sentinel failover client's options
// (go-redis's FailoverOptions.clientOptions).
const failoverAddr = "FailoverClient"

// SlotRange is a range of a Cluster's hash slots, First to Last inclusive.
type SlotRange struct{ First, Last int }

// Server names a primary by what is known of it; a field is empty when
// it is not known.
type Server struct {
	// Addr is its address ("host:port"), as a Cluster's slot map names
	// its masters; a Sentinel failover client hides the address of the
	// primary it reaches, so the watcher leaves it empty there.
	Addr string
	// ReplID is its replication id (INFO replication's master_replid),
	// which a replica promoted to primary changes.
	ReplID string
}

// known reports whether s names a server at all.
func (s Server) known() bool { return s.Addr != "" || s.ReplID != "" }

// same reports whether s and o may name the same server: no field both
// know differs. (The watcher names a Sentinel's primary by replication
// id, the engine by the address it dialled: neither contradicts the
// other.)
func (s Server) same(o Server) bool {
	return (s.Addr == "" || o.Addr == "" || s.Addr == o.Addr) &&
		(s.ReplID == "" || o.ReplID == "" || s.ReplID == o.ReplID)
}

// Switch is a change of the primary serving a route (Transport.Route).
type Switch struct {
	// Slots are the Cluster hash slots (its routes) whose primary changed,
	// in order; nil: every key, route 0 (a single node, Sentinel's
	// primary).
	Slots []SlotRange
	// From is the primary that stopped serving them, To the one that
	// serves them now, each as far as known: on a Cluster by address (and
	// replication id when the watcher asked); under Sentinel by
	// replication id. To unknown: the reporter only knows From stopped
	// (READONLY).
	From, To Server
	// Cause says what told it: "replid" (a new primary behind the command
	// connections), "slots" (a Cluster's slot map), or the reporter's own
	// word ("readonly", "moved", "redial").
	Cause string
	// At is when it was learned.
	At time.Time
}

// Covers reports whether s concerns route (Transport.Route's value).
func (s Switch) Covers(route int) bool {
	if s.Slots == nil {
		return true
	}
	for _, r := range s.Slots {
		if route >= r.First && route <= r.Last {
			return true
		}
	}
	return false
}

// CoversKey reports whether s concerns key: whether it covers key's slot
// (every key when s.Slots is nil).
func (s Switch) CoversKey(key string) bool {
	return s.Slots == nil || s.Covers(keys.Slot(key))
}

// switches is a Transport's record of switches: their listeners, what was
// told, and the watcher (the zero value is ready).
type switches struct {
	mu        sync.Mutex
	listeners []listener
	nextID    int
	queue     []Switch    // to tell, in order
	telling   bool        // the teller goroutine runs
	whole     told        // the last switch told for route 0 (Slots nil)
	anyTold   atomic.Bool // some switch was told
	slots     []toldRange // on a Cluster, the last switch told for each slot, by range

	demand  int           // WatchSwitches not yet done
	wanted  bool          // demand since the watcher's last round
	running bool          // the watcher runs
	kick    chan struct{} // buffered 1: look now
	every   time.Duration // between rounds: SwitchEvery unless a test sets it
	wg      sync.WaitGroup

	// The watcher's own state, kept from one run to the next (only the
	// watcher goroutine touches it).
	replID  string            // route 0: the replication id last seen
	snap    []slotOwner       // a Cluster's slot map, as last read
	ids     map[string]string // a Cluster's masters' replication ids, by address
	logged  bool              // said why it cannot ask
	refused time.Time         // when the servers last refused to say
}

// listener is one OnSwitch registration: id tells it apart for its stop.
type listener struct {
	id int
	f  func(Switch)
}

// told is what was told of a route: to whom it switched, when.
type told struct {
	to Server
	at time.Time
}

// toldRange is told for the slots First..Last.
type toldRange struct {
	SlotRange
	told
}

// slotOwner is the master serving a range of slots.
type slotOwner struct {
	SlotRange
	addr string
}

// OnSwitch registers f to be told every switch (see Switched), in the
// order they were reported, from a goroutine of the transport's, one
// switch after the other: f must not block for long. stop unregisters it
// (a switch being told may still reach f).
func (t *Transport) OnSwitch(f func(Switch)) (stop func()) {
	sw := &t.sw
	sw.mu.Lock()
	sw.nextID++
	id := sw.nextID
	sw.listeners = append(sw.listeners, listener{id: id, f: f})
	sw.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sw.mu.Lock()
			sw.listeners = slices.DeleteFunc(sw.listeners, func(l listener) bool { return l.id == id })
			sw.mu.Unlock()
		})
	}
}

// SwitchSettle is how long after a switch is told a call may still have
// been sent to the old primary (its listeners move the connections after
// it is told).
const SwitchSettle = 100 * time.Millisecond

// SwitchedSince reports whether a switch of the primary serving key was
// told after at, less SwitchSettle: whether what a script sent at at set
// in Redis may be on the old primary only (a hold taken there in its last
// moment), so that it must be checked on the new one before it is relied
// on (a Mutex's handoff in memory is not: the handoff goes through Redis).
func (t *Transport) SwitchedSince(key string, at time.Time) bool {
	last := t.SwitchedAt(key)
	return !last.IsZero() && at.Before(last.Add(SwitchSettle))
}

// SwitchedAt returns when the last switch of the primary serving key was
// told; zero when none was.
func (t *Transport) SwitchedAt(key string) time.Time {
	if t == nil {
		return time.Time{}
	}
	sw := &t.sw
	if !sw.anyTold.Load() {
		return time.Time{} // the common case, without the lock
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	last := sw.whole.at
	if t.cc != nil {
		slot := keys.Slot(key)
		for _, r := range sw.slots { // disjoint ranges
			if slot >= r.First && slot <= r.Last {
				last = r.at
				break
			}
		}
	}
	return last
}

// Switched reports a switch; it never blocks. The listeners are told each
// switch once: a report is dropped when, for every route it covers, the
// switch told last there named a new primary that the report's does not
// contradict (no field both name differs: Server.same), or, when the
// report names none (To unknown), was told less than SwitchMerge ago. A
// report that names no new primary also has the watcher, if it runs, look
// at once. Reports after Close are dropped.
func (t *Transport) Switched(s Switch) {
	if s.At.IsZero() {
		s.At = time.Now()
	}
	sw := &t.sw
	sw.mu.Lock()
	select {
	case <-t.closed:
		sw.mu.Unlock()
		return
	default:
	}
	if !sw.news(s) {
		sw.mu.Unlock()
		return
	}
	sw.record(s)
	sw.queue = append(sw.queue, s)
	if !sw.telling {
		sw.telling = true
		sw.wg.Add(1)
		go t.tell()
	}
	sw.mu.Unlock()
	if !s.To.known() {
		sw.look()
	}
}

// tell is the teller goroutine: it tells the listeners the queued
// switches, in order, and ends when none is left (or at Close).
func (t *Transport) tell() {
	sw := &t.sw
	defer sw.wg.Done()
	for {
		sw.mu.Lock()
		closed := false
		select {
		case <-t.closed:
			closed = true
		default:
		}
		if len(sw.queue) == 0 || closed {
			sw.queue, sw.telling = nil, false
			sw.mu.Unlock()
			return
		}
		s := sw.queue[0]
		sw.queue = sw.queue[1:]
		ls := slices.Clone(sw.listeners)
		sw.mu.Unlock()
		for _, l := range ls {
			l.f(s)
		}
	}
}

// news reports whether s tells something not told yet (see Switched).
// Called with sw.mu held.
func (sw *switches) news(s Switch) bool {
	fresh := func(t told) bool {
		if t.at.IsZero() {
			return true
		}
		if s.To.known() {
			return !t.to.known() || !s.To.same(t.to)
		}
		return s.At.Sub(t.at) >= SwitchMerge
	}
	if s.Slots == nil {
		return fresh(sw.whole)
	}
	for _, r := range s.Slots {
		// Every part of r, as the told ranges cut it.
		at := r.First
		for _, tr := range sw.slots {
			if tr.Last < at || tr.First > r.Last {
				continue
			}
			if tr.First > at {
				return true // at..tr.First-1: nothing told there
			}
			if fresh(tr.told) {
				return true
			}
			at = tr.Last + 1
			if at > r.Last {
				break
			}
		}
		if at <= r.Last {
			return true
		}
	}
	return false
}

// record notes that s is told. Called with sw.mu held.
func (sw *switches) record(s Switch) {
	sw.anyTold.Store(true)
	t := told{to: s.To, at: s.At}
	if s.Slots == nil {
		sw.whole = t
		return
	}
	for _, r := range s.Slots {
		var out []toldRange
		for _, tr := range sw.slots {
			if tr.Last < r.First || tr.First > r.Last {
				out = append(out, tr)
				continue
			}
			if tr.First < r.First {
				out = append(out, toldRange{SlotRange{tr.First, r.First - 1}, tr.told})
			}
			if tr.Last > r.Last {
				out = append(out, toldRange{SlotRange{r.Last + 1, tr.Last}, tr.told})
			}
		}
		out = append(out, toldRange{r, t})
		sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
		sw.slots = out
	}
}

// watchable reports whether the topology can switch primaries under the
// transport: a Cluster, or a Sentinel failover client.
func (t *Transport) watchable() bool {
	if t.cc != nil {
		return true
	}
	c, ok := t.rdb.(*redis.Client)
	return ok && c.Options().Addr == failoverAddr
}

// WatchSwitches has the watcher learn switches until done is called: the
// watcher runs while some caller wants it (and for at most one round more),
// nothing otherwise. The subscription wants it while it has channels. On a
// plain single node it does nothing. It never blocks.
func (t *Transport) WatchSwitches() (done func()) {
	if t == nil || !t.watchable() {
		return func() {}
	}
	sw := &t.sw
	sw.mu.Lock()
	sw.demand++
	sw.wanted = true
	select {
	case <-t.closed:
	default:
		if !sw.running {
			sw.running = true
			if sw.kick == nil {
				sw.kick = make(chan struct{}, 1)
			}
			sw.wg.Add(1)
			go t.watch()
		}
	}
	sw.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			sw.mu.Lock()
			sw.demand--
			sw.mu.Unlock()
		})
	}
}

// look has the watcher, if it runs, look at once.
func (sw *switches) look() {
	sw.mu.Lock()
	k := sw.kick
	sw.mu.Unlock()
	if k != nil {
		select {
		case k <- struct{}{}:
		default:
		}
	}
}

// watch is the watcher's goroutine: a round at once, then one every
// SwitchEvery (or when kicked), until no caller has wanted switches for a
// whole round, or Close.
func (t *Transport) watch() {
	sw := &t.sw
	defer sw.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // a round ends with the transport
		select {
		case <-t.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(cmp.Or(sw.every, SwitchEvery))
	defer tick.Stop()
	pool := t.failoverPool()
	var look <-chan time.Time // nil: never ready, but under Sentinel
	if pool != nil {
		p := time.NewTicker(PoolEvery)
		defer p.Stop()
		look = p.C
	}
	for {
		t.watchRound(ctx)
		last := pool.conns()
	wait:
		for {
			select {
			case <-t.closed:
				sw.mu.Lock()
				sw.running = false
				sw.mu.Unlock()
				return
			case <-tick.C:
				break wait
			case <-sw.kick:
				break wait
			case <-look:
				if n := pool.conns(); n < last {
					break wait // go-redis closed connections: it may have moved
				} else {
					last = n
				}
			}
		}
		sw.mu.Lock()
		if sw.demand == 0 && !sw.wanted {
			sw.running = false
			sw.mu.Unlock()
			return
		}
		sw.wanted = sw.demand > 0
		sw.mu.Unlock()
	}
}

// PoolEvery is how often the watcher looks, on a Sentinel failover
// client, at how many connections go-redis's pool has (see failoverPool).
const PoolEvery = 5 * time.Millisecond

// goPool is a Sentinel failover client's connection pool, as the watcher
// looks at it; nil on any other topology.
type goPool struct{ c *redis.Client }

// failoverPool returns, on a Sentinel failover client, its pool, which
// the watcher looks at every PoolEvery: go-redis's failover client, the
// moment a Sentinel announces a new primary (+switch-master), closes
// every connection of its pool to another server, and a round run then
// reaches the new primary through a connection go-redis dials there
// (which its dial hook tells the engine, follow.go), so every Client
// follows within a few milliseconds of the announcement, not up to a
// round later, when a Client still on the old primary could take there a
// lock that another, already moved, takes on the new one. A look reads
// go-redis's counters (no network); a connection closed for another
// reason costs a round early. Closes in the middle of a round (which may
// dial) are not told apart: then the next round learns the switch.
func (t *Transport) failoverPool() *goPool {
	if c, ok := t.rdb.(*redis.Client); ok && t.cc == nil && t.dialer.sentinel {
		return &goPool{c}
	}
	return nil
}

// conns returns how many connections the pool has (0 for a nil pool).
func (p *goPool) conns() uint32 {
	if p == nil {
		return 0
	}
	return p.c.PoolStats().TotalConns
}

// watchRound asks who the primaries are, and reports what changed since
// the last round.
func (t *Transport) watchRound(ctx context.Context) {
	sw := &t.sw
	if !sw.refused.IsZero() && time.Since(sw.refused) < refusedPause {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, switchRound)
	defer cancel()
	if t.cc == nil {
		id, err := ReplID(ctx, t.rdb)
		if err != nil {
			t.cannotAsk(err)
			return
		}
		if sw.replID != "" && id != sw.replID {
			t.opt.Log.Info("redisync: the primary changed", "from", sw.replID, "to", id)
			t.Switched(Switch{From: Server{ReplID: sw.replID}, To: Server{ReplID: id}, Cause: "replid"})
		}
		sw.replID = id
		return
	}
	t.watchCluster(ctx)
}

// refusedPause is how long the watcher stays silent after the servers
// refused to say who they are (an ACL without INFO).
const refusedPause = 5 * time.Second

// cannotAsk handles a round's error: a server that refuses INFO or
// CLUSTER SLOTS (an ACL, a proxy without them, a Sentinel-routed cluster
// client whose servers are no Cluster) is logged once and asked again
// only after refusedPause; any other error (the primary down, the switch
// under way) passes.
func (t *Transport) cannotAsk(err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, "NOPERM") && !strings.HasPrefix(msg, "ERR unknown command") &&
		!strings.HasPrefix(msg, "ERR This instance has cluster support disabled") {
		return
	}
	sw := &t.sw
	sw.refused = time.Now()
	if !sw.logged {
		sw.logged = true
		t.opt.Log.Warn("redisync: the server refuses to say who it is (INFO replication, CLUSTER SLOTS), so this Client learns a failover only when its subscription is dropped (waiters may wait up to a lease meanwhile); allow those commands to its user",
			"error", err)
	}
}

// watchCluster is watchRound on a Cluster: INFO replication on every
// master of the cluster client's slot map, and CLUSTER SLOTS when one
// tells of a change (see the file's comment).
func (t *Transport) watchCluster(ctx context.Context) {
	sw := &t.sw
	if sw.ids == nil {
		sw.ids = map[string]string{}
	}
	type master struct {
		addr, id string
		err      error
	}
	var mu sync.Mutex
	var ms []master
	err := t.cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		id, err := ReplID(ctx, node)
		mu.Lock()
		ms = append(ms, master{addr: node.Options().Addr, id: id, err: err})
		mu.Unlock()
		return nil
	})
	suspect := err != nil || sw.snap == nil
	listed := map[string]bool{}
	for _, o := range sw.snap {
		listed[o.addr] = true
	}
	seen := map[string]bool{}
	for _, m := range ms {
		seen[m.addr] = true
		switch {
		case m.err != nil:
			suspect = true
			t.cannotAsk(m.err)
		case sw.ids[m.addr] != "" && sw.ids[m.addr] != m.id:
			suspect = true
		case !listed[m.addr]:
			suspect = true
		}
		if m.err == nil {
			sw.ids[m.addr] = m.id
		}
	}
	for addr := range listed {
		if !seen[addr] {
			suspect = true
		}
	}
	if !suspect {
		return
	}
	ranges, err := t.cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.cannotAsk(err)
		return
	}
	snap := owners(ranges)
	if sw.snap != nil {
		ss := diffOwners(sw.snap, snap)
		for i := range ss {
			ss[i].From.ReplID, ss[i].To.ReplID = sw.ids[ss[i].From.Addr], sw.ids[ss[i].To.Addr]
			t.opt.Log.Info("redisync: slots changed primary", "from", ss[i].From.Addr, "to", ss[i].To.Addr, "ranges", len(ss[i].Slots))
			t.Switched(ss[i])
		}
		if len(ss) > 0 {
			t.cc.ReloadState(ctx) // so that the client's router learns too
		}
	}
	sw.snap = snap
	for addr := range sw.ids { // forget masters that are gone
		if !slices.ContainsFunc(snap, func(o slotOwner) bool { return o.addr == addr }) {
			delete(sw.ids, addr)
		}
	}
}

// owners returns the master of each range of CLUSTER SLOTS's answer, in
// slot order.
func owners(ranges []redis.ClusterSlot) []slotOwner {
	out := make([]slotOwner, 0, len(ranges))
	for _, r := range ranges {
		if len(r.Nodes) == 0 {
			continue
		}
		out = append(out, slotOwner{SlotRange{int(r.Start), int(r.End)}, r.Nodes[0].Addr})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out
}

// diffOwners returns the switches from old to now: for each pair of
// masters, the slots that the first served in old and the second serves
// now. Slots nobody serves now are left out (not a switch yet).
func diffOwners(old, now []slotOwner) []Switch {
	ownerAt := func(os []slotOwner, slot int) (addr string, last int) {
		i := sort.Search(len(os), func(i int) bool { return os[i].Last >= slot })
		if i < len(os) && os[i].First <= slot {
			return os[i].addr, os[i].Last
		}
		if i < len(os) {
			return "", os[i].First - 1
		}
		return "", 16383
	}
	type pair struct{ from, to string }
	var order []pair
	by := map[pair][]SlotRange{}
	for slot := 0; slot < 16384; {
		from, l1 := ownerAt(old, slot)
		to, l2 := ownerAt(now, slot)
		last := min(l1, l2)
		if from != to && to != "" {
			p := pair{from, to}
			rs := by[p]
			if n := len(rs); n > 0 && rs[n-1].Last == slot-1 {
				rs[n-1].Last = last
			} else {
				if rs == nil {
					order = append(order, p)
				}
				rs = append(rs, SlotRange{slot, last})
			}
			by[p] = rs
		}
		slot = last + 1
	}
	out := make([]Switch, 0, len(order))
	for _, p := range order {
		out = append(out, Switch{Slots: by[p], From: Server{Addr: p.from}, To: Server{Addr: p.to}, Cause: "slots"})
	}
	return out
}

// waitSwitches waits, until deadline at most, for the watcher and the
// teller to end (they end at Close).
func (t *Transport) waitSwitches(deadline time.Time) {
	done := make(chan struct{})
	go func() {
		t.sw.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
	}
}
