#!/usr/bin/env bash
# One command for the benchmarks: installs Debian's redis-server when it is
# missing (as scripts/test.sh does), then runs them. The program starts its own
# private redis-server on a free loopback port and stops it on exit.
# Extra arguments go to the program, e.g. bench/run.sh -duration 1s -scenarios handoff
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

have_redis() {
	command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || [ -x /usr/sbin/redis-server ]
}
if ! have_redis; then
	echo "redis-server not found; installing Debian package redis-server" >&2
	SUDO=""
	if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
		SUDO=sudo
	fi
	$SUDO apt-get update
	$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
fi
exec go run . "$@"
