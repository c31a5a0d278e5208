package migration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redisync-go/redisync/internal/readme"
)

// beforePrelude declares what a migration guide's "before" block (```go
// before: the peer library's code) may use without declaring it, as the
// README test's prelude does for redisync's blocks.
const beforePrelude = `
import (
	"context"

	"github.com/redis/go-redis/v9"
)

var (
	ctx context.Context // the caller's context
	rdb *redis.Client   // the application's go-redis client
	id  string          // an order id
)

func ship(ctx context.Context, id string) error { return nil }
`

// beforeImports maps the package names a "before" block may use to their
// import paths: the peers, as this module requires them.
var beforeImports = map[string]string{
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"log":         "log",
	"time":        "time",
	"redis":       "github.com/redis/go-redis/v9",
	"redsync":     "github.com/go-redsync/redsync/v4",
	"goredis":     "github.com/go-redsync/redsync/v4/redis/goredis/v9",
	"redislock":   "github.com/bsm/redislock",
	"rueidis":     "github.com/redis/rueidis",
	"rueidislock": "github.com/redis/rueidis/rueidislock",
}

// TestMigrationBeforeBlocksCompile compiles every "```go before" block of
// the repository's README.md and docs/*.md (the migration guides' code for
// redsync, redislock and rueidislock) against the versions this module
// requires, so that a guide's "before" cannot drift from the peer's real
// API. The "after" blocks are plain ```go blocks, compiled by the core's
// internal/readme test.
func TestMigrationBeforeBlocksCompile(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	names, err := readme.MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	var files []readme.File
	n := 0
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		bs := readme.Blocks(string(b), "before")
		n += len(bs)
		files = append(files, readme.File{Name: name, Blocks: bs})
	}
	if n == 0 {
		t.Fatal("no ```go before block in README.md or docs/*.md: is the test reading the right files?")
	}
	gomod, gosum := thisModule(t, root)
	env := readme.Env{Prelude: beforePrelude, Imports: beforeImports}
	if out, err := readme.Compile(t.TempDir(), gomod, gosum, files, env); err != nil {
		t.Fatalf("the \"go before\" blocks do not compile (%d blocks):\n%s", n, out)
	}
	t.Logf("%d \"go before\" blocks compile", n)
}

// thisModule returns the bench module's go.mod, renamed and with its
// replace of redisync made absolute, and its go.sum: a module that
// requires exactly the peers' versions the bench does.
func thisModule(t *testing.T, root string) (gomod, gosum string) {
	t.Helper()
	m, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.ReadFile(filepath.Join("..", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	gomod = string(m)
	gomod = strings.Replace(gomod, "module github.com/redisync-go/redisync/bench", "module migration.example", 1)
	gomod = strings.Replace(gomod, "=> ../\n", "=> "+root+"\n", 1)
	if !strings.Contains(gomod, "module migration.example") || !strings.Contains(gomod, "=> "+root+"\n") {
		t.Fatalf("bench/go.mod no longer has the module line or the replace of redisync this test rewrites:\n%s", m)
	}
	return gomod, string(s)
}
