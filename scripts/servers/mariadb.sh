#!/usr/bin/env bash
# MariaDB for the tests of adapters/sqlcas (and anything else that reads
# OCCKIT_MYSQL_DSN).
#
# Sourced by scripts/test.sh: installs Debian's mariadb-server if it is
# missing (without starting the distribution's own service), starts a
# throwaway server (its own mariadb-install-db data directory, 127.0.0.1
# only, a free port, unix socket inside its directory, no durability: the
# data is thrown away) under $OCCKIT_RUN_DIR, creates a user `occkit` with
# every privilege (from 127.0.0.1, no password), exports OCCKIT_MYSQL_DSN
# (a go-sql-driver/mysql DSN) and appends its stop command to the array
# `cleanups`. When OCCKIT_MYSQL_DSN is already set, that server is used and
# nothing is started.
#
# Run on its own (`bash scripts/servers/mariadb.sh`), it starts the same
# server, leaves it running and prints the lines to use it:
#   export OCCKIT_MYSQL_DSN='occkit@tcp(127.0.0.1:PORT)/occkit'
#   stop: <command that stops it and removes its directory>
#   restart: <command that restarts it on the same port and data, after
#            $OCCKIT_RESTART_DOWN seconds down (default 1)>

# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

occkit_mariadb_main() {
  if [ -n "${OCCKIT_MYSQL_DSN:-}" ]; then
    echo "mariadb: using OCCKIT_MYSQL_DSN from the environment; starting nothing" >&2
    return 0
  fi

  if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    occkit_mariadb_install || return 1
  fi
  local bin=/usr/sbin/mariadbd
  if [ ! -x "$bin" ]; then bin="$(command -v mariadbd)"; fi
  local client
  client="$(command -v mariadb || command -v mysql)"

  occkit_server_dir mariadb
  local dir="$OCCKIT_DIR" remove="$OCCKIT_REMOVE"
  local user
  user="$(id -un)"

  mariadb-install-db --no-defaults --datadir="$dir/data" --user="$user" \
    --auth-root-authentication-method=socket --skip-test-db \
    >"$dir/install.log" 2>&1 || {
    echo "mariadb: mariadb-install-db failed:" >&2
    cat "$dir/install.log" >&2
    return 1
  }

  # The server's arguments, without the port. Loopback only, the socket in
  # its directory, small buffers, no durability (throwaway data).
  local args=(--no-defaults --user="$user" --datadir="$dir/data"
    --socket="$dir/mariadb.sock" --pid-file="$dir/mariadb.pid"
    --bind-address=127.0.0.1 --skip-name-resolve --log-error="$dir/server.log"
    --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --sync-binlog=0
    --innodb-buffer-pool-size=128M --max-connections=500
    --innodb-lock-wait-timeout=10)

  # occkit_mariadb_up PORT: the server answers on its socket.
  occkit_mariadb_up() { occkit_mariadb_ping "$client" "$dir"; }
  occkit_start_on_free_port mariadb "$dir/server.log" /dev/null 300 occkit_mariadb_up "$bin" "${args[@]}" --port=@PORT@ || return 1
  local port=$OCCKIT_PORT pid=$OCCKIT_PID
  disown "$pid" 2>/dev/null || true # no "Killed" job notice when the stop command runs

  "$client" --no-defaults --socket="$dir/mariadb.sock" -u root -e "
    CREATE USER 'occkit'@'127.0.0.1';
    GRANT ALL PRIVILEGES ON *.* TO 'occkit'@'127.0.0.1' WITH GRANT OPTION;
    CREATE DATABASE occkit;" || {
    echo "mariadb: creating the occkit user failed" >&2
    kill "$pid" 2>/dev/null || true
    return 1
  }

  local stop
  # The restart command (for fault runs): a clean shutdown (sessions end;
  # everything committed is kept), $OCCKIT_RESTART_DOWN seconds down
  # (default 1), then a start on the same port with the same data. The
  # server's pid changes, so the stop command kills by the pid file too.
  local restart
  restart="kill \$(cat $(printf '%q' "$dir/mariadb.pid")) 2>/dev/null; while [ -e $(printf '%q' "$dir/mariadb.pid") ]; do sleep 0.1; done; sleep \"\${OCCKIT_RESTART_DOWN:-1}\"; ( $(printf '%q ' "$bin" "${args[@]}" --port="$port") >/dev/null 2>&1 & ); for i in \$(seq 1 300); do $(printf '%q ' "$client" --no-defaults --socket="$dir/mariadb.sock" -u root -e 'SELECT 1') >/dev/null 2>&1 && exit 0; sleep 0.1; done; tail -n 20 $(printf '%q' "$dir/server.log") >&2; exit 1"
  stop="kill -9 \$(cat $(printf '%q' "$dir/mariadb.pid") 2>/dev/null) $pid 2>/dev/null; rm -rf $(printf '%q' "$remove")"
  OCCKIT_MYSQL_DSN="occkit@tcp(127.0.0.1:$port)/occkit"
  export OCCKIT_MYSQL_DSN
  occkit_register_cleanup "$stop"
  OCCKIT_MYSQL_STOP="$stop"
  OCCKIT_MYSQL_RESTART="$restart"
  echo "mariadb: $("$bin" --version | awk '{print $3}') on 127.0.0.1:$port (data in $dir)" >&2
}

# occkit_mariadb_ping CLIENT DIR reports whether the server in DIR answers
# on its socket.
occkit_mariadb_ping() {
  "$1" --no-defaults --socket="$2/mariadb.sock" -u root -e 'SELECT 1' >/dev/null 2>&1
}

# occkit_mariadb_install installs Debian's mariadb-server without starting
# its service.
occkit_mariadb_install() {
  echo "mariadb: installing mariadb-server from Debian's packages" >&2
  local status=0
  occkit_apt_install_no_start mariadb-server mariadb-client || status=$?
  if [ "$status" -ne 0 ] || { ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; }; then
    echo "mariadb: installing mariadb-server failed" >&2
    return 1
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Run on its own: start, print how to use and stop it, leave it running.
  set -euo pipefail
  unset OCCKIT_MYSQL_DSN
  occkit_mariadb_main
  echo "export OCCKIT_MYSQL_DSN='$OCCKIT_MYSQL_DSN'"
  echo "stop: $OCCKIT_MYSQL_STOP"
  echo "restart: $OCCKIT_MYSQL_RESTART"
else
  occkit_mariadb_main
fi
