#!/usr/bin/env bash
# PostgreSQL for the tests of adapters/pgcas (and anything else that reads
# OCCKIT_PG_URL), and its streaming replica (OCCKIT_PG_REPLICA_URL).
#
# Sourced by scripts/test.sh: installs PostgreSQL 15 if it is missing,
# starts a throwaway server (its own initdb, 127.0.0.1 only, a free port,
# fsync off, unix socket inside its directory) under $OCCKIT_RUN_DIR, exports
# OCCKIT_PG_URL and appends its stop command to the array `cleanups`. When
# OCCKIT_PG_URL is already set, that server is used and nothing is started
# (set OCCKIT_PG_REPLICA_URL too, for the tests that read from a replica).
#
# The replica is a hot standby of that server: pg_basebackup -R through a
# replication slot, as the role occkit_replicator (pg_hba.conf lets it
# stream from 127.0.0.1), asynchronous streaming, a free port of its own,
# exported as OCCKIT_PG_REPLICA_URL. The script returns once the replica
# streams and has replayed a record the primary wrote after it started.
# It is started when OCCKIT_PG_REPLICA=1: the default when the script is
# sourced (make test; it adds about two seconds), not when it is run on
# its own (the lab's PostgreSQL runs alone) unless asked with --replica.
# One stop command stops both.
#
# Run on its own (`bash scripts/servers/postgres.sh [--replica]`), it
# starts the same server(s), leaves them running and prints the lines to
# use them:
#   export OCCKIT_PG_URL=postgres://...
#   export OCCKIT_PG_REPLICA_URL=postgres://...    (with --replica)
#   stop: <command that stops them and removes their directories>
# and one more, for fault-injection runs (benchmarks/cmd/occfaults):
#   restart: <command that restarts the primary on the same port and data,
#            after $OCCKIT_RESTART_DOWN seconds down (default 1); a
#            replica reconnects by itself>

# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

