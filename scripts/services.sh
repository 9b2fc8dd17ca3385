#!/usr/bin/env bash
# Makes sure the machine's PostgreSQL and Redis run (installing them from Debian's packages when
# missing). Tests of server backends use them through `cargo xtask test`; without them those
# tests are named skips, or failures where MEMORY_TEST_REQUIRE names the backend.
set -euo pipefail

need_install=()
command -v pg_ctlcluster >/dev/null 2>&1 || need_install+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_install+=(redis-server)
if [ ${#need_install[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_install[@]}" >/dev/null
fi

if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
fi

for _ in $(seq 1 30); do
  pg_isready -h 127.0.0.1 -p 5432 -q && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "services.sh: PostgreSQL or Redis did not come up" >&2
exit 1
