#!/usr/bin/env bash
# Makes every extra that requires the core (extra/*/go.mod) require it at a
# commit of main:
#   bash scripts/bump-extras.sh [COMMIT]     (default: main)
# It writes the commit's pseudo-version, v0.0.0-<commit time, UTC>-<12 hex>
# (no tag is in the history, so the base is v0.0.0), with `go mod edit`:
# nothing is fetched. Run it in a commit after the core change the extras
# need, once that change is on main (merged, not rebased: its hash must stay),
# then scripts/check-modules.sh checks that every module resolves with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev=${1:-main}
commit=$(git rev-parse --verify "$rev^{commit}")
if [[ -n $(git tag --merged "$commit" 'v*') ]]; then
	echo "bump-extras: $rev has a tag in its history: require the tag (or a pseudo-version on it)" >&2
	exit 1
fi
version=v0.0.0-$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$commit")-${commit:0:12}
for gomod in extra/*/go.mod; do
	if ! go mod edit -json "$gomod" | grep -q '"Path": "github.com/redisync-go/redisync"'; then
		continue # an extra that does not require the core (extra/redisyncvet)
	fi
	go mod edit -require="github.com/redisync-go/redisync@$version" "$gomod"
	echo "bump-extras: ${gomod%/go.mod} requires github.com/redisync-go/redisync $version"
done
