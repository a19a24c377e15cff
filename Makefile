# Corral: two commands on a fresh Debian machine, as root:
#   make run    installs what is missing and starts corral serve on 127.0.0.1:8080
#   make test   the whole suite
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin/corral
# The agent inside every sandbox is this same binary: it must be static.
export CGO_ENABLED := 0

.PHONY: all build deps run test test-unit test-root fuzz test-go test-sdk sweep leakcheck lint bench clean image test-image test-helm

all: build

# Everything the suite needs (scripts/deps.sh test).
deps:
	./scripts/deps.sh test

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/corral
	$(GO) build -trimpath -o bin/corral-agent ./cmd/corral-agent

# Only what serving needs, runc's build beside corral's; runsc builds in the
# background after, and the gvisor tier answers 503 (retryable) until then.
run:
	@./scripts/deps.sh serve & deps=$$!; $(MAKE) --no-print-directory build; built=$$?; wait $$deps && [ $$built = 0 ]
	./scripts/deps.sh runsc-background
	./scripts/deps.sh image-background
	./scripts/run.sh

# The suite in two lanes (scripts/lanes.py, docs/testing.md): the unit lane
# as nobody, its packages in parallel; then the root lane's sandbox tests,
# strict (a root-only test fails instead of skipping), the light packages
# two at a time and the others one at a time: they start CPU-bound
# sandboxes, and timing checks such as "a 1 s timeout is answered within
# 1.5 s" need the cores. The five slowest packages are printed at the end;
# bin/test-timings.txt lists them all.
test: deps build sweep lint test-unit fuzz test-root test-sdk test-helm test-image leakcheck
	@/usr/bin/python3 scripts/lanes.py report

# Every package with a test outside its *_sandbox_test.go files, as the
# user nobody: no root, runtime or database server (scripts/test-unit.sh).
test-unit:
	./scripts/test-unit.sh

# Every fuzz target (func FuzzX in a _test.go file) fuzzed for a few
# seconds, one go test -fuzz run each, as nobody; a failing input is written
# to the package's testdata/fuzz/FuzzX and fails the run. The unit lane has
# already run every seed. CORRAL_FUZZTIME=60 fuzzes each for a minute.
fuzz:
	/usr/bin/python3 scripts/lanes.py fuzz

# The tests of *_sandbox_test.go files, as root with CORRAL_TEST_STRICT=1.
test-root:
	/usr/bin/python3 scripts/lanes.py root

# Every Go test of the module: both lanes. The old name of what is now
# test-unit and test-root, kept for one release.
test-go: test-unit test-root

test-sdk:
	cd sandbox && $(GO) vet ./... && $(GO) test -count=1 ./...

# The Helm chart through Helm's Go SDK (deploy/helm/test, its own module so
# the corral module does not pull Helm and client-go): lint, rendering against
# golden files (go test -update rewrites them), strict decoding into the
# k8s.io/api types, and the rendered configuration through bin/corral's
# config check (the image's corral is built from the same source).
test-helm: build
	cd deploy/helm/test && $(GO) vet ./... && CORRAL_BIN=$(CURDIR)/bin/corral $(GO) test -count=1 ./...

# Before everything: remove what an earlier run, killed half-way, left of
# its sandboxes (it prints each), so that the leak check after this run
# sees only this run's. Not while another suite runs on the machine.
sweep:
	$(GO) run ./test/leakcheck/sweep

# After everything: no sandbox, cgroup, mount, loop device or process of
# the suite may remain (TestNothingLeft); then TestSweep checks that make
# sweep finds and removes each kind of leftover.
leakcheck:
	CORRAL_TEST_STRICT=1 CORRAL_LEAKCHECK=1 $(GO) test -count=1 -v -run 'TestNothingLeft|TestSweep' ./test/leakcheck

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Corral's own container image (deploy/image, docs/kubernetes.md), without
# a Docker daemon: mmdebstrap, the pinned runtimes and the static binaries,
# written to $(IMAGE_OUT)/oci (an OCI layout) and $(IMAGE_OUT)/corral-image.tar
# (docker load). IMAGE_LOCK=check fails when Debian resolves other package
# versions than deploy/image/packages.lock; IMAGE_LOCK=update records them.
IMAGE_OUT ?= bin/image
IMAGE_REF ?= corralhq/corral:dev
IMAGE_LOCK ?= check
# What the build needs (mmdebstrap, runc, runsc); IMAGE_DEPS=true skips it
# on a machine already provisioned.
IMAGE_DEPS ?= ./scripts/deps.sh image
# The image's binaries are built here, not by make build, with what decides
# their bytes pinned: the Go release of go.mod (GOTOOLCHAIN; it also writes
# the gzip stream), no VCS stamp, -trimpath, no cgo.
IMAGE_GO := CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=go$(shell sed -n 's/^go //p' go.mod) $(GO)
image:
	$(IMAGE_DEPS)
	$(IMAGE_GO) build -trimpath -o $(IMAGE_OUT)/bin/corral ./cmd/corral
	$(IMAGE_GO) build -trimpath -o $(IMAGE_OUT)/bin/corral-agent ./cmd/corral-agent
	$(IMAGE_GO) run ./deploy/image -lock-mode $(IMAGE_LOCK) -out $(IMAGE_OUT) -ref $(IMAGE_REF) \
		-corral $(IMAGE_OUT)/bin/corral -agent $(IMAGE_OUT)/bin/corral-agent

# Corral inside its own image under runc, as a privileged pod (test/container):
# both tiers, the limits' verdicts, nothing left on the host. make test runs
# it before the leak check; the image is rebuilt from the checkout first
# (about four minutes on two cores), with a package drift reported rather
# than fatal.
test-image:
	$(MAKE) --no-print-directory image IMAGE_LOCK=warn
	CORRAL_TEST_STRICT=1 CORRAL_TEST_IMAGE=1 CORRAL_IMAGE=$(abspath $(IMAGE_OUT))/oci $(GO) test -count=1 -v -timeout 10m ./test/container

# The warm-pool harness and the live sandbox rows (docs/bench.md): ratios
# to a bare python3 spawn measured in the same run; about 12 minutes once
# the python image is built (6 more the first time on a machine).
bench: build
	scripts/npm-deps.sh
	CORRAL_TEST_STRICT=1 $(GO) test -run '^$$' -bench . -benchtime 80s -count 1 -timeout 40m ./bench/...

clean:
	rm -rf bin
