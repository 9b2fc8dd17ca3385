#!/usr/bin/env bash
# Starts one redis-server per port in $PORTS, joins them as a cluster of masters, waits for
# cluster_state:ok, marks the container healthy and stays in the foreground. Each node tells
# clients it is at $ANNOUNCE_IP, port + $ANNOUNCE_OFFSET: where the host publishes it.
set -euo pipefail
rm -f /tmp/cluster-ready
nodes=()
for port in $PORTS; do
  mkdir -p "/data/$port"
  redis-server --port "$port" --bind 0.0.0.0 --protected-mode no --dir "/data/$port" \
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
first=${PORTS%% *}
if ! redis-cli -p "$first" cluster info | grep -q 'cluster_state:ok'; then
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
fi
for port in $PORTS; do
  until redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
done
touch /tmp/cluster-ready
exec tail -f /dev/null
