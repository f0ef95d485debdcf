#!/usr/bin/env bash
# Redis for the tests of adapters/rediscas (and anything else that reads
# OCCKIT_REDIS_URL).
#
# Sourced by scripts/test.sh: installs Debian's redis-server if it is
# missing (and makes sure the distribution's own redis service is not left
# running), starts a throwaway server (127.0.0.1 only, a free port, no
# persistence, its directory under $OCCKIT_RUN_DIR), waits for PONG, exports
# OCCKIT_REDIS_URL and appends its stop command to the array `cleanups`.
# When OCCKIT_REDIS_URL is already set, that server is used and nothing is
# started.
#
# Run on its own (`bash scripts/servers/redis.sh`), it starts the same
# server, leaves it running and prints the two lines to use it:
#   export OCCKIT_REDIS_URL=redis://127.0.0.1:PORT
#   stop: <command that stops it and removes its directory>
# and a third, for fault-injection runs (benchmarks/cmd/occfaults):
#   restart: <command that restarts it on the same port, keeping its data
#            across the restart, after $OCCKIT_RESTART_DOWN seconds down
#            (default 1)>

# shellcheck source=lib/redis.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/redis.sh"

occkit_redis_main() {
  local bin=/usr/bin/redis-server

  if [ -n "${OCCKIT_REDIS_URL:-}" ]; then
    echo "redis: using OCCKIT_REDIS_URL from the environment; starting nothing" >&2
    return 0
  fi

  if [ ! -x "$bin" ]; then
    occkit_redis_install || return 1
  fi

  occkit_server_dir redis
  local dir=$OCCKIT_DIR remove=$OCCKIT_REMOVE

  local args=(--port @PORT@ --bind 127.0.0.1 --save '' --appendonly no
    --dir "$dir" --daemonize no --logfile "$dir/server.log"
    --pidfile "$dir/redis.pid")
  occkit_start_on_free_port redis "$dir/server.log" /dev/null 100 occkit_redis_ping "$bin" "${args[@]}" || return 1
  local port=$OCCKIT_PORT pid=$OCCKIT_PID
  args=("${args[@]//@PORT@/$port}")

  # The restart command (for fault runs), a script in the server's
  # directory: SHUTDOWN SAVE (the server writes its data to dump.rdb in its
  # directory and exits; clients' connections break), $OCCKIT_RESTART_DOWN
  # seconds down (default 1), then a start with the same arguments, which
  # loads dump.rdb. The server runs without persistence otherwise.
  occkit_redis_restart_script "$dir" "$bin" "$port" "${args[@]}" >"$dir/restart.sh"
  local restart
  restart="bash $(printf '%q' "$dir/restart.sh")"

  # Stop by pid (this server only: the one in its pid file, which a restart
  # replaces, or the one started here), wait for it to exit, remove its
  # files.
  local stop
  stop="p=\$(cat $(printf '%q' "$dir/redis.pid") 2>/dev/null || echo $pid); kill \$p 2>/dev/null; for _ in \$(seq 1 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; kill -9 \$p 2>/dev/null; rm -rf $(printf '%q' "$remove")"
  OCCKIT_REDIS_URL="redis://127.0.0.1:$port"
  export OCCKIT_REDIS_URL
  occkit_register_cleanup "$stop"
  OCCKIT_REDIS_STOP="$stop"
  OCCKIT_REDIS_RESTART="$restart"
  echo "redis: $("$bin" --version | awk '{print $3}' | sed 's/^v=//') on 127.0.0.1:$port (pid $pid, files in $dir)" >&2
}

# occkit_redis_restart_script DIR BIN PORT ARGS... prints a bash script
# that restarts the server of DIR (see occkit_redis_main).
occkit_redis_restart_script() {
  local dir=$1 bin=$2 port=$3
  shift 3
  printf '#!/usr/bin/env bash\n# Restarts the Redis server on 127.0.0.1:%s with its data (see scripts/servers/redis.sh).\n' "$port"
  printf 'dir=%q bin=%q port=%q\nargs=(' "$dir" "$bin" "$port"
  printf '%q ' "$@"
  printf ')\n'
  cat <<'EOF'
pid="$(cat "$dir/redis.pid" 2>/dev/null || true)"
# running PID: the process exists and is not a zombie (an exited child
# whose parent has not reaped it yet).
running() {
  if [ -r "/proc/$1/stat" ]; then
    ! grep -q ') Z ' "/proc/$1/stat" 2>/dev/null
  else
    kill -0 "$1" 2>/dev/null
  fi
}
# SHUTDOWN SAVE: the server saves dump.rdb and exits without answering.
(
  exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
  printf 'SHUTDOWN SAVE\r\n' >&3
  read -r -t 10 _ <&3 || true
) 2>/dev/null
for _ in $(seq 1 100); do
  if [ -z "$pid" ] || ! running "$pid"; then break; fi
  sleep 0.05
done
if [ -n "$pid" ] && running "$pid"; then
  echo "redis: the server (pid $pid) did not shut down" >&2
  exit 1
fi
if [ ! -s "$dir/dump.rdb" ]; then
  echo "redis: no dump.rdb after SHUTDOWN SAVE" >&2
  exit 1
fi
sleep "${OCCKIT_RESTART_DOWN:-1}"
"$bin" "${args[@]}" </dev/null >/dev/null 2>&1 &
new=$!
for _ in $(seq 1 100); do
  if (
    exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
    printf 'PING\r\n' >&3
    reply=""
    read -r -t 2 reply <&3 || true
    [ "${reply%$'\r'}" = "+PONG" ]
  ) 2>/dev/null; then
    exit 0
  fi
  if ! kill -0 "$new" 2>/dev/null; then break; fi
  sleep 0.05
done
echo "redis: the server did not come back on port $port; its log:" >&2
tail -n 20 "$dir/server.log" >&2
exit 1
EOF
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Run on its own: start, print how to use and stop it, leave it running.
  set -euo pipefail
  unset OCCKIT_REDIS_URL
  occkit_redis_main
  echo "export OCCKIT_REDIS_URL='$OCCKIT_REDIS_URL'"
  echo "stop: $OCCKIT_REDIS_STOP"
  echo "restart: $OCCKIT_REDIS_RESTART"
else
  occkit_redis_main
fi
