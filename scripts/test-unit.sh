#!/bin/sh
# The unit lane: every package with a test outside its *_sandbox_test.go
# files, run in parallel as the unprivileged user nobody (scripts/as-nobody)
# over the fake runtime, SQLite and throwaway servers: no root, runc or
# runsc. Root-only tests sit in *_sandbox_test.go files; they skip here
# (and run in make test-root). Any other skip fails, as does a package whose
# tests run longer than the budget. Coverage counts the fake sandboxes'
# agents too. scripts/lanes.py says how.
set -eu
cd "$(dirname "$0")/.."
exec /usr/bin/python3 scripts/lanes.py unit
