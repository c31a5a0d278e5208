#!/usr/bin/env bash
# Makes sure redis-server is installed, installing Debian's package when it is
# missing. It starts nothing: tests and benchmarks start their own private
# instances. Used by scripts/test.sh and bench/run.sh.
set -euo pipefail

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
