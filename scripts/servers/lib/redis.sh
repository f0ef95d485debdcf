# Shared by scripts/servers/redis.sh and redis-cluster.sh (sourced by each;
# not a server script itself, so scripts/test.sh does not pick it up).

# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# occkit_redis_ping reports whether a Redis server answers PING on port,
# using bash's /dev/tcp (redis-cli may be absent).
occkit_redis_ping() {
  (
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    printf 'PING\r\n' >&3
    reply=""
    read -r -t 2 reply <&3 || true
    [ "${reply%$'\r'}" = "+PONG" ]
  ) 2>/dev/null
}

# occkit_redis_install installs Debian's redis-server without leaving the
# distribution's service running: policy-rc.d (exit 101) tells invoke-rc.d
# not to start it, and if it was started anyway it is stopped and disabled.
occkit_redis_install() {
  echo "redis: installing redis-server from Debian's packages" >&2
  local status=0
  occkit_apt_install_no_start redis-server || status=$?
  occkit_redis_stop_service
  if [ "$status" -ne 0 ] || [ ! -x /usr/bin/redis-server ]; then
    echo "redis: installing redis-server failed" >&2
    return 1
  fi
}

# occkit_redis_stop_service stops and disables Debian's redis-server
# service if it runs (systemd or not), tolerating its absence.
occkit_redis_stop_service() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
  fi
  if command -v service >/dev/null 2>&1; then
    $sudo service redis-server stop >/dev/null 2>&1 || true
  fi
  if command -v update-rc.d >/dev/null 2>&1; then
    $sudo update-rc.d redis-server disable >/dev/null 2>&1 || true
  fi
  local pidfile pid
  for pidfile in /run/redis/redis-server.pid /var/run/redis/redis-server.pid; do
    if [ -r "$pidfile" ]; then
      pid="$(cat "$pidfile" 2>/dev/null || true)"
      if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        $sudo kill "$pid" 2>/dev/null || true
      fi
    fi
  done
}
