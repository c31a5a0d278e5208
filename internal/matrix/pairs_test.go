package matrix

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The matrix's factors. A cell picks one value of each.
const (
	fPrim = iota
	fOpt
	fTopo
	fFault
	nFactors
)

var factorNames = [nFactors]string{"primitive", "option", "topology", "fault"}

// The options a lock is used with.
const (
	optNone    = "none"
	optFencing = "fencing"     // WithFencing on the lock
	optAck     = "replica-ack" // WithReplicaAck(1, ...) on the Client
)

// The topologies. Cluster sharded and classic run on one cluster fixture.
const (
	topoSingle  = "single"          // a primary with one replica, behind a proxy
	topoSharded = "cluster-sharded" // 3 masters with a replica each, PubSubSharded
	topoClassic = "cluster-classic" // the same cluster, PubSubClassic
)

// The faults, injected in the middle of every cell's run.
const (
	faultFailover  = "failover"     // the lock's primary hands over to its replica (no write lost)
	faultMigrate   = "migration"    // the lock's slot moves to another master
	faultPubSub    = "pubsub-kill"  // CLIENT KILL TYPE pubsub on every node
	faultPause     = "pause"        // the lock's node stopped (SIGSTOP) past the lease
	faultRestart   = "restart"      // the lock's node restarted: its data is lost (a single node answers LOADING a while)
	faultFlush     = "script-flush" // SCRIPT FLUSH on every node
	faultDelayed   = "delayed-replies"
	faultLostReply = "lost-replies"
	// faultReshard is not among the pairwise faults: TestMatrix's
	// resharding group runs it with every primitive (see reshardCells).
	faultReshard = "resharding" // the lock's slot MIGRATING/IMPORTING a while, its keys moved one by one
)

var (
	allOptions    = []string{optNone, optFencing, optAck}
	allTopologies = []string{topoSingle, topoSharded, topoClassic}
	allFaults     = []string{faultFailover, faultMigrate, faultPubSub, faultPause, faultRestart, faultFlush, faultDelayed, faultLostReply}
)

// factorValues returns the values of every factor.
func factorValues() [nFactors][]string {
	var prims []string
	for _, p := range primitives {
		prims = append(prims, p.name)
	}
	return [nFactors][]string{prims, allOptions, allTopologies, allFaults}
}

// excluded reports why the pair (factor a = va, factor b = vb) cannot be in
// a cell, or "" when it can. Every exclusion is a combination the library
// defines no behaviour for (or refuses, which TestMatrixRefusals checks):
// no cell is skipped for any other reason.
func excluded(a int, va string, b int, vb string) string {
	if a > b {
		a, va, b, vb = b, vb, a, va
	}
	switch {
	case a == fPrim && b == fOpt && vb == optFencing && !primitiveNamed(va).fencing:
		return va + " refuses WithFencing (ErrInvalid): checked by TestMatrixRefusals"
	case a == fTopo && b == fFault && va == topoSingle && vb == faultMigrate:
		return "a single node has no slots to migrate"
	}
	return ""
}

// cell is one combination the matrix runs.
type cell [nFactors]string

func (c cell) String() string { return strings.Join(c[:], "/") }

func (c cell) prim() *primitive { return primitiveNamed(c[fPrim]) }

// valid reports whether the values assigned so far in c (unassigned ones
// are "") exclude no pair.
func (c cell) valid() bool {
	for a := range nFactors {
		for b := a + 1; b < nFactors; b++ {
			if c[a] != "" && c[b] != "" && excluded(a, c[a], b, c[b]) != "" {
				return false
			}
		}
	}
	return true
}

// pair is a value of factor a with a value of factor b (a < b).
type pair struct {
	a, b   int
	va, vb string
}

func (p pair) String() string {
	return fmt.Sprintf("%s=%s × %s=%s", factorNames[p.a], p.va, factorNames[p.b], p.vb)
}

// allPairs returns every pair of values of two different factors, in a
// fixed order, and the excluded ones apart.
func allPairs(vals [nFactors][]string) (valid, excl []pair) {
	for a := range nFactors {
		for b := a + 1; b < nFactors; b++ {
			for _, va := range vals[a] {
				for _, vb := range vals[b] {
					p := pair{a, b, va, vb}
					if excluded(a, va, b, vb) != "" {
						excl = append(excl, p)
					} else {
						valid = append(valid, p)
					}
				}
			}
		}
	}
	return valid, excl
}

