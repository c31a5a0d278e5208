package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The command runs under go vet -vettool: in a module whose package has
// the traps (a copy of testdata's, beside the core's stub as the module
// github.com/redisync-go/redisync), go vet fails and prints the reports;
// in one whose package is clean, it passes.
func TestGoVetVettool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs go vet")
	}
	dir := t.TempDir()
	tool := filepath.Join(dir, "redisyncvet")
	if out, err := exec.Command("go", "build", "-o", tool, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	testdata := filepath.Join("..", "..", "testdata", "src")
	mod := filepath.Join(dir, "mod")
	copyFile(t, filepath.Join(testdata, "github.com", "redisync-go", "redisync", "redisync.go"), filepath.Join(mod, "redisync.go"))
	copyFile(t, filepath.Join(testdata, "traps", "traps.go"), filepath.Join(mod, "traps", "traps.go"))
	copyFile(t, filepath.Join(testdata, "clean", "clean.go"), filepath.Join(mod, "clean", "clean.go"))
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module github.com/redisync-go/redisync\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vet := func(pkg string) (string, error) {
		cmd := exec.Command("go", "vet", "-vettool="+tool, pkg)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := vet("./traps")
	if err == nil {
		t.Fatalf("go vet passed the traps:\n%s", out)
	}
	for _, want := range []string{
		"traps.go:18:8: redisync: m.Unlock is given ctx, which is not the hold's context",
		"redisync: the hold's context that m.Lock returns is discarded",
		"redisync: m.Unlock is given context.Background(), which carries no hold",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("go vet's output lacks %q:\n%s", want, out)
		}
	}
	if out, err := vet("./clean"); err != nil {
		t.Errorf("go vet failed on clean code: %v\n%s", err, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
