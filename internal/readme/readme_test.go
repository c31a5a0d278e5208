package readme

// The README's Go blocks, the convention they follow:
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
//
// Every block is compiled in one module that requires redisync (and each
// module under extra/) from this checkout, so a block may import them all.
// A compile error is reported at the README's own line (a //line
// directive maps the generated files back to it).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
)

func transfer(ctx context.Context, from, to string, amount int64) error { return nil }
func runJobs(ctx context.Context, term int64)                         {}
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

// block is one Go block of a README: its text, and the line of the README
// its first line is on.
type block struct {
	line int
	text string
}

// blocks returns the ```go blocks of a README.
func blocks(readme string) []block {
	var bs []block
	var cur *block
	var body []string
	for i, l := range strings.Split(readme, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == "```go":
			cur, body = &block{line: i + 2}, nil
		case cur != nil && strings.TrimSpace(l) == "```":
			cur.text = strings.Join(body, "\n") + "\n"
			bs = append(bs, *cur)
			cur = nil
		case cur != nil:
			body = append(body, l)
		}
	}
	return bs
}

// wholeFile reports whether a block is a whole Go file.
func wholeFile(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

var (
	lineComment = regexp.MustCompile(`//.*`)
	qualified   = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.`)
)

// source returns the Go files of block b, in package pkg, as file name to
// content. name is the README's file name, for the //line directives.
func source(name, pkg string, b block) (map[string]string, error) {
	if wholeFile(b.text) {
		return map[string]string{"block.go": fmt.Sprintf("//line %s:%d\n%s", name, b.line, b.text)}, nil
	}
	used := map[string]bool{}
	for _, m := range qualified.FindAllStringSubmatch(lineComment.ReplaceAllString(b.text, ""), -1) {
		if _, ok := imports[m[1]]; ok {
			used[m[1]] = true
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	var f strings.Builder
	fmt.Fprintf(&f, "package %s\n\n", pkg)
	if len(names) > 0 {
		f.WriteString("import (\n")
		for _, n := range names {
			fmt.Fprintf(&f, "\t%s %q\n", n, imports[n])
		}
		f.WriteString(")\n\n")
	}
	fmt.Fprintf(&f, "func _() (err error) {\n//line %s:%d\n%s\treturn err\n}\n", name, b.line, b.text)
	return map[string]string{
		"block.go":   f.String(),
		"prelude.go": "package " + pkg + "\n" + prelude,
	}, nil
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

// build compiles the Go blocks of readme (named name) in a fresh module
// that requires redisync and its extras from root, and returns the go
// command's output and error.
func build(t *testing.T, root, name, readme string) (int, string, error) {
	t.Helper()
	bs := blocks(readme)
	dir := t.TempDir()
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
	write(t, filepath.Join(dir, "go.mod"), gomod.String())
	write(t, filepath.Join(dir, "go.sum"), gosum.String())
	for i, b := range bs {
		pkg := fmt.Sprintf("block%02d", i+1)
		files, err := source(name, pkg, b)
		if err != nil {
			t.Fatal(err)
		}
		for f, text := range files {
			write(t, filepath.Join(dir, pkg, f), text)
		}
	}
	// go list -export compiles every package (a main one too) and links
	// nothing: a compile error fails it.
	args := append([]string{"list", "-mod=mod", "-export", "-f", "{{.ImportPath}}"}, raceFlags...)
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return len(bs), out.String(), err
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReadmeGoBlocksCompile compiles every Go block of README.md.
func TestReadmeGoBlocksCompile(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	n, out, err := build(t, root, "README.md", string(readme))
	if n == 0 {
		t.Fatal("README.md has no ```go block: is the test reading the right file?")
	}
	if err != nil {
		t.Fatalf("README.md's Go blocks do not compile (%d blocks):\n%s", n, out)
	}
	t.Logf("%d Go blocks of README.md compile", n)
}

// TestReadmeCheckFailsOnBrokenBlock: the check fails, at the README's line,
// on a block that does not compile (the fencing example as it once was:
// its token declared and not used), and passes on a whole program and on a
// block that uses the prelude.
func TestReadmeCheckFailsOnBrokenBlock(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	good := "text\n\n```go\npackage main\n\nfunc main() {}\n```\n\n```go\nm := c.Mutex(\"x\")\n" +
		"lctx, err := m.Lock(ctx)\nif err != nil {\n\treturn err\n}\n" +
		"defer func() { err = errors.Join(err, m.Unlock(lctx)) }()\n```\n"
	if n, out, err := build(t, root, "GOOD.md", good); err != nil || n != 2 {
		t.Fatalf("good blocks: %d blocks, %v:\n%s", n, err, out)
	}
	broken := good + "\n```go\nm := c.Mutex(\"y\", redisync.WithFencing())\nlctx, err := m.Lock(ctx)\n" +
		"if err != nil {\n\treturn err\n}\ntoken, _ := m.Token(lctx)\n```\n"
	n, out, err := build(t, root, "BROKEN.md", broken)
	if err == nil {
		t.Fatalf("a block with an unused variable compiled (%d blocks):\n%s", n, out)
	}
	if want := "BROKEN.md:24: declared and not used: token"; !strings.Contains(out, want) {
		t.Fatalf("the error does not say %q:\n%s", want, out)
	}
}
