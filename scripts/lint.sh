#!/usr/bin/env bash
# gofmt, go vet and staticcheck over the library module and each nested
# module (benchmarks/, integrations/*); fails on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.bin:$PATH"

unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.bin/*'))
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting (run gofmt -w):" >&2
  echo "$unformatted" >&2
  exit 1
fi
echo "lint: gofmt ok"
bash scripts/house.sh
echo "lint: house rules ok"
go vet ./...
staticcheck ./...
# Nested modules are not entered by ./...: check each in its own directory.
for dir in $(bash scripts/modules.sh); do
  (cd "$dir" && export GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=mod" && go vet ./... && staticcheck ./...)
done
echo "lint: go vet ok"
echo "lint: staticcheck ok"