// pairwise returns a small set of valid cells that together hold every
// valid pair, deterministically: each new cell starts from the first pair
// not yet covered and fills the other factors, one by one, with the value
// that covers the most pairs not yet covered (the first such value on a
// tie) among those that keep the cell valid.
func pairwise(vals [nFactors][]string) []cell {
	pairs, _ := allPairs(vals)
	covered := map[pair]bool{}
	newly := func(c cell) int {
		n := 0
		for a := range nFactors {
			for b := a + 1; b < nFactors; b++ {
				if c[a] != "" && c[b] != "" && !covered[pair{a, b, c[a], c[b]}] {
					n++
				}
			}
		}
		return n
	}
	var cells []cell
	for {
		i := slices.IndexFunc(pairs, func(p pair) bool { return !covered[p] })
		if i < 0 {
			return cells
		}
		var c cell
		c[pairs[i].a], c[pairs[i].b] = pairs[i].va, pairs[i].vb
		for f := range nFactors {
			if c[f] != "" {
				continue
			}
			best, bestN := "", -1
			for _, v := range vals[f] {
				try := c
				try[f] = v
				if !try.valid() {
					continue
				}
				// Look ahead: some value of every factor still open must fit.
				if n := newly(try); n > bestN && completable(try, vals) {
					best, bestN = v, n
				}
			}
			if best == "" {
				panic(fmt.Sprintf("matrix: no valid value of %s for %v", factorNames[f], c))
			}
			c[f] = best
		}
		for a := range nFactors {
			for b := a + 1; b < nFactors; b++ {
				covered[pair{a, b, c[a], c[b]}] = true
			}
		}
		cells = append(cells, c)
	}
}

// completable reports whether the open factors of c can be filled to a
// valid cell.
func completable(c cell, vals [nFactors][]string) bool {
	f := slices.Index(c[:], "")
	if f < 0 {
		return c.valid()
	}
	for _, v := range vals[f] {
		try := c
		try[f] = v
		if try.valid() && completable(try, vals) {
			return true
		}
	}
	return false
}

// TestMatrixCoversAllPairs checks the set the matrix runs: every cell is
// valid, every valid pair of values of two factors is in some cell, and
// each excluded pair is excluded for a stated reason (and is really
// excluded: no cell holds it).
func TestMatrixCoversAllPairs(t *testing.T) {
	vals := factorValues()
	cells := matrixCells()
	valid, excl := allPairs(vals)
	in := map[pair]int{}
	for _, c := range cells {
		if !c.valid() {
			t.Errorf("cell %v holds an excluded pair", c)
		}
		for f := range nFactors {
			if !slices.Contains(vals[f], c[f]) {
				t.Errorf("cell %v: %s %q is not a value of the factor", c, factorNames[f], c[f])
			}
		}
		for a := range nFactors {
			for b := a + 1; b < nFactors; b++ {
				in[pair{a, b, c[a], c[b]}]++
			}
		}
	}
	for _, p := range valid {
		if in[p] == 0 {
			t.Errorf("no cell covers %v", p)
		}
	}
	for _, p := range excl {
		t.Logf("excluded: %v: %s", p, excluded(p.a, p.va, p.b, p.vb))
		if in[p] > 0 {
			t.Errorf("excluded pair %v is in a cell", p)
		}
	}
	if seen := map[cell]bool{}; len(cells) > 0 {
		for _, c := range cells {
			if seen[c] {
				t.Errorf("cell %v twice", c)
			}
			seen[c] = true
		}
	}
	// The set stays small: never more than a quarter above the least
	// possible, the product of the two largest factors.
	sizes := []int{}
	for _, v := range vals {
		sizes = append(sizes, len(v))
	}
	slices.Sort(sizes)
	least := sizes[nFactors-1] * sizes[nFactors-2]
	t.Logf("%d cells cover %d pairs (%d excluded) of %v values; at least %d cells needed", len(cells), len(valid), len(excl), sizes, least)
	if len(cells) > least*5/4 {
		t.Errorf("%d cells for %d at least: the generator got worse", len(cells), least)
	}
}

// TestPairwiseGenerator checks the generator itself on factors whose
// answer is known, so that TestMatrixCoversAllPairs cannot pass on a
// broken check: a covering set of 2×2×2 values, with an exclusion.
func TestPairwiseGenerator(t *testing.T) {
	vals := [nFactors][]string{{"p1", "p2"}, {"o1", "o2"}, {"t1", "t2"}, {"f1", "f2", "f3"}}
	cells := pairwise(vals)
	valid, _ := allPairs(vals)
	in := map[pair]bool{}
	for _, c := range cells {
		for a := range nFactors {
			for b := a + 1; b < nFactors; b++ {
				in[pair{a, b, c[a], c[b]}] = true
			}
		}
	}
	for _, p := range valid {
		if !in[p] {
			t.Errorf("not covered: %v", p)
		}
	}
	if len(cells) < 6 || len(cells) > 8 {
		t.Errorf("%d cells for 2×2×2×3 values, want 6 to 8: %v", len(cells), cells)
	}
	// Deterministic: the same set every time.
	if again := pairwise(vals); !slices.Equal(cells, again) {
		t.Errorf("not deterministic: %v then %v", cells, again)
	}
	// The real set, too.
	if a, b := matrixCells(), matrixCells(); !slices.Equal(a, b) {
		t.Errorf("the matrix's cells are not deterministic")
	}
}
