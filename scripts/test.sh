#!/usr/bin/env bash
# The project's test command (CI runs it via .ci/run). Works on a clean
# machine: installs Debian's redis-server package if it is missing. Tests
# start their own private redis-server instances on free loopback ports;
# no system Redis needs to run (and port 6379 is never used).
# Extra arguments are passed to `go test`, e.g. scripts/test.sh -run Lock -v
#
# Every module is vetted and tested even after one fails; the end says
# which steps failed, and the exit status is non-zero if any did.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/ensure-redis.sh || exit

export REDISYNC_REQUIRE_REDIS=1

failed=()
# step runs one step (a name, then its command) and records it if it fails.
step() {
	local name=$1
	shift
	echo "== $name: $*"
	local start=$SECONDS
	if "$@"; then
		echo "== $name: ok ($((SECONDS - start))s)"
	else
		echo "== $name: FAILED (exit $?, $((SECONDS - start))s)"
		failed+=("$name")
	fi
}

step "vet ." go vet ./...
# -parallel 6: the tests marked parallel start their own servers and mostly
# wait on real leases and pauses (the machine is idle most of the run), so
# six at a time fit on two cores. Six once made a timing test fail now and
# then (TestSemaphoreStallDoesNotStrandPermit): the load had found a real
# break, a hold granted by a late reply lost before its first renewal, now
# fixed. The tests that need the CPU on time (short renewed leases) are not
# parallel: they run first, alone in the process; a timed check elsewhere
# checks an order, or adds to its bound the scheduling delay the machine
# showed meanwhile (lagWatch, helpers_test.go).
step "test ." go test -race -count=1 -timeout 20m -parallel 6 "$@" ./...

# The extras (extra/*: OpenTelemetry, Prometheus) are modules of their own,
# so that the core keeps its few dependencies: vet and test each one too.
for mod in extra/*/; do
	mod=${mod%/}
	step "vet $mod" go -C "$mod" vet ./...
	step "test $mod" go -C "$mod" test -race -count=1 -timeout 5m "$@" ./...
done

# Every module resolves for a user with no replace (the extras' requirement
# of the core is a commit of HEAD's history), from the repository itself: a
# clone served by git (url.insteadOf, GOPRIVATE), the other dependencies from
# the module proxy; a program importing the core and every extra builds.
step "modules resolve with no replace" bash scripts/check-modules.sh

# The migration guides' code for the peer libraries (```go before blocks)
# compiles only in the bench module, which requires them: run there, skipped
# with a note when that module's dependencies cannot be downloaded.
if (cd bench && go mod download) >/dev/null 2>&1; then
	step "test bench/migration" go -C bench test -count=1 ./migration/
else
	echo "scripts/test.sh: bench's dependencies could not be downloaded; the migration guides' before-blocks were not compiled" >&2
fi

if ((${#failed[@]})); then
	echo "== FAILED: ${failed[*]}"
	exit 1
fi
echo "== all passed"
