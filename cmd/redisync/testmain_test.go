package main

import (
	"os"
	"sync"
	"testing"
)

// built is the redisync binary of this run of the tests (buildShell),
// removed at the end.
var built struct {
	once     sync.Once
	bin, dir string
	err      error
}

func TestMain(m *testing.M) {
	asHelper()
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
