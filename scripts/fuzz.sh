#!/usr/bin/env bash
# Runs every Go fuzz target of the root module for FUZZTIME each (default
# 10s; FUZZ=regexp picks targets by name), one target at a time (go test
# -fuzz takes one target per run), and exits 1 if any target found a
# failing input or none matched; a failing input is left in its package's
# testdata/fuzz/ for `go test` to replay. `make test` replays the seed
# corpora only; this is the step that looks for new inputs
# (docs/testing.md, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
targets=$(git grep -o -E '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' ':!benchmarks' ':!integrations' | sed 's/func //')
targets=$(awk -F: -v re="${FUZZ:-.}" '$2 ~ re' <<<"$targets")
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz target matches FUZZ=${FUZZ:-.}" >&2
  exit 1
fi
status=0
n=0
while IFS=: read -r file name; do
  dir=./$(dirname "$file")
  n=$((n + 1))
  if go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" >"$log" 2>&1; then
    echo "fuzz: $dir $name ok ($fuzztime)"
  else
    echo "fuzz: $dir $name FAILED:" >&2
    tail -n 30 "$log" >&2
    status=1
  fi
done <<<"$targets"
echo "fuzz: $n targets"
exit "$status"
