package matrix

import (
	"slices"
	"testing"

	"github.com/redisync-go/redisync/internal/keys"
)

// matrixCells is the set of cells TestMatrix runs: a pairwise covering set
// of primitive × option × topology × fault (TestMatrixCoversAllPairs).
func matrixCells() []cell { return pairwise(factorValues()) }

// The groups of cells that share a fixture, and how to start it. The
// groups run in parallel; the cells of a group one after the other, or,
// with shared set in its opts, all at once (each on a lock of its own
// slot).
var groups = []struct {
	name  string
	topos []string      // the pairwise cells of these topologies
	cells func() []cell // or these cells
	start func(t *testing.T) fixture
	opts  cellOpts
}{
	{name: "node", topos: []string{topoSingle}, start: func(t *testing.T) fixture { return startNode(t) }},
	{name: "cluster", topos: []string{topoSharded, topoClassic}, start: func(t *testing.T) fixture { return startCluster(t) }},
	{name: "resharding", cells: reshardCells, start: func(t *testing.T) fixture { return startCluster(t) },
		opts: cellOpts{shared: true, strict: true, reenter: true}},
}

// reshardCells is the resharding group's cells (issue 24): every primitive
// with each option it takes, WithReplicaAck included, the pub/sub modes
// taking turns, while its lock's slot is resharded (faultReshard). Holders
// re-enter their holds, and nothing may be lost or fail: the slot
// MIGRATING/IMPORTING, keys split between two masters (ASK, TRYAGAIN), is
// a normal state.
func reshardCells() []cell {
	topos := []string{topoSharded, topoClassic}
	var cells []cell
	for _, p := range primitives {
		for _, opt := range allOptions {
			if excluded(fPrim, p.name, fOpt, opt) == "" {
				cells = append(cells, cell{p.name, opt, topos[len(cells)%2], faultReshard})
			}
		}
	}
	return cells
}

// TestMatrix runs every cell of the matrix: for each, contenders on three
// Clients hammer one lock of the cell's primitive, with its option, on its
// topology, while its fault hits the lock's node, and the cell checks the
// promises (see the package documentation). A cell that fails is named
// TestMatrix/<group>/<primitive>/<option>/<topology>/<fault>; run it alone
// with -run and that name.
func TestMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the combination matrix is skipped in -short mode")
	}
	cells := matrixCells()
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			var run []cell
			if g.cells != nil {
				run = g.cells()
			}
			for _, c := range cells {
				if slices.Contains(g.topos, c[fTopo]) {
					run = append(run, c)
				}
			}
			fx := g.start(t) // the group's: it outlives each cell
			if g.opts.shared {
				distinctSlots(t, run)
				fx.ready(t)
			}
			for _, c := range run {
				t.Run(c.String(), func(t *testing.T) {
					if g.opts.shared {
						t.Parallel()
					}
					cellSlots <- struct{}{}
					defer func() { <-cellSlots }()
					runCellWith(t, fx, c, c.prim(), func(msg string) { t.Error(msg) }, g.opts)
				})
			}
		})
	}
}

// cellSlots bounds the cells that run at once, whatever go test's
// -parallel says: each is seconds of contention across three Clients on a
// shared deployment, and four at a time is what two cores carry while
// other packages' tests run beside them.
var cellSlots = make(chan struct{}, 4)

// distinctSlots fails t unless the locks of cells are in slots of their
// own: cells that run at once each move their lock's slot.
func distinctSlots(t *testing.T, cells []cell) {
	seen := map[int]string{}
	for _, c := range cells {
		slot := keys.Slot(cellName(c))
		if other, ok := seen[slot]; ok {
			t.Fatalf("the locks of cells %s and %s share slot %d", other, c, slot)
		}
		seen[slot] = c.String()
	}
}
