# Shared by the scripts in scripts/servers/ (sourced by each; not a server
# script itself, so scripts/test.sh does not pick it up).

# occkit_free_port prints a port nobody listens on at 127.0.0.1. Another
# process may take it before the caller binds it: callers retry on failure.
occkit_free_port() {
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

# occkit_start_on_free_port NAME LOG OUT TRIES READY CMD... starts a
# server on a free port: up to five times it asks for a port
# (occkit_free_port), runs CMD in the background with every @PORT@ in its
# words replaced by the port (its stdout and stderr to OUT, stdin from
# /dev/null), and polls READY PORT every 0.1 s, up to TRIES times, while
# the server runs. If another process took the port in between (or the
# server does not come up), it stops that server and tries a new port. It
# sets OCCKIT_PORT and OCCKIT_PID (the server's own pid), or prints the
# server's LOG and returns 1.
occkit_start_on_free_port() {
  local name=$1 log=$2 out=$3 tries=$4 ready=$5 port pid attempt i
  shift 5
  for attempt in 1 2 3 4 5; do
    port="$(occkit_free_port)"
    "${@//@PORT@/$port}" >"$out" 2>&1 </dev/null &
    pid=$!
    for ((i = 0; i < tries; i++)); do
      if "$ready" "$port" || ! kill -0 "$pid" 2>/dev/null; then break; fi
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null && "$ready" "$port"; then
      OCCKIT_PORT=$port OCCKIT_PID=$pid
      return 0
    fi
    echo "$name: start on port $port failed (attempt $attempt), retrying" >&2
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "$name: could not start the server; its log:" >&2
  cat "$log" >&2 || true
  return 1
}

# occkit_server_dir NAME makes the directory of one server, under
# $OCCKIT_RUN_DIR (set by scripts/test.sh) or a new temporary directory when
# run on its own. It sets OCCKIT_DIR to it and OCCKIT_REMOVE to what the
# stop command must remove (the server's directory, or the temporary
# directory it made).
occkit_server_dir() {
  local name=$1 run_dir="${OCCKIT_RUN_DIR:-}"
  if [ -z "$run_dir" ]; then
    run_dir="$(mktemp -d "${TMPDIR:-/tmp}/occkit-$name.XXXXXX")"
  fi
  OCCKIT_DIR="$(mktemp -d "$run_dir/$name.XXXXXX")"
  OCCKIT_REMOVE="$OCCKIT_DIR"
  if [ -z "${OCCKIT_RUN_DIR:-}" ]; then OCCKIT_REMOVE="$run_dir"; fi
}

# occkit_register_cleanup STOP appends the stop command to scripts/test.sh's
# `cleanups` when there is one (the script was sourced by it).
occkit_register_cleanup() {
  if declare -p cleanups >/dev/null 2>&1; then
    cleanups+=("$1")
  fi
}

# occkit_apt_install_no_start PACKAGE... installs Debian packages without
# letting them start their services: a temporary policy-rc.d (exit 101)
# tells invoke-rc.d and deb-systemd-invoke not to start anything. Returns
# apt-get's status.
occkit_apt_install_no_start() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  local made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod 0755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  local status=0
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq || status=$?
  if [ "$status" -eq 0 ]; then
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null || status=$?
  fi
  if [ -n "$made_policy" ]; then
    $sudo rm -f /usr/sbin/policy-rc.d
  fi
  return "$status"
}
