#!/usr/bin/env bash
# One command for the benchmarks: installs Debian's redis-server when it is
# missing (as scripts/test.sh does), then runs them. The program starts its own
# private redis-server on a free loopback port and stops it on exit.
# Extra arguments go to the program, e.g. bench/run.sh -duration 1s -scenarios handoff
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

bash ../scripts/ensure-redis.sh
exec go run . "$@"
