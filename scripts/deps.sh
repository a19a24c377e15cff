#!/usr/bin/env bash
# deps.sh installs what Corral needs on a Debian machine, as root. It is
# idempotent: a second run only checks. Heavy builds (runc, runsc, versitygw)
# are cached outside the clone under $CORRAL_CACHE, keyed by version, so a
# second run on the same machine reuses them while a fresh machine builds them.
#
#   deps.sh serve            what `corral serve` needs before it answers:
#                            mkfs.ext4, losetup and the pinned runc
#   deps.sh runsc-background builds the pinned runsc in the background (niced,
#                            logged to $CORRAL_CACHE/runsc-VERSION.log), holding
#                            $CORRAL_CACHE/runsc.lock from before it returns
#                            until runsc is installed; meanwhile serve answers
#                            gVisor requests with a retryable error
#   deps.sh image-background builds the python image (the E2B SDKs' default
#                            template) in the background (niced, logged to
#                            $CORRAL_CACHE/image-python.log) into
#                            $CORRAL_DATA_DIR/images with bin/corral, once
#                            the build holds its lock; meanwhile serve answers
#                            requests for it with a retryable error
#   deps.sh image            what `make image` needs: the above, runsc in the
#                            foreground and mmdebstrap
#   deps.sh test             everything the suite needs (the default): the
#                            above in the foreground, PostgreSQL, Redis,
#                            Chromium, mmdebstrap, bubblewrap, the S3 server,
#                            node and the pinned npm packages of test/e2b and
#                            examples/e2b-js (scripts/npm-deps.sh)
set -euo pipefail

RUNC_VERSION=1.5.3
# gVisor publishes pseudo-versions only; this one is from 2026-09 (see RUNTIMES.md).
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237
# The S3-compatible server the blob tests run against (internal/testenv/s3.go).
VERSITYGW_VERSION=v1.8.0

CACHE=${CORRAL_CACHE:-/var/cache/corral}
PREFIX=${CORRAL_PREFIX:-/opt/corral}
export PATH=/usr/local/go/bin:$PATH
mode=${1:-test}

log() { printf 'deps: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
	log "must run as root (sandboxes need namespaces, cgroups and mounts)"
	exit 1
fi

# Debian packages serving needs: runc's seccomp support, ext4 disk images on
# loop devices, TLS roots for fetched inputs and callbacks.
serve_pkgs=(libseccomp-dev e2fsprogs util-linux ca-certificates)
# What only the tests, the bench and image builds need. Installing
# postgresql or redis-server may start the distribution's own service;
# tests never use it, they start throwaway instances.
test_pkgs=(
	iproute2         # network namespaces for the egress tests
	bubblewrap       # a baseline in bench/
	mmdebstrap       # image recipes
	postgresql       # store conformance and contract tests
	redis-server     # state conformance and contract tests
	chromium         # headless browser for the dashboard tests (test/ui)
	systemd          # systemd-analyze verify of deploy/systemd (test/systemd)
	file
	python3          # scripts/lanes.py, which runs the test lanes
)

apt_updated=
# apt_install installs the packages among its arguments that are missing.
apt_install() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	[ ${#missing[@]} -gt 0 ] || return 0
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "$apt_updated" ]; then
		apt-get update -qq
		apt_updated=1
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

mkdir -p "$CACHE" "$PREFIX/bin"

# install_if_changed SRC DST copies SRC to DST when they differ, atomically,
# so a server that looks for DST never sees half a binary.
install_if_changed() {
	if ! cmp -s "$1" "$2"; then
		install -m 0755 "$1" "$2.new"
		mv -f "$2.new" "$2"
		log "installed $2"
	fi
}

# with_lock NAME CMD... runs CMD holding $CACHE/NAME.lock, so a build started
# in the background and one asked for in the foreground never run twice.
with_lock() {
	local name=$1
	shift
	(
		flock 9
		"$@"
	) 9>"$CACHE/$name.lock"
}

# runc: `go install` refuses it (replace directives), so build from the module dir.
build_runc() {
	local out="$CACHE/runc-$RUNC_VERSION/runc"
	if [ ! -x "$out" ]; then
		log "building runc $RUNC_VERSION (about a minute)"
		local dir src
		dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/opencontainers/runc@v$RUNC_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -n "$dir" ] || { log "could not download runc v$RUNC_VERSION"; return 1; }
		src="$CACHE/src/runc-$RUNC_VERSION"
		rm -rf "$src"
		mkdir -p "$(dirname "$src")"
		cp -r "$dir" "$src"
		chmod -R u+w "$src"
		mkdir -p "$(dirname "$out")"
		(cd "$src" && CGO_ENABLED=1 go build -buildvcs=false -mod=mod -tags seccomp -trimpath \
			-ldflags "-X main.version=$RUNC_VERSION" -o "$out.tmp" .)
		mv "$out.tmp" "$out"
		rm -rf "$src"
	fi
	install_if_changed "$out" "$PREFIX/bin/runc"
	printf '%s\n' "$RUNC_VERSION" >"$PREFIX/runc.version"
}

# runsc: must be built without cgo, or it cannot start sandboxes (RUNTIMES.md).
build_runsc() {
	local out="$CACHE/runsc-$RUNSC_VERSION/runsc"
	if [ ! -x "$out" ]; then
		log "building runsc $RUNSC_VERSION (a few minutes on a cold module cache)"
		mkdir -p "$(dirname "$out")"
		(cd /tmp && CGO_ENABLED=0 GOBIN="$(dirname "$out")" GOFLAGS=-buildvcs=false \
			go install "gvisor.dev/gvisor/runsc@$RUNSC_VERSION")
	fi
	printf '%s\n' "$RUNSC_VERSION" >"$PREFIX/runsc.version"
	install_if_changed "$out" "$PREFIX/bin/runsc"
}

# versitygw: an S3-compatible gateway over a local directory, for the blob
# store's S3 tests. Pure Go, so CGO is off and the binary is static.
build_versitygw() {
	local out="$CACHE/versitygw-$VERSITYGW_VERSION/versitygw"
	if [ ! -x "$out" ]; then
		log "building versitygw $VERSITYGW_VERSION (a few minutes on a cold module cache)"
		mkdir -p "$(dirname "$out")"
		(cd /tmp && CGO_ENABLED=0 GOBIN="$(dirname "$out")" GOFLAGS=-buildvcs=false \
			go install -trimpath "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION")
	fi
	install_if_changed "$out" "$PREFIX/bin/versitygw"
	printf '%s\n' "$VERSITYGW_VERSION" >"$PREFIX/versitygw.version"
}

serve_deps() {
	apt_install "${serve_pkgs[@]}"
	with_lock runc build_runc
}

case $mode in
serve)
	serve_deps
	log "ok: runc $RUNC_VERSION in $PREFIX/bin"
	;;
