#!/bin/sh
# The unit tests of the packages above the runtime, run as the unprivileged
# user nobody (scripts/as-nobody): they use the fake runtime and SQLite and
# need no root, runc, runsc or database server. A package's root-only tests
# sit apart in *_sandbox_test.go files; they skip here (and run in
# make test-go, as root). Any other skip fails, as does a run over 60 s.
# Coverage counts the fake sandboxes' agents too (scripts/as-nobody).
set -eu
cd "$(dirname "$0")/.."
pkgs="./internal/node ./internal/cluster ./internal/session ./internal/live ./internal/pool ./internal/notify ./internal/agent ./internal/kernel ./internal/runtime/fake ./internal/e2b ./internal/e2b/envd ./internal/e2b/interp"
go build ./... # compile errors first, outside the timing
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
status=0
go test -count=1 -cover -json -exec "$PWD/scripts/as-nobody" $pkgs >"$log" || status=$?
took=$(($(date +%s) - start))
/usr/bin/python3 - "$log" "$took" "$status" <<'PY'
import json, sys, collections
log, took, status = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = collections.defaultdict(str)
result = {}
cover = {}
for line in open(log):
    try:
        ev = json.loads(line)
    except ValueError:
        print(line, end="")
        continue
    key = (ev.get("Package", ""), ev.get("Test", ""))
    if ev["Action"] == "output":
        out[key] += ev["Output"]
        if not ev.get("Test") and ev["Output"].startswith("coverage:"):
            cover[key[0]] = ev["Output"].split()[1]
    elif ev.get("Test") and ev["Action"] in ("pass", "skip", "fail"):
        result[key] = ev["Action"]
# Count leaf tests: a test whose subtests all skip passes itself, so it
# would count as a pass.
parents = {(p, t.rsplit("/", 1)[0]) for p, t in result if "/" in t}
passed, skipped, failed = collections.Counter(), [], []
for k, r in sorted(result.items()):
    if r == "fail" and "/" not in k[1]:
        failed.append(k)
    if k in parents:
        continue
    if r == "pass":
        passed[k[0]] += 1
    elif r == "skip":
        skipped.append(k)
bad = [k for k in skipped if "_sandbox_test.go" not in out[k]]
for k in failed:
    for o in sorted(out):
        if o[0] == k[0] and (o[1] == k[1] or o[1].startswith(k[1] + "/")):
            print(out[o], end="")
for k in bad:
    print("skipped as non-root, outside a *_sandbox_test.go file: %s %s\n%s" % (k[0], k[1], out[k]))
for p in sorted(passed):
    print("%-50s %4d tests passed, coverage %s" % (p, passed[p], cover.get(p, "?")))
print("%d unit tests as nobody in %d s; %d root-only tests skipped; %d failed" % (sum(passed.values()), took, len(skipped) - len(bad), len(failed)))
if failed or bad or status != 0:
    sys.exit(1)
if took > 60:
    print("over 60 s")
    sys.exit(1)
PY
