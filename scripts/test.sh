#!/usr/bin/env bash
# The body of `make test`: tools, lint, servers, then every test with the
# race detector. Servers are started by the scripts in scripts/servers/ (one
# per backend, each exporting the environment variable its tests read and
# registering its own cleanup); everything they start is stopped on exit,
# whether the tests pass or not.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.bin:$PATH"

bash scripts/ensure-tools.sh
bash scripts/lint.sh

OCCKIT_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/occkit-test.XXXXXX")"
export OCCKIT_RUN_DIR
cleanups=()
on_exit() {
  local status=$?
  for ((i=${#cleanups[@]}-1; i>=0; i--)); do
    eval "${cleanups[$i]}" || true
  done
  rm -rf "$OCCKIT_RUN_DIR"
  exit "$status"
}
trap on_exit EXIT INT TERM

# Each scripts/servers/<name>.sh is sourced: it installs its server if
# missing, starts it on a free loopback port under $OCCKIT_RUN_DIR, exports
# the variable its tests read, and appends its stop command to cleanups.
shopt -s nullglob
for s in scripts/servers/*.sh; do
  echo "test: starting $(basename "$s" .sh)" >&2
  # shellcheck source=/dev/null
  source "$s"
done
shopt -u nullglob

# The short fault suite (benchmarks/cmd/occfaults) checks that calls still
# get through while connections are dropped, slowed or cut; on two cores
# shared with another test binary and the lab's child processes, its
# servers can be starved for seconds and a run can see no call succeed. It
# runs alone, after the others.
#
# Nested modules (benchmarks/, whose lab, charts and browser test bring
# dependencies the library does not need, and integrations with
# dependencies of their own, such as integrations/gormocc and GORM) are not
# entered by ./...: each is tested in its own directory against the same
# servers, outside the workspace (GOWORK=off: go.work only lets the
# README's `go run ./benchmarks/cmd/occbench` and `go doc` of the nested
# modules work from the root; ./... still matches the library only). -mod=mod
# lets go.sum follow the root module's dependencies (each nested module
# replaces github.com/occkit/occkit with its path), which change without it.
go test -race -timeout 20m ./...
faults=github.com/occkit/occkit/benchmarks/cmd/occfaults
nested() { (cd "$1" && shift && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=mod" "$@"); }
for dir in $(bash scripts/modules.sh); do
  echo "test: module $dir" >&2
  if [ "$dir" = ./benchmarks ]; then
    nested "$dir" go test -race -timeout 20m $(nested "$dir" go list ./... | grep -vx "$faults")
  else
    nested "$dir" go test -race -timeout 20m ./...
  fi
done
echo "test: $faults alone" >&2
nested ./benchmarks go test -race -timeout 20m ./cmd/occfaults