runsc-background)
	if cmp -s "$CACHE/runsc-$RUNSC_VERSION/runsc" "$PREFIX/bin/runsc" 2>/dev/null; then
		exit 0
	fi
	runsc_log="$CACHE/runsc-$RUNSC_VERSION.log"
	# The build lock is taken here and handed to the build on fd 9, so it is
	# held when this returns: a server started next finds the gvisor tier
	# pending, not missing (corral serve --runsc-build-lock). The kernel
	# drops it when the build ends, however it ends. The wait covers a
	# server's brief look at the lock.
	exec 9>"$CACHE/runsc.lock"
	if ! flock -w 10 9; then
		log "runsc is already being built"
		exit 0
	fi
	log "building runsc in the background (log: $runsc_log); the gvisor tier answers 503 until it is installed"
	# setsid: the build outlives this script and the terminal's signals.
	CORRAL_CACHE=$CACHE CORRAL_PREFIX=$PREFIX setsid nice -n 19 "$0" runsc-locked >"$runsc_log" 2>&1 </dev/null &
	;;
image-background)
	# make run: the python image, built once per data directory (a build of
	# an image already built from the same recipe returns at once).
	apt_install mmdebstrap
	data=${CORRAL_DATA_DIR:-/var/lib/corral}
	corral="$(dirname "$0")/../bin/corral"
	lock="$data/images/tmp/build-python.lock"
	if "$corral" image ls --data-dir "$data" 2>/dev/null | grep -q '^python '; then
		exit 0
	fi
	image_log="$CACHE/image-python.log"
	log "building the python image in the background (log: $image_log); sandboxes that need it answer 503 image_pending until it is built"
	setsid nice -n 19 "$corral" image build --data-dir "$data" --build-cache "$CACHE" python >"$image_log" 2>&1 </dev/null &
	build=$!
	# Return once the build holds its lock, so a server started next finds
	# the image pending, not missing (images.Store.Building).
	for _ in $(seq 300); do
		if ! kill -0 "$build" 2>/dev/null; then
			break
		fi
		if [ -e "$lock" ] && ! flock -n -s "$lock" true 2>/dev/null; then
			break
		fi
		sleep 0.1
	done
	;;
runsc)
	with_lock runsc build_runsc
	;;
runsc-locked)
	# runsc-background's build, which inherits the held lock on fd 9.
	{ : >&9; } 2>/dev/null || { log "runsc-locked is started by runsc-background"; exit 2; }
	build_runsc
	;;
image)
	serve_deps
	apt_install mmdebstrap
	with_lock runsc build_runsc
	log "ok: runc $RUNC_VERSION, runsc $RUNSC_VERSION in $PREFIX/bin, mmdebstrap"
	;;
test)
	serve_deps
	apt_install "${test_pkgs[@]}"
	# npm vendors registry packages into the node image (images/node.toml); a
	# NodeSource nodejs ships its own, Debian's comes as a separate package.
	command -v node >/dev/null || apt_install nodejs
	command -v npm >/dev/null || apt_install npm
	# The stock E2B SDKs, pinned, for test/e2b and examples/e2b-js.
	CORRAL_CACHE=$CACHE "$(dirname "$0")/npm-deps.sh"
	with_lock runsc build_runsc
	with_lock versitygw build_versitygw
	log "ok: runc $RUNC_VERSION, runsc $RUNSC_VERSION, versitygw $VERSITYGW_VERSION in $PREFIX/bin"
	;;
*)
	log "usage: deps.sh [serve|runsc-background|image-background|image|test]"
	exit 2
	;;
esac
