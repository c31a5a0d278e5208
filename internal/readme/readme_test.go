package readme

// The Go blocks of README.md and docs/*.md, the convention they follow:
//
//   - A block whose first line that is not blank or a comment starts with
//     "package" is a whole Go file, compiled as it is, in a package of its
//     own (a "package main" block is a whole program).
//   - Any other block is a list of statements: the body of a function
//     "func(...) (err error)", so it may return an error, and assign err in
//     a deferred function (as the examples that handle Unlock's error do).
//     It may use, without declaring them, the names declared in prelude
//     below (ctx, rdb, c, and the stand-ins for the caller's own code, such
//     as db or runJobs); add a name there when a new example needs one. Its
//     imports are added from the package names it uses (imports below).
//   - A block fenced "```go before" is a migration guide's code for a peer
//     library (redsync, redislock, rueidislock): it is not compiled here but
//     in the bench module, which requires those libraries
//     (bench/migration_test.go, with a prelude of its own). Other fences
//     (```java, ```sh) are not compiled.
//
// Every block is compiled in one module that requires redisync (and each
// module under extra/) from this checkout, so a block may import them all.
// A compile error is reported at the file's own line (a //line directive
// maps the generated files back to it). readme.go holds the machinery,
// shared with the bench module's test.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// prelude declares the names a statement block may use without declaring
// them: what the code around an example would have.
const prelude = `
import (
	"context"
	"database/sql"

	"github.com/redis/go-redis/v9"
	"github.com/redisync-go/redisync"
)

var (
	ctx      context.Context  // the caller's context
	rdb      *redis.Client    // the application's go-redis client
	c        *redisync.Client // redisync.New(rdb)
	db       *sql.DB          // a database the example writes
	balance  int64            // a value it writes
	from, to string           // account ids
	amount   int64            // an amount to move
	myAddr   string           // this process's address
	id       string           // an order id
)

func transfer(ctx context.Context, from, to string, amount int64) error { return nil }
func runJobs(ctx context.Context, term int64)                         {}
func ship(ctx context.Context, id string) error                       { return nil }
`

// imports maps the package names a statement block may use to their import
// paths.
var imports = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"log":          "log",
	"slog":         "log/slog",
	"sql":          "database/sql",
	"time":         "time",
	"redis":        "github.com/redis/go-redis/v9",
	"redisync":     "github.com/redisync-go/redisync",
	"redisyncotel": "github.com/redisync-go/redisync/extra/redisyncotel",
	"redisyncprom": "github.com/redisync-go/redisync/extra/redisyncprom",
	"prometheus":   "github.com/prometheus/client_golang/prometheus",
	"promhttp":     "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":         "go.opentelemetry.io/otel",
	"http":         "net/http",
}

// repoRoot is the repository's root: this package is internal/readme.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// build compiles the Go blocks of the markdown files given (name to
// text) in a fresh module that requires redisync and its extras from root,
// and returns how many blocks there were, the go command's output and its
// error.
func build(t *testing.T, root string, files map[string]string) (int, string, error) {
	t.Helper()
	mods := map[string]string{"github.com/redisync-go/redisync": root}
	extras, _ := filepath.Glob(filepath.Join(root, "extra", "*", "go.mod"))
	for _, gm := range extras {
		d := filepath.Dir(gm)
		mods["github.com/redisync-go/redisync/extra/"+filepath.Base(d)] = d
	}
	var gomod, gosum strings.Builder
	gomod.WriteString("module readme.example\n\ngo 1.26.0\n")
	sums := map[string]bool{}
	for _, path := range sortedKeys(mods) {
		fmt.Fprintf(&gomod, "\nrequire %s v0.0.0\nreplace %s => %s\n", path, path, mods[path])
		b, err := os.ReadFile(filepath.Join(mods[path], "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && !sums[l] {
				sums[l] = true
				gosum.WriteString(l + "\n")
			}
		}
	}
	var fs []File
	n := 0
	for _, name := range sortedKeys(files) {
		bs := Blocks(files[name], "")
		n += len(bs)
		fs = append(fs, File{Name: name, Blocks: bs})
	}
	env := Env{Prelude: prelude, Imports: imports}
	out, err := Compile(t.TempDir(), gomod.String(), gosum.String(), fs, env, raceFlags...)
	return n, out, err
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestReadmeGoBlocksCompile compiles every Go block of README.md and of
// docs/*.md.
func TestReadmeGoBlocksCompile(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	names, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if len(Blocks(string(b), "")) == 0 && name == "README.md" {
			t.Fatal("README.md has no ```go block: is the test reading the right file?")
		}
		files[name] = string(b)
	}
	n, out, err := build(t, root, files)
	if err != nil {
		t.Fatalf("the Go blocks of %s do not compile (%d blocks):\n%s", strings.Join(names, ", "), n, out)
	}
	t.Logf("%d Go blocks of %d files compile", n, len(names))
}

// TestReadmeCheckFailsOnBrokenBlock: the check fails, at the file's line,
// on a block that does not compile (the fencing example as it once was:
// its token declared and not used), and passes on a whole program and on a
// block that uses the prelude; a "go before" block, the peers' code, is
// left to the bench module.
func TestReadmeCheckFailsOnBrokenBlock(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	good := "text\n\n```go\npackage main\n\nfunc main() {}\n```\n\n```go\nm := c.Mutex(\"x\")\n" +
		"lctx, err := m.Lock(ctx)\nif err != nil {\n\treturn err\n}\n" +
		"defer func() { err = errors.Join(err, m.Unlock(lctx)) }()\n```\n" +
		"\n```go before\nnot Go that this module could compile\n```\n"
	if n, out, err := build(t, root, map[string]string{"GOOD.md": good}); err != nil || n != 2 {
		t.Fatalf("good blocks: %d blocks, %v:\n%s", n, err, out)
	}
	broken := good + "\n```go\nm := c.Mutex(\"y\", redisync.WithFencing())\nlctx, err := m.Lock(ctx)\n" +
		"if err != nil {\n\treturn err\n}\ntoken, _ := m.Token(lctx)\n```\n"
	n, out, err := build(t, root, map[string]string{"docs/BROKEN.md": broken})
	if err == nil {
		t.Fatalf("a block with an unused variable compiled (%d blocks):\n%s", n, out)
	}
	if want := "docs/BROKEN.md:28: declared and not used: token"; !strings.Contains(out, want) {
		t.Fatalf("the error does not say %q:\n%s", want, out)
	}
}

// TestBlocksByFence: Blocks picks the blocks of one fence only, and a
// block of another fence never swallows the next one.
func TestBlocksByFence(t *testing.T) {
	md := "```sh\necho\n```\n```go\na := 1\n```\n```go before\nb := 2\n```\n```java\nx();\n```\n```go\nc := 3\n```\n"
	var got []string
	for _, b := range Blocks(md, "") {
		got = append(got, fmt.Sprintf("%d:%s", b.Line, strings.TrimSpace(b.Text)))
	}
	if want := "5:a := 1 14:c := 3"; strings.Join(got, " ") != want {
		t.Fatalf("go blocks: %q, want %q", strings.Join(got, " "), want)
	}
	bs := Blocks(md, "before")
	if len(bs) != 1 || bs[0].Line != 8 || strings.TrimSpace(bs[0].Text) != "b := 2" {
		t.Fatalf("go before blocks: %+v", bs)
	}
}
