#!/usr/bin/env bash
# run.sh starts the server for local use. Until `corral serve` exists it runs
# a demo execution with `corral run`.
set -euo pipefail
cd "$(dirname "$0")/.."
printf 'print(sum(range(100)))\n' | ./bin/corral run --lang python -
