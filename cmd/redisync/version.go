package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// versionCmd is "redisync version": the version of the module it was built
// from, as Go's build information has it — the tag or pseudo-version that
// `go install .../cmd/redisync@VERSION` fetched, or "(devel)" for a build
// from a checkout — with the commit when the build recorded one.
func versionCmd(out io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(out, "redisync (unknown version: built without module information)")
		return nil
	}
	fmt.Fprintln(out, versionLine(bi))
	return nil
}

// versionLine is what versionCmd prints for bi.
func versionLine(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(unknown)"
	}
	var extra []string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			extra = append(extra, "commit "+s.Value)
		case s.Key == "vcs.modified" && s.Value == "true":
			extra = append(extra, "modified")
		}
	}
	extra = append(extra, bi.GoVersion)
	return fmt.Sprintf("redisync %s (%s; %s)", v, bi.Main.Path, strings.Join(extra, ", "))
}
