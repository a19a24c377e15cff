#!/usr/bin/env bash
# deps.sh installs what Corral needs to build, run and test on a Debian machine,
# as root. It is idempotent: a second run only checks. Heavy builds (runc, runsc)
# are cached outside the clone under $CORRAL_CACHE, keyed by version, so a second
# run on the same machine reuses them while a fresh machine builds them.
set -euo pipefail

RUNC_VERSION=1.5.3
# gVisor publishes pseudo-versions only; this one is from 2026-09 (see RUNTIMES.md).
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
# The S3-compatible server the blob tests run against (internal/testenv/s3.go).
VERSITYGW_VERSION=v1.8.0

CACHE=${CORRAL_CACHE:-/var/cache/corral}
PREFIX=${CORRAL_PREFIX:-/opt/corral}
export PATH=/usr/local/go/bin:$PATH

log() { printf 'deps: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
	log "must run as root (sandboxes need namespaces, cgroups and mounts)"
	exit 1
fi

# Debian packages. Installing postgresql or redis-server may start the
# distribution's own service; tests never use it, they start throwaway instances.
pkgs=(
	libseccomp-dev   # runc's seccomp support
	e2fsprogs        # mkfs.ext4 for per-sandbox disk images
	util-linux       # losetup, mount
	iproute2         # network namespaces for the egress tests
	runsc            # Debian's gVisor, a fallback to the pinned build
	bubblewrap       # a baseline in bench/
	mmdebstrap       # image recipes
	postgresql       # store conformance and contract tests
	redis-server     # state conformance and contract tests
	chromium         # headless browser for the dashboard tests (test/ui)
	ca-certificates
	file
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm vendors registry packages into the node image (images/node.toml); a
# NodeSource nodejs ships its own, Debian's comes as a separate package.
if ! command -v npm >/dev/null; then
	log "installing npm"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends npm >/dev/null
fi

mkdir -p "$CACHE" "$PREFIX/bin"

# install_if_changed SRC DST copies SRC to DST when they differ.
install_if_changed() {
	if ! cmp -s "$1" "$2"; then
		install -m 0755 "$1" "$2.new"
		mv -f "$2.new" "$2"
		log "installed $2"
	fi
}

# runc: `go install` refuses it (replace directives), so build from the module dir.
runc_out="$CACHE/runc-$RUNC_VERSION/runc"
if [ ! -x "$runc_out" ]; then
	log "building runc $RUNC_VERSION (about a minute)"
	dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/opencontainers/runc@v$RUNC_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -n "$dir" ] || { log "could not download runc v$RUNC_VERSION"; exit 1; }
	src="$CACHE/src/runc-$RUNC_VERSION"
	rm -rf "$src"; mkdir -p "$(dirname "$src")"
	cp -r "$dir" "$src"; chmod -R u+w "$src"
	mkdir -p "$(dirname "$runc_out")"
	(cd "$src" && CGO_ENABLED=1 go build -buildvcs=false -mod=mod -tags seccomp -trimpath \
		-ldflags "-X main.version=$RUNC_VERSION" -o "$runc_out.tmp" .)
	mv "$runc_out.tmp" "$runc_out"
	rm -rf "$src"
fi
install_if_changed "$runc_out" "$PREFIX/bin/runc"

# runsc: must be built without cgo, or it cannot start sandboxes (RUNTIMES.md).
runsc_out="$CACHE/runsc-$RUNSC_VERSION/runsc"
if [ ! -x "$runsc_out" ]; then
	log "building runsc $RUNSC_VERSION (a few minutes on a cold module cache)"
	mkdir -p "$(dirname "$runsc_out")"
	(cd /tmp && CGO_ENABLED=0 GOBIN="$(dirname "$runsc_out")" GOFLAGS=-buildvcs=false \
		go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION")
fi
install_if_changed "$runsc_out" "$PREFIX/bin/runsc"

# versitygw: an S3-compatible gateway over a local directory, for the blob
# store's S3 tests. Pure Go, so CGO is off and the binary is static.
versitygw_out="$CACHE/versitygw-$VERSITYGW_VERSION/versitygw"
if [ ! -x "$versitygw_out" ]; then
	log "building versitygw $VERSITYGW_VERSION (a few minutes on a cold module cache)"
	mkdir -p "$(dirname "$versitygw_out")"
	(cd /tmp && CGO_ENABLED=0 GOBIN="$(dirname "$versitygw_out")" GOFLAGS=-buildvcs=false \
		go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
fi
install_if_changed "$versitygw_out" "$PREFIX/bin/versitygw"
printf '%s\n' "$VERSITYGW_VERSION" >"$PREFIX/versitygw.version"

printf '%s\n' "$RUNC_VERSION" >"$PREFIX/runc.version"
printf '%s\n' "$RUNSC_VERSION" >"$PREFIX/runsc.version"
log "ok: runc $("$PREFIX/bin/runc" --version | head -1 | awk '{print $3}'), runsc $RUNSC_VERSION, versitygw $VERSITYGW_VERSION in $PREFIX/bin"
