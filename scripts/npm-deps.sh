#!/usr/bin/env bash
# npm-deps.sh installs the pinned npm packages of the stock-E2B-SDK suite
# (test/e2b) and of examples/e2b-js with `npm ci`: exactly what their
# package-lock.json files name, from npm's cache under $CORRAL_CACHE/npm
# (outside the clone; a second machine run fetches nothing it has). It is
# idempotent: a directory whose node_modules was installed from its present
# lockfile is left alone. It needs node >= 20.18.1 (the e2b package's
# engines); scripts/deps.sh installs node and npm, then runs this.
set -euo pipefail

CACHE=${CORRAL_CACHE:-/var/cache/corral}
repo=$(cd "$(dirname "$0")/.." && pwd)

log() { printf 'npm-deps: %s\n' "$*" >&2; }

for tool in node npm; do
	command -v "$tool" >/dev/null || { log "$tool is missing (scripts/deps.sh installs it)"; exit 1; }
done
if ! node -e '
const [a, b, c] = process.versions.node.split(".").map(Number)
process.exit(a > 20 || (a === 20 && (b > 18 || (b === 18 && c >= 1))) ? 0 : 1)'; then
	log "node $(node --version) is older than 20.18.1, which the e2b package needs (NodeSource's nodejs 20 or 22 works)"
	exit 1
fi

for dir in test/e2b examples/e2b-js; do
	d=$repo/$dir
	stamp=$d/node_modules/.corral-lock
	if cmp -s "$d/package-lock.json" "$stamp"; then
		continue
	fi
	log "npm ci in $dir (cache $CACHE/npm)"
	(cd "$d" && npm ci --cache "$CACHE/npm" --prefer-offline --no-audit --no-fund --loglevel=error)
	cp "$d/package-lock.json" "$stamp"
done
