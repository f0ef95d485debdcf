#!/usr/bin/env bash
# Runs every Go fuzz target of the root module for FUZZTIME each (default
# 10s; FUZZ=regexp picks targets by name), one target at a time (go test -fuzz takes one target per run), and
# fails on the first target that finds a failing input; the input is left
# in the package's testdata/fuzz/ for `go test` to replay. `make test`
# replays the seed corpora only; this is the step that looks for new
# inputs (docs/testing.md, "Fuzzing").
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
status=0
n=0
while IFS=: read -r file name; do
  dir=./$(dirname "$file")
  n=$((n + 1))
  if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" >/tmp/occkit-fuzz.$$ 2>&1; then
    echo "fuzz: $dir $name FAILED:" >&2
    tail -n 30 /tmp/occkit-fuzz.$$ >&2
    status=1
  else
    echo "fuzz: $dir $name ok ($fuzztime)"
  fi
done < <(git grep -o -E '^func Fuzz[A-Za-z0-9_]*' -- '*_test.go' ':!benchmarks' ':!integrations' | sed 's/func //' | awk -F: -v re="${FUZZ:-.}" '$2 ~ re')
rm -f /tmp/occkit-fuzz.$$
echo "fuzz: $n targets"
if [ "$n" -eq 0 ]; then
  echo "fuzz: no fuzz target matches FUZZ=${FUZZ:-}" >&2
  exit 1
fi
exit "$status"
