package redisyncvet_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/redisync-go/redisync/extra/redisyncvet"
)

// Each trap is reported, on every kind of lock (testdata/src/traps: a
// release given the parent context, another lock's hold, a read hold for
// a write release, context.Background or TODO; an acquisition whose hold
// context is discarded), with a message that names the context to give.
func TestTraps(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), redisyncvet.Analyzer, "traps")
}

// Code that releases every hold with its context, in each way redisync
// allows (testdata/src/clean: re-entries, derived contexts, copies,
// closures, fields, helpers handed the hold, Do), gets no report.
func TestClean(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), redisyncvet.Analyzer, "clean")
}
