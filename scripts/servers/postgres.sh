#!/usr/bin/env bash
# PostgreSQL for the tests of adapters/pgcas (and anything else that reads
# OCCKIT_PG_URL).
#
# Sourced by scripts/test.sh: installs PostgreSQL 15 if it is missing,
# starts a throwaway server (its own initdb, 127.0.0.1 only, a free port,
# fsync off, unix socket inside its directory) under $OCCKIT_RUN_DIR, exports
# OCCKIT_PG_URL and appends its stop command to the array `cleanups`. When
# OCCKIT_PG_URL is already set, that server is used and nothing is started.
#
# Run on its own (`bash scripts/servers/postgres.sh`), it starts the same
# server, leaves it running and prints the two lines to use it:
#   export OCCKIT_PG_URL=postgres://...
#   stop: <command that stops it and removes its directory>
# and a third, for fault-injection runs (benchmarks/cmd/occfaults):
#   restart: <command that restarts it on the same port and data, after
#            $OCCKIT_RESTART_DOWN seconds down (default 1)>

# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

occkit_pg_main() {
  local pgbin=/usr/lib/postgresql/15/bin

  if [ -n "${OCCKIT_PG_URL:-}" ]; then
    echo "postgres: using OCCKIT_PG_URL from the environment; starting nothing" >&2
    return 0
  fi

  if [ ! -x "$pgbin/postgres" ]; then
    occkit_pg_install || return 1
  fi

  local run_dir="${OCCKIT_RUN_DIR:-}"
  if [ -z "$run_dir" ]; then
    run_dir="$(mktemp -d "${TMPDIR:-/tmp}/occkit-pg.XXXXXX")"
  fi
  # The server runs as the postgres user, which must reach its directory
  # through $run_dir (mktemp makes it 0700): allow traversal, not listing.
  chmod o+x "$run_dir"

  local dir
  dir="$(mktemp -d "$run_dir/postgres.XXXXXX")"
  # What the stop command removes: the server's directory, or all of
  # $run_dir when this script made it.
  local remove="$dir"
  if [ -z "${OCCKIT_RUN_DIR:-}" ]; then remove="$run_dir"; fi
  chmod 0755 "$dir"
  mkdir -p "$dir/sock"
  chown -R postgres:postgres "$dir"

  local as_pg=()
  if [ "$(id -u)" -eq 0 ]; then
    as_pg=(runuser -u postgres --)
  elif [ "$(id -un)" != postgres ]; then
    as_pg=(sudo -u postgres --)
  fi

  "${as_pg[@]}" "$pgbin/initdb" -D "$dir/data" -U postgres --auth=trust \
    -E UTF8 --locale=C.UTF-8 --no-sync >"$dir/initdb.log" 2>&1 || {
    echo "postgres: initdb failed:" >&2
    cat "$dir/initdb.log" >&2
    return 1
  }
  cat >>"$dir/data/postgresql.conf" <<EOF

# occkit test server: loopback only, fast and unsafe (throwaway data).
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 200
shared_buffers = 128MB
EOF

  # A free port: ask the kernel for one, then start on it; if another
  # process takes it in between, start again on a new one.
  local port="" attempt
  for attempt in 1 2 3 4 5; do
    port="$(occkit_free_port)"
    if "${as_pg[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port" start >/dev/null 2>&1; then
      break
    fi
    echo "postgres: start on port $port failed (attempt $attempt), retrying" >&2
    port=""
  done
  if [ -z "$port" ]; then
    echo "postgres: could not start the server; its log:" >&2
    cat "$dir/server.log" >&2 || true
    return 1
  fi

  local stop
  stop="$(printf '%q ' "${as_pg[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m immediate -w stop)>/dev/null 2>&1; rm -rf $(printf '%q' "$remove")"
  # The restart command (for fault runs): a clean stop (sessions are
  # terminated; everything committed is kept), $OCCKIT_RESTART_DOWN seconds
  # down (default 1), then a start on the same port with the same data.
  local restart
  restart="$(printf '%q ' "${as_pg[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m fast -w stop)>/dev/null 2>&1; sleep \"\${OCCKIT_RESTART_DOWN:-1}\"; $(printf '%q ' "${as_pg[@]}" "$pgbin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "-p $port" start)>/dev/null 2>&1 || { tail -n 20 $(printf '%q' "$dir/server.log") >&2; exit 1; }"
  OCCKIT_PG_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  export OCCKIT_PG_URL
  occkit_register_cleanup "$stop"
  OCCKIT_PG_STOP="$stop"
  OCCKIT_PG_RESTART="$restart"
  echo "postgres: PostgreSQL 15 on 127.0.0.1:$port (data in $dir)" >&2
}

# occkit_pg_install installs Debian's postgresql-15 without starting the
# cluster service Debian would otherwise start (policy-rc.d exit 101 tells
# invoke-rc.d and deb-systemd-invoke not to start services).
occkit_pg_install() {
  echo "postgres: installing postgresql-15 from Debian's packages" >&2
  local status=0
  occkit_apt_install_no_start postgresql-15 || status=$?
  if [ "$status" -ne 0 ] || [ ! -x /usr/lib/postgresql/15/bin/postgres ]; then
    echo "postgres: installing postgresql-15 failed" >&2
    return 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Run on its own: start, print how to use and stop it, leave it running.
  set -euo pipefail
  unset OCCKIT_PG_URL
  occkit_pg_main
  echo "export OCCKIT_PG_URL='$OCCKIT_PG_URL'"
  echo "stop: $OCCKIT_PG_STOP"
  echo "restart: $OCCKIT_PG_RESTART"
else
  occkit_pg_main
fi
