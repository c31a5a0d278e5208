//go:build unix

package main

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: "redisync version" says the module's version as the
// binary's build information has it (what go version -m reads).
func TestVersion(t *testing.T) {
	sh := buildShell(t)
	p := sh.run(t, "version")
	out, err := exec.Command("go", "version", "-m", sh.bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/redisync-go/redisync" {
			want = "redisync " + f[2] + " (github.com/redisync-go/redisync; "
		}
	}
	if got := p.stdout.String(); p.code != 0 || want == "" || !strings.HasPrefix(got, want) {
		t.Fatalf("exit %d, said %q; go version -m says:\n%s", p.code, got, out)
	}
	if p := sh.run(t, "version", "x"); p.code != exitUsage {
		t.Fatalf("version x: exit %d", p.code)
	}
}

// versionLine shows a released version and the commit of a build from a
// checkout.
func TestVersionLine(t *testing.T) {
	for _, c := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/redisync-go/redisync", Version: "v1.4.2"}},
			"redisync v1.4.2 (github.com/redisync-go/redisync; go1.26.1)"},
		{debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Path: "github.com/redisync-go/redisync", Version: "v0.0.0-20260101000000-0123456789ab+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}},
			"redisync v0.0.0-20260101000000-0123456789ab+dirty (github.com/redisync-go/redisync; commit 0123456789abcdef, modified, go1.26.1)"},
	} {
		if got := versionLine(&c.bi); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
