package readme

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Block is one fenced Go block of a markdown file: its text, and the line
// of the file its first line is on.
type Block struct {
	Line int
	Text string
}

// Blocks returns the Go blocks of a markdown file whose fence says "```go"
// followed by tag: tag "" gives the plain ```go blocks, tag "before" the
// ```go before blocks (the peer libraries' code in the migration guides).
func Blocks(md, tag string) []Block {
	fence := "```go"
	if tag != "" {
		fence += " " + tag
	}
	var bs []Block
	var cur *Block
	var body []string
	for i, l := range strings.Split(md, "\n") {
		switch {
		case cur == nil && strings.TrimSpace(l) == fence:
			cur, body = &Block{Line: i + 2}, nil
		case cur == nil && strings.HasPrefix(strings.TrimSpace(l), "```"):
			// another block: skip to its end, so that its closing fence
			// is not read as an opening one
			cur, body = &Block{Line: -1}, nil
		case cur != nil && strings.TrimSpace(l) == "```":
			if cur.Line >= 0 {
				cur.Text = strings.Join(body, "\n") + "\n"
				bs = append(bs, *cur)
			}
			cur = nil
		case cur != nil:
			body = append(body, l)
		}
	}
	return bs
}

// Env is what a statement block may use without declaring it: the prelude
// (declarations of the names the code around an example would have, in a
// file of the block's package, with its own imports) and the packages a
// block may use by name, with their import paths (added to the block's
// file when it uses them).
type Env struct {
	Prelude string
	Imports map[string]string
}

// wholeFile reports whether a block is a whole Go file: its first line that
// is not blank or a comment starts with "package".
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

// Source returns the Go files of block b, in package pkg, as file name to
// content. A whole file is compiled as it is; any other block is the body
// of a function "func(...) (err error)" next to env's prelude. name is the
// markdown file's name, for the //line directives that map a compile error
// back to its line.
func Source(name, pkg string, b Block, env Env) map[string]string {
	if wholeFile(b.Text) {
		return map[string]string{"block.go": fmt.Sprintf("//line %s:%d\n%s", name, b.Line, b.Text)}
	}
	used := map[string]bool{}
	for _, m := range qualified.FindAllStringSubmatch(lineComment.ReplaceAllString(b.Text, ""), -1) {
		if _, ok := env.Imports[m[1]]; ok {
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
			fmt.Fprintf(&f, "\t%s %q\n", n, env.Imports[n])
		}
		f.WriteString(")\n\n")
	}
	fmt.Fprintf(&f, "func _() (err error) {\n//line %s:%d\n%s\treturn err\n}\n", name, b.Line, b.Text)
	return map[string]string{
		"block.go":   f.String(),
		"prelude.go": "package " + pkg + "\n" + env.Prelude,
	}
}

// File is one markdown file's blocks, to compile.
type File struct {
	Name   string // the name errors give, e.g. "docs/fencing.md"
	Blocks []Block
}

// Compile writes a module in dir (go.mod and go.sum as given) with one
// package per block of files, and compiles them all (go list -export:
// every package, a main one too, compiled, nothing linked), with the
// extra go flags given. It returns the go command's output, and an error
// when a block does not compile.
func Compile(dir, gomod, gosum string, files []File, env Env, flags ...string) (string, error) {
	if err := write(filepath.Join(dir, "go.mod"), gomod); err != nil {
		return "", err
	}
	if err := write(filepath.Join(dir, "go.sum"), gosum); err != nil {
		return "", err
	}
	n := 0
	for _, f := range files {
		for _, b := range f.Blocks {
			n++
			pkg := fmt.Sprintf("block%03d", n)
			for fn, text := range Source(f.Name, pkg, b, env) {
				if err := write(filepath.Join(dir, pkg, fn), text); err != nil {
					return "", err
				}
			}
		}
	}
	args := append([]string{"list", "-mod=mod", "-export", "-f", "{{.ImportPath}}"}, flags...)
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// MarkdownFiles returns README.md and every docs/*.md under root, as paths
// relative to root, in order.
func MarkdownFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(docs)
	names := []string{"README.md"}
	for _, d := range docs {
		names = append(names, filepath.Join("docs", filepath.Base(d)))
	}
	return names, nil
}

func write(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}
