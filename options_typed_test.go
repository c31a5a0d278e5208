package redisync

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Options are typed per primitive: an option that does not apply to a
// constructor does not compile there, and one that applies to several
// primitives is an option of each. Each case is a function in a file of
// its own, in one small package built against this module (go build, with
// the files laid over the module by -overlay: nothing is written in the
// source tree; -gcflags=-e: every error reported); the misuses must fail
// to compile, with the compiler naming the option type, and the right
// uses must compile.
func TestOptionsTyped(t *testing.T) {
	t.Parallel() // it waits for the compiler
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goCmd); err != nil {
		if goCmd, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to build with")
		}
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name string
		body string // statements, with c a *redisync.Client
		want string // "" for a program that compiles; else in the error
	}
	cases := []tc{
		// What does not apply does not compile.
		{"mutex_permits", `c.Mutex("x", redisync.WithPermits(3))`, "does not implement redisync.MutexOption"},
		{"mutex_waiter", `c.Mutex("x", redisync.WithWaiterTimeout(time.Second))`, "does not implement redisync.MutexOption"},
		{"fair_permits", `c.FairMutex("x", redisync.WithPermits(3))`, "does not implement redisync.FairOption"},
		{"rw_permits", `c.RWMutex("x", redisync.WithPermits(3))`, "does not implement redisync.RWOption"},
		{"sem_fencing", `c.Semaphore("x", redisync.WithFencing())`, "does not implement redisync.SemaphoreOption"},
		{"sem_waiter", `c.Semaphore("x", redisync.WithWaiterTimeout(time.Second))`, "does not implement redisync.SemaphoreOption"},
		{"multi_waiter", `c.MultiLock([]string{"x"}, redisync.WithWaiterTimeout(time.Second))`, "does not implement redisync.MultiLockOption"},
		{"multi_permits", `c.MultiLock([]string{"x"}, redisync.WithPermits(3))`, "does not implement redisync.MultiLockOption"},
		{"elect_waiter", `c.Election("x", redisync.WithWaiterTimeout(time.Second))`, "does not implement redisync.ElectionOption"},
		{"elect_permits", `c.Election("x", redisync.WithPermits(3))`, "does not implement redisync.ElectionOption"},
		{"latch_lease", `c.CountDownLatch("x", redisync.WithLease(time.Second))`, "too many arguments"},
		{"slice", `opts := []redisync.MutexOption{redisync.WithLease(time.Second), redisync.WithPermits(3)}; c.Mutex("x", opts...)`,
			"does not implement redisync.MutexOption"},
		{"waiter_as_lock", `var _ redisync.LockOption = redisync.WithWaiterTimeout(time.Second)`, "does not implement redisync.LockOption"},
		// The option types are sealed: a type of another package cannot
		// be one.
		{"sealed", "c.Mutex(\"x\", mine{})\n}\n\ntype mine struct{}\n\nfunc (mine) mutexOption() {}\n\nfunc unused() {", "does not implement redisync.MutexOption"},

		// What applies compiles, alone, together, and in slices.
		{"mutex_ok", `c.Mutex("x", redisync.WithLease(time.Second), redisync.WithFencing()); c.Mutex("x", redisync.WithRenewedLease(time.Second))`, ""},
		{"fair_ok", `c.FairMutex("x", redisync.WithLease(time.Second), redisync.WithFencing(), redisync.WithWaiterTimeout(time.Second))`, ""},
		{"rw_ok", `c.RWMutex("x", redisync.WithRenewedLease(time.Second), redisync.WithFencing(), redisync.WithWaiterTimeout(time.Second))`, ""},
		{"sem_ok", `c.Semaphore("x", redisync.WithLease(time.Second), redisync.WithPermits(3)); c.Semaphore("x", redisync.WithRenewedLease(time.Second))`, ""},
		{"multi_ok", `c.MultiLock([]string{"x"}, redisync.WithRenewedLease(time.Second), redisync.WithFencing())`, ""},
		{"elect_ok", `c.Election("x", redisync.WithLease(time.Second), redisync.WithRenewedLease(time.Second))`, ""},
		// An Election's terms are its tokens: WithFencing would change
		// nothing, so it does not compile there.
		{"elect_fencing", `c.Election("x", redisync.WithFencing())`, "does not implement redisync.ElectionOption"},
		{"slices_ok", `fo := []redisync.FairOption{redisync.WithLease(time.Second), redisync.WithWaiterTimeout(time.Second)}; c.FairMutex("x", fo...)
	so := []redisync.SemaphoreOption{redisync.WithRenewedLease(time.Second), redisync.WithPermits(2)}; c.Semaphore("x", so...)`, ""},
		{"several_ok", `l := redisync.WithLease(time.Second)
	var _ redisync.MutexOption = l
	var _ redisync.FairOption = l
	var _ redisync.RWOption = l
	var _ redisync.SemaphoreOption = l
	var _ redisync.MultiLockOption = l
	var _ redisync.ElectionOption = l
	f := redisync.WithFencing()
	var _ redisync.MutexOption = f
	var _ redisync.MultiLockOption = f
	w := redisync.WithWaiterTimeout(time.Second)
	var _ redisync.FairOption = w
	var _ redisync.RWOption = w`, ""},
	}

	dir := t.TempDir()
	overlay := map[string]string{}
	for _, c := range cases {
		src := fmt.Sprintf("package optprobe\n\nimport (\n\t\"time\"\n\n\t\"github.com/redisync-go/redisync\"\n)\n\nvar _ = time.Second\n\nfunc probe_%s() {\n\tvar c *redisync.Client\n\t_ = c\n\t%s\n}\n", c.name, c.body)
		file := filepath.Join(dir, c.name+".go")
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(root, "internal", "optprobe", c.name+".go")] = file
	}
	ov, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ovFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"build", "-gcflags=-e", "-overlay", ovFile}, raceFlags...)
	cmd := exec.Command(goCmd, append(args, "./internal/optprobe")...)
	cmd.Dir = root
	out, _ := cmd.CombinedOutput()
	t.Logf("go build:\n%s", out)
	// Each error line starts with its file's path: the case's name.
	byCase := map[string][]string{}
	for _, line := range strings.Split(string(out), "\n") {
		file, _, ok := strings.Cut(strings.TrimSpace(line), ":")
		if name, isGo := strings.CutSuffix(filepath.Base(file), ".go"); ok && isGo {
			byCase[name] = append(byCase[name], line)
		}
	}
	if len(byCase) == 0 && strings.Contains(string(out), "no Go files") {
		t.Fatalf("the probe package was not built: %s", out)
	}
	for _, c := range cases {
		errs := byCase[c.name]
		switch {
		case c.want == "" && len(errs) > 0:
			t.Errorf("%s: does not compile: %s", c.name, errs)
		case c.want != "" && len(errs) == 0:
			t.Errorf("%s: compiles, want an error with %q", c.name, c.want)
		case c.want != "" && !strings.Contains(strings.Join(errs, "\n"), c.want):
			t.Errorf("%s: the error %s does not say %q", c.name, errs, c.want)
		}
	}
}
