#!/usr/bin/env bash
# Checks that every module of this repository resolves for a user as the
# README says, with no replace: the core and each extra/*/ module are got
# with `go get` into a throwaway module of a user's, from the repository
# itself (the checkout under test, at HEAD), and a program importing the core
# and every extra builds.
#
# The extras keep `replace github.com/redisync-go/redisync => ../..` for local
# development; a user's build ignores it and needs the core's version each
# extra requires (a pseudo-version of a commit of main's history) to exist.
# This is the check that it does, and that the extras at HEAD build with that
# version of the core (what `go get .../extra/X@latest` gives a user who asks
# for nothing else) as well as with the core at HEAD.
#
# How: a bare clone holding exactly HEAD's history serves the repository;
# git's url.<clone>.insteadOf (in a private global git config, so the user's
# is untouched) sends github.com/redisync-go/redisync there, and GOPRIVATE
# makes the go command fetch it with git instead of through the module proxy.
# The extras' other dependencies come from the module proxy as usual (their
# checksums are seeded from the modules' own go.sum files).
#
# Run by scripts/test.sh; alone: bash scripts/check-modules.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
core=github.com/redisync-go/redisync

if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
	echo "check-modules: the repository is a shallow clone: the extras' requirement of the core cannot be checked" >&2
	exit 1
fi
if [[ -n $(git status --porcelain -- go.mod go.sum extra) ]]; then
	echo "check-modules: note: uncommitted changes in go.mod or extra/ are not checked (HEAD is)" >&2
fi

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

head=$(git rev-parse HEAD)
git init -q --bare "$tmp/redisync.git"
git -C "$tmp/redisync.git" fetch -q "$repo" "$head:refs/heads/main"
git -C "$tmp/redisync.git" symbolic-ref HEAD refs/heads/main

export GIT_CONFIG_GLOBAL=$tmp/gitconfig
export GIT_CONFIG_NOSYSTEM=1
git config --global url."file://$tmp/redisync.git".insteadOf "https://$core"
git config --global protocol.file.allow always
export GOPRIVATE="github.com/redisync-go/*"
export GOFLAGS="-mod=mod -buildvcs=false"
export GOWORK=off
export GOTOOLCHAIN=local

# The modules, from HEAD's tree (not the working tree).
mods=()
while read -r gomod; do
	mods+=("${gomod%/go.mod}")
done < <(git ls-tree -r --name-only HEAD -- extra | grep -E '^extra/[^/]+/go.mod$')
((${#mods[@]})) || { echo "check-modules: no extra/*/go.mod at HEAD" >&2; exit 1; }

# Each extra that requires the core (extra/redisyncvet does not) requires a
# version whose commit is in HEAD's history.
want=""
for mod in "${mods[@]}"; do
	req=$(git show "HEAD:$mod/go.mod" | awk -v m="$core" '$1 == m && $2 ~ /^v/ {print $2; exit} $1 == "require" && $2 == m {print $3; exit}')
	if [[ -z $req ]]; then
		echo "check-modules: $mod does not require $core"
		continue
	fi
	if [[ ! $req =~ ^v0\.0\.0-([0-9]{14})-([0-9a-f]{12})$ ]]; then
		# a tag: it must exist in the repository and be in HEAD's history
		if ! git merge-base --is-ancestor "refs/tags/$req" HEAD 2>/dev/null; then
			echo "check-modules: $mod requires $core $req: no such tag in HEAD's history" >&2
			exit 1
		fi
	else
		commit=${BASH_REMATCH[2]}
		if ! git merge-base --is-ancestor "$commit" HEAD 2>/dev/null; then
			echo "check-modules: $mod requires $core $req: commit $commit is not in HEAD's history" >&2
			exit 1
		fi
		stamp=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S "$commit")
		if [[ $stamp != "${BASH_REMATCH[1]}" ]]; then
			echo "check-modules: $mod requires $core $req: commit $commit's time is $stamp (UTC)" >&2
			exit 1
		fi
	fi
	echo "check-modules: $mod requires $core $req"
	want+="$req "
done

user=$tmp/user
mkdir -p "$user"
cd "$user"
go mod init example.com/user >/dev/null 2>&1
# Checksums of the dependencies the modules already pin (none of this repository's).
for f in go.sum "${mods[@]/%//go.sum}"; do
	git -C "$repo" show "HEAD:$f" 2>/dev/null || true
done | grep -v "^$core[ /]" | sort -u >go.sum

{
	echo 'package main'
	echo
	echo 'import ('
	echo "	\"$core\""
	for mod in "${mods[@]}"; do
		echo "	_ \"$core/$mod\""
	done
	echo ')'
	echo
	echo 'func main() { _, _ = redisync.New(nil) }'
} >main.go

# The extras at HEAD, and the core at the version MVS picks for them: the
# highest they require.
gets=()
for mod in "${mods[@]}"; do
	gets+=("$core/$mod@$head")
done
echo "check-modules: go get ${gets[*]}"
go get "${gets[@]}"
picked=$(go list -m -f '{{.Version}}' "$core")
echo "check-modules: the extras at HEAD get $core $picked"
case " $want" in
*" $picked "*) ;;
*)
	echo "check-modules: $core $picked is none of the versions the extras require ($want)" >&2
	exit 1
	;;
esac
# Every package of every extra (commands and plugins too), and the program.
pkgs=()
for mod in "${mods[@]}"; do
	pkgs+=("$core/$mod/...")
done
build() {
	go build "${pkgs[@]}"
	go build -o /dev/null .
}
build
echo "check-modules: a program importing the core ($picked) and ${mods[*]} builds, and every package of theirs"

# The same with the core at HEAD (what a user who also gets the core @latest has).
go get "$core@$head"
build
echo "check-modules: and with the core at HEAD ($(go list -m -f '{{.Version}}' "$core"))"
