#!/usr/bin/env bash
# Starts one redis-server per port in $PORTS, empty, and joins them as a cluster with $REPLICAS
# replicas per master (the first ports become the masters), waits for cluster_state:ok on every
# node, marks the container healthy and stays in the foreground. Each node tells clients it is
# at $ANNOUNCE_IP, port + $ANNOUNCE_OFFSET: where the host publishes it. Clients and replicas
# authenticate with $REDIS_PASSWORD (required).
set -euo pipefail
: "${REDIS_PASSWORD:?set REDIS_PASSWORD: clients authenticate with it}"
export REDISCLI_AUTH=$REDIS_PASSWORD
rm -f /tmp/cluster-ready
nodes=()
for port in $PORTS; do
  # A test cluster starts empty: a restarted container would otherwise meet its old
  # nodes.conf, whose slots and peers it may no longer agree on.
  rm -rf "/data/$port" && mkdir -p "/data/$port"
  redis-server --port "$port" --bind 0.0.0.0 --requirepass "$REDIS_PASSWORD" \
    --masterauth "$REDIS_PASSWORD" --dir "/data/$port" \
    --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-announce-ip "$ANNOUNCE_IP" --cluster-announce-port $((port + ANNOUNCE_OFFSET)) \
    --cluster-announce-bus-port $((port + 10000)) \
    --appendonly yes --appendfsync always --save "" --daemonize yes \
    --logfile "/data/$port/redis.log"
  nodes+=("127.0.0.1:$port")
done
for port in $PORTS; do
  until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$REPLICAS" --cluster-yes >/dev/null
for port in $PORTS; do
  until redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
done
touch /tmp/cluster-ready
exec tail -f /dev/null
