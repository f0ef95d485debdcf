#!/usr/bin/env bash
# dynalite, a DynamoDB-compatible server (Node.js, in memory), for the tests
# of adapters/dynamocas (and anything else that reads OCCKIT_DYNALITE_URL).
# The other test server, minidyn, runs inside the Go tests and needs
# nothing from here.
#
# Sourced by scripts/test.sh: installs the dynalite version pinned in
# internal/dynamotest/dynalite/package-lock.json (`npm ci`, into that
# folder's node_modules) if it is missing, starts `node .../dynalite` on a
# free 127.0.0.1 port under $OCCKIT_RUN_DIR, waits until it answers,
# exports OCCKIT_DYNALITE_URL and appends its stop command to the array
# `cleanups`. When OCCKIT_DYNALITE_URL is already set, that server is used
# and nothing is started.
#
# Node runs directly, not through npx: killing an npx wrapper leaves its
# node child running.
#
# Run on its own (`bash scripts/servers/dynalite.sh`), it starts the same
# server, leaves it running and prints the two lines to use it:
#   export OCCKIT_DYNALITE_URL=http://127.0.0.1:PORT
#   stop: <command that stops it and removes its directory>

# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

occkit_dynalite_main() {
  if [ -n "${OCCKIT_DYNALITE_URL:-}" ]; then
    echo "dynalite: using OCCKIT_DYNALITE_URL from the environment; starting nothing" >&2
    return 0
  fi

  local root pkg
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  pkg="$root/internal/dynamotest/dynalite"
  local bin="$pkg/node_modules/dynalite/cli.js"

  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    occkit_dynalite_install_node || return 1
  fi
  if [ ! -f "$bin" ]; then
    echo "dynalite: installing the pinned dynalite with npm ci in $pkg" >&2
    (cd "$pkg" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >&2 || {
      echo "dynalite: npm ci failed" >&2
      return 1
    }
  fi
  if [ ! -f "$bin" ]; then
    echo "dynalite: $bin is missing after npm ci" >&2
    return 1
  fi

  occkit_server_dir dynalite
  local dir=$OCCKIT_DIR remove=$OCCKIT_REMOVE

  # serve.js runs $bin, surviving clients that hang up mid-request.
  # dynalite is ready in about 0.2 s; allow 15 s on a loaded machine.
  occkit_start_on_free_port dynalite "$dir/dynalite.log" "$dir/dynalite.log" 150 occkit_dynalite_ready \
    node "$pkg/serve.js" --host 127.0.0.1 --port @PORT@ --createTableMs 0 --deleteTableMs 0 --updateTableMs 0 || return 1
  local port=$OCCKIT_PORT pid=$OCCKIT_PID

  local stop
  stop="kill $pid 2>/dev/null; for _ in \$(seq 1 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill -9 $pid 2>/dev/null; rm -rf $(printf '%q' "$remove")"
  OCCKIT_DYNALITE_URL="http://127.0.0.1:$port"
  export OCCKIT_DYNALITE_URL
  occkit_register_cleanup "$stop"
  OCCKIT_DYNALITE_STOP="$stop"
  echo "dynalite: $(node -p "require('$pkg/node_modules/dynalite/package.json').version" 2>/dev/null || echo '?') on 127.0.0.1:$port (pid $pid, log in $dir)" >&2
}

# occkit_dynalite_ready PORT reports whether a server listens on PORT.
occkit_dynalite_ready() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# occkit_dynalite_install_node installs Node.js and npm from Debian's
# packages when the machine has none.
occkit_dynalite_install_node() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "dynalite: node or npm is missing; installing Debian's nodejs and npm" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null || {
    echo "dynalite: installing nodejs and npm failed" >&2
    return 1
  }
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Run on its own: start, print how to use and stop it, leave it running.
  set -euo pipefail
  unset OCCKIT_DYNALITE_URL
  occkit_dynalite_main
  echo "export OCCKIT_DYNALITE_URL='$OCCKIT_DYNALITE_URL'"
  echo "stop: $OCCKIT_DYNALITE_STOP"
else
  occkit_dynalite_main
fi
