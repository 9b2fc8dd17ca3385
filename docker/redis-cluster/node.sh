#!/usr/bin/env bash
# Starts (or starts again) the cluster node on port $1, its data in /data/$1, in the
# background. A node started again rejoins from its nodes.conf: as a replica when its master's
# slots failed over to another node while it was down. Clients and replicas authenticate with
# $REDIS_PASSWORD; nodes call one another failed after $NODE_TIMEOUT ms of silence. The
# cluster bus listens on port + $BUS_OFFSET.
set -euo pipefail
port=$1
mkdir -p "/data/$port"
redis-server --port "$port" --bind 0.0.0.0 --requirepass "$REDIS_PASSWORD" \
  --masterauth "$REDIS_PASSWORD" --dir "/data/$port" --pidfile "/data/$port/redis.pid" \
  --cluster-enabled yes --cluster-config-file nodes.conf \
  --cluster-port $((port + BUS_OFFSET)) \
  --cluster-node-timeout "${NODE_TIMEOUT:-15000}" \
  --cluster-announce-ip "$ANNOUNCE_IP" --cluster-announce-port $((port + ANNOUNCE_OFFSET)) \
  --cluster-announce-bus-port $((port + BUS_OFFSET)) \
  --appendonly yes --appendfsync always --save "" --daemonize yes \
  --logfile "/data/$port/redis.log"
until REDISCLI_AUTH=$REDIS_PASSWORD redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
