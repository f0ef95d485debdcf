#!/usr/bin/env bash
# A Redis Cluster for the cluster tests of adapters/rediscas, the lab's
# redis-cluster backend and the failover fault runs (anything that reads
# OCCKIT_REDIS_CLUSTER_URL): 3 masters and 3 replicas.
#
# Sourced by scripts/test.sh: installs Debian's redis-server (which brings
# redis-cli) if it is missing, starts six throwaway servers with
# cluster-enabled yes (127.0.0.1 only, free ports, no persistence, a node
# timeout of 1 s so that a replica takes over a dead master within a few
# seconds), joins them with `redis-cli --cluster create --cluster-replicas
# 1`, waits until every node reports cluster_state:ok, exports
# OCCKIT_REDIS_CLUSTER_URL and appends its stop command to the array
# `cleanups`. The URL is the form go-redis's ParseClusterURL reads:
#   redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=...
# When OCCKIT_REDIS_CLUSTER_URL is already set, that cluster is used and
# nothing is started.
#
# Run on its own (`bash scripts/servers/redis-cluster.sh`), it starts the
# same cluster, leaves it running and prints the two lines to use it:
#   export OCCKIT_REDIS_CLUSTER_URL=redis://...
#   stop: <command that stops every node and removes their directories>

# shellcheck source=lib/redis.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/redis.sh"

occkit_redis_cluster_main() {
  local bin=/usr/bin/redis-server cli=/usr/bin/redis-cli
  local nodes=6

  if [ -n "${OCCKIT_REDIS_CLUSTER_URL:-}" ]; then
    echo "redis-cluster: using OCCKIT_REDIS_CLUSTER_URL from the environment; starting nothing" >&2
    return 0
  fi
  if [ ! -x "$bin" ] || [ ! -x "$cli" ]; then
    occkit_redis_install || return 1
  fi

  occkit_server_dir redis-cluster
  local dir=$OCCKIT_DIR remove=$OCCKIT_REMOVE

  # Each node: its own directory and port. A node's cluster bus listens on
  # port + 10000, so ports are drawn below 55535, and neither port may be
  # one this cluster uses already; a node that cannot bind (another
  # process took a port in between) is started again on new ones.
  local ports=() pids=() used=" " i port pid attempt ok
  # Stop every node started here (by pid), wait for them, remove the files.
  occkit_redis_cluster_stop() {
    printf 'for p in %s; do kill $p 2>/dev/null; done; for p in %s; do for _ in $(seq 1 50); do kill -0 $p 2>/dev/null || break; sleep 0.1; done; kill -9 $p 2>/dev/null; done; rm -rf %q' \
      "${pids[*]}" "${pids[*]}" "$remove"
  }
  for ((i = 0; i < nodes; i++)); do
    ok=""
    for attempt in 1 2 3 4 5; do
      port="$(occkit_free_port)"
      if [ "$port" -ge 55535 ] || [[ "$used" == *" $port "* ]] || [[ "$used" == *" $((port + 10000)) "* ]] ||
        (exec 3<>"/dev/tcp/127.0.0.1/$((port + 10000))") 2>/dev/null; then
        continue
      fi
      mkdir -p "$dir/$port"
      "$bin" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --cluster-enabled yes --cluster-config-file "$dir/$port/nodes.conf" \
        --cluster-node-timeout 1000 --dir "$dir/$port" --daemonize no \
        --logfile "$dir/$port/server.log" --pidfile "$dir/$port/redis.pid" \
        >/dev/null 2>&1 &
      pid=$!
      for _ in $(seq 1 100); do
        if occkit_redis_ping "$port" || ! kill -0 "$pid" 2>/dev/null; then break; fi
        sleep 0.05
      done
      if occkit_redis_ping "$port"; then
        ok=1
        break
      fi
      echo "redis-cluster: a node on port $port did not start (attempt $attempt), retrying; its log:" >&2
      tail -n 3 "$dir/$port/server.log" >&2 || true
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
      rm -rf "${dir:?}/$port"
    done
    if [ -z "$ok" ]; then
      echo "redis-cluster: could not start node $((i + 1)) of $nodes" >&2
      bash -c "$(occkit_redis_cluster_stop)"
      return 1
    fi
    pids+=("$pid")
    ports+=("$port")
    used+="$port $((port + 10000)) "
  done

  local stop
  stop="$(occkit_redis_cluster_stop)"
  occkit_register_cleanup "$stop"
  OCCKIT_REDIS_CLUSTER_STOP="$stop"

  local addrs=()
  for port in "${ports[@]}"; do addrs+=("127.0.0.1:$port"); done
  if ! "$cli" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
    >"$dir/create.log" 2>&1; then
    echo "redis-cluster: redis-cli --cluster create failed:" >&2
    tail -n 30 "$dir/create.log" >&2
    bash -c "$stop"
    return 1
  fi

  # Every node must see the whole cluster serving every slot, and every
  # replica must be attached, before the tests start.
  local ok=""
  for i in $(seq 1 200); do
    ok=1
    for port in "${ports[@]}"; do
      if ! "$cli" -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; then
        ok=""
        break
      fi
    done
    # ... and every replica in sync with its master (master_link_status
    # up): a replica that never finished its first sync does not take
    # over a dead master, and WAIT gets no acknowledgement from it.
    if [ -n "$ok" ] && [ "$("$cli" -p "${ports[0]}" cluster nodes 2>/dev/null | grep -c ' slave ')" -eq $((nodes / 2)) ]; then
      local synced=0
      for port in "${ports[@]}"; do
        if "$cli" -p "$port" info replication 2>/dev/null | grep -q '^master_link_status:up'; then
          synced=$((synced + 1))
        fi
      done
      if [ "$synced" -eq $((nodes / 2)) ]; then break; fi
    fi
    ok=""
    sleep 0.1
  done
  if [ -z "$ok" ]; then
    echo "redis-cluster: the cluster did not reach cluster_state:ok within 20 s" >&2
    "$cli" -p "${ports[0]}" cluster nodes >&2 || true
    bash -c "$stop"
    return 1
  fi

  local url="redis://${addrs[0]}?" sep=""
  for ((i = 1; i < nodes; i++)); do
    url+="${sep}addr=${addrs[$i]}"
    sep="&"
  done
  OCCKIT_REDIS_CLUSTER_URL="$url"
  export OCCKIT_REDIS_CLUSTER_URL
  echo "redis-cluster: $("$bin" --version | awk '{print $3}' | sed 's/^v=//'), 3 masters + 3 replicas on ports ${ports[*]} (files in $dir)" >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  # Run on its own: start, print how to use and stop it, leave it running.
  set -euo pipefail
  unset OCCKIT_REDIS_CLUSTER_URL
  occkit_redis_cluster_main
  echo "export OCCKIT_REDIS_CLUSTER_URL='$OCCKIT_REDIS_CLUSTER_URL'"
  echo "stop: $OCCKIT_REDIS_CLUSTER_STOP"
else
  occkit_redis_cluster_main
fi
