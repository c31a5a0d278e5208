#!/usr/bin/env bash
# The project's test command (CI runs it via .ci/run). Works on a clean
# machine: installs Debian's redis-server package if it is missing. Tests
# start their own private redis-server instances on free loopback ports;
# no system Redis needs to run (and port 6379 is never used).
# Extra arguments are passed to `go test`, e.g. scripts/test.sh -run Lock -v
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

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
	have_redis || { echo "redis-server still not available after install" >&2; exit 1; }
fi

export REDISYNC_REQUIRE_REDIS=1
go vet ./...
go test -race -count=1 -timeout 20m "$@" ./...