occkit_pg_main() {
  local pgbin=/usr/lib/postgresql/15/bin

  if [ -n "${OCCKIT_PG_URL:-}" ]; then
    echo "postgres: using OCCKIT_PG_URL from the environment; starting nothing" >&2
    return 0
  fi
  # A replica URL left in the environment would name another server's.
  unset OCCKIT_PG_REPLICA_URL

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

  local replica="${OCCKIT_PG_REPLICA:-1}"

  occkit_pg_as_postgres
  local as_pg=("${OCCKIT_AS_PG[@]}")

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
# A streaming replica may follow it (PostgreSQL 15's defaults, stated).
wal_level = replica
max_wal_senders = 4
max_replication_slots = 4
EOF
  if [ "$replica" = 1 ]; then
    # With synchronous_commit off, a commit's WAL reaches the replica once
    # the WAL writer has written it, after up to wal_writer_delay (200 ms
    # by default): 10 ms keeps the replica's lag near what a primary
    # with synchronous_commit on would give it.
    echo "wal_writer_delay = 10ms" >>"$dir/data/postgresql.conf"
  fi
  # The replica's role may stream from 127.0.0.1 (the first matching line
  # wins: this one, whatever initdb wrote below it).
  sed -i "1i host replication $OCCKIT_PG_REPLICATOR 127.0.0.1/32 trust" "$dir/data/pg_hba.conf"

  occkit_pg_start server "$dir" || return 1
  local port=$OCCKIT_PORT

  local stop
  stop="$(printf '%q ' "${as_pg[@]}" "$pgbin/pg_ctl" -D "$dir/data" -m immediate -w stop)>/dev/null 2>&1; rm -rf $(printf '%q' "$remove")"
  if [ "$replica" = 1 ]; then
    local rdir
    rdir="$(mktemp -d "$run_dir/postgres-replica.XXXXXX")"
    # The replica stops first (it would keep calling a stopped primary).
    stop="$(printf '%q ' "${as_pg[@]}" "$pgbin/pg_ctl" -D "$rdir/data" -m immediate -w stop)>/dev/null 2>&1; rm -rf $(printf '%q' "$rdir"); $stop"
    if ! occkit_pg_replica "$dir" "$port" "$rdir"; then
      eval "$stop" || true
      return 1
    fi
  fi
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

# The role the replica streams as.
OCCKIT_PG_REPLICATOR=occkit_replicator

# occkit_pg_replica PRIMARY_DIR PRIMARY_PORT REPLICA_DIR starts a hot
# standby of the primary in REPLICA_DIR (which the caller's stop command
# stops and removes), exports OCCKIT_PG_REPLICA_URL, and returns once the
# replica streams and has replayed a record the primary wrote after it
# started.
occkit_pg_replica() {
  local pdir=$1 pport=$2 rdir=$3 pgbin=/usr/lib/postgresql/15/bin
  occkit_pg_as_postgres
  local as_pg=("${OCCKIT_AS_PG[@]}")
  # psql on a unix socket (-h DIR -p PORT follow), one bare value out.
  local psql=("${as_pg[@]}" "$pgbin/psql" -X -q -A -t -v ON_ERROR_STOP=1 -U postgres -d postgres)

  chmod 0755 "$rdir"
  chown postgres:postgres "$rdir"
  "${as_pg[@]}" mkdir -p "$rdir/sock"

  "${psql[@]}" -h "$pdir/sock" -p "$pport" \
    -c "CREATE ROLE $OCCKIT_PG_REPLICATOR WITH REPLICATION LOGIN" >"$rdir/setup.log" 2>&1 || {
    echo "postgres: creating the replication role failed:" >&2
    cat "$rdir/setup.log" >&2
    return 1
  }
  # -R writes standby.signal and primary_conninfo; -C -S makes the slot
  # that keeps the primary's WAL until the replica has it; -X stream
  # copies the WAL written during the copy; -N: no fsync (throwaway).
  "${as_pg[@]}" "$pgbin/pg_basebackup" -h 127.0.0.1 -p "$pport" -U "$OCCKIT_PG_REPLICATOR" \
    -D "$rdir/data" -R -C -S occkit_replica -X stream -c fast -N >>"$rdir/setup.log" 2>&1 || {
    echo "postgres: pg_basebackup for the replica failed:" >&2
    cat "$rdir/setup.log" >&2
    return 1
  }
  # The copied postgresql.conf is the primary's; later lines win.
  cat >>"$rdir/data/postgresql.conf" <<EOF

# occkit test replica: a hot standby of the server above, streaming.
unix_socket_directories = '$rdir/sock'
shared_buffers = 32MB
hot_standby = on
# The primary's vacuum keeps the rows the replica's reads still see,
# instead of the replica cancelling those reads.
hot_standby_feedback = on
cluster_name = 'occkit_replica'
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 1s
EOF

  occkit_pg_start replica "$rdir" || return 1
  local port=$OCCKIT_PORT

  # A record written now (a WAL message: no table, nothing to drop); the
  # replica has caught up once it has replayed up to its end.
  local lsn
  lsn="$("${psql[@]}" -h "$pdir/sock" -p "$pport" -c "SELECT pg_logical_emit_message(false, 'occkit', 'replica probe')")" || {
    echo "postgres: writing the replica's probe record failed" >&2
    return 1
  }
  local i streaming="" replayed=""
  for ((i = 0; i < 300; i++)); do
    streaming="$("${psql[@]}" -h "$pdir/sock" -p "$pport" \
      -c "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'occkit_replica' AND state = 'streaming'" 2>/dev/null || true)"
    replayed="$("${psql[@]}" -h "$rdir/sock" -p "$port" \
      -c "SELECT pg_is_in_recovery() AND pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn" 2>/dev/null || true)"
    if [ "$streaming" = 1 ] && [ "$replayed" = t ]; then
      break
    fi
    sleep 0.1
  done
  if [ "$streaming" != 1 ] || [ "$replayed" != t ]; then
    echo "postgres: the replica did not catch up in 30 s (streaming: '$streaming', replayed: '$replayed'); its log:" >&2
    tail -n 30 "$rdir/server.log" >&2 || true
    return 1
  fi
  OCCKIT_PG_REPLICA_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  export OCCKIT_PG_REPLICA_URL
  echo "postgres: streaming replica on 127.0.0.1:$port (data in $rdir)" >&2
}

# occkit_pg_as_postgres sets the array OCCKIT_AS_PG to the prefix that runs
# a command as the postgres user (none when this is that user).
occkit_pg_as_postgres() {
  OCCKIT_AS_PG=()
  if [ "$(id -u)" -eq 0 ]; then
    OCCKIT_AS_PG=(runuser -u postgres --)
  elif [ "$(id -un)" != postgres ]; then
    OCCKIT_AS_PG=(sudo -u postgres --)
  fi
}

# occkit_pg_start WHAT DIR starts the server whose data is in DIR/data
# (log in DIR/server.log) on a free port: it asks the kernel for one, then
# starts on it; if another process takes it in between, it starts again on
# a new one. It sets OCCKIT_PORT, or prints the log and returns 1. WHAT
# ("server", "replica") names it in messages.
occkit_pg_start() {
  local what=$1 dir=$2 port attempt
  occkit_pg_as_postgres
  for attempt in 1 2 3 4 5; do
    port="$(occkit_free_port)"
    if "${OCCKIT_AS_PG[@]}" /usr/lib/postgresql/15/bin/pg_ctl -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port" start >/dev/null 2>&1; then
      OCCKIT_PORT=$port
      return 0
    fi
    echo "postgres: $what start on port $port failed (attempt $attempt), retrying" >&2
  done
  echo "postgres: could not start the $what; its log:" >&2
  cat "$dir/server.log" >&2 || true
  return 1
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
  unset OCCKIT_PG_URL OCCKIT_PG_REPLICA_URL
  OCCKIT_PG_REPLICA="${OCCKIT_PG_REPLICA:-0}"
  case "${1:-}" in
  "") ;;
  --replica) OCCKIT_PG_REPLICA=1 ;;
  *)
    echo "usage: bash $0 [--replica]" >&2
    exit 2
    ;;
  esac
  occkit_pg_main
  echo "export OCCKIT_PG_URL='$OCCKIT_PG_URL'"
  if [ -n "${OCCKIT_PG_REPLICA_URL:-}" ]; then
    echo "export OCCKIT_PG_REPLICA_URL='$OCCKIT_PG_REPLICA_URL'"
  fi
  echo "stop: $OCCKIT_PG_STOP"
  echo "restart: $OCCKIT_PG_RESTART"
else
  occkit_pg_main
fi
