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
