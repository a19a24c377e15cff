#!/usr/bin/env bash
# run.sh starts corral serve on 127.0.0.1:8080 with the embedded defaults
# (SQLite, in-process state, local blobs under /var/lib/corral) and a
# development API key, printed with a working curl line.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${CORRAL_DATA_DIR:-/var/lib/corral}
listen=${CORRAL_LISTEN:-127.0.0.1:8080}
mkdir -p "$data"
keyfile="$data/dev-api-key"
# In the shape the E2B SDKs accept (e2b_ and 40 hex digits, as corral key
# new mints them), so E2B_API_KEY=$(cat "$keyfile") works too; a key of an
# older shape is replaced.
if ! grep -qxE 'e2b_[0-9a-f]{40}' "$keyfile" 2>/dev/null; then
	(umask 077 && printf 'e2b_%s\n' "$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$keyfile")
fi
key=$(cat "$keyfile")
cat <<MSG

  corral serve on http://$listen  (development key in $keyfile)

  curl -s -H 'Authorization: Bearer $key' \\
       -d '{"language":"python","code":"print(sum(range(100)))"}' \\
       'http://$listen/v1/executions?wait=true'

MSG
export CORRAL_API_KEY="$key"
exec ./bin/corral serve --listen "$listen" --data-dir "$data"
