#!/usr/bin/env bash
# Starts one redis-server per port in $PORTS, empty, and joins them as a cluster with $REPLICAS
# replicas per master (the first ports become the masters), waits for cluster_state:ok on every
# node, marks the container healthy and stays in the foreground. Each node tells clients it is
# at $ANNOUNCE_IP, port + $ANNOUNCE_OFFSET: where the host publishes it. Clients and replicas
# authenticate with $REDIS_PASSWORD (required). `bash /usr/local/bin/redis-cluster-node PORT`
# starts a node (again, after a test killed it: it rejoins as a replica).
set -euo pipefail
: "${REDIS_PASSWORD:?set REDIS_PASSWORD: clients authenticate with it}"
export REDISCLI_AUTH=$REDIS_PASSWORD
rm -f /tmp/cluster-ready
nodes=()
for port in $PORTS; do
  # A test cluster starts empty: a restarted container would otherwise meet its old
  # nodes.conf, whose slots and peers it may no longer agree on.
  rm -rf "/data/$port"
  bash /usr/local/bin/redis-cluster-node "$port"
  nodes+=("127.0.0.1:$port")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$REPLICAS" --cluster-yes >/dev/null
for port in $PORTS; do
  until redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
done
touch /tmp/cluster-ready
exec tail -f /dev/null
