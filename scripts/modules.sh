#!/usr/bin/env bash
# Prints the directories of the nested Go modules (every go.mod below the
# root one: benchmarks/ and integrations/*), one a line: make test and make
# lint run them one by one, since `go test ./...` from the root does not
# enter them.
set -euo pipefail
cd "$(dirname "$0")/.."
find . -name go.mod -not -path ./go.mod -not -path './.bin/*' -not -path '*/node_modules/*' -not -path '*/testdata/*' -print \
  | sed 's|/go.mod$||' | sort
