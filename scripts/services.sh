#!/usr/bin/env bash
# Makes sure the machine's PostgreSQL and Redis run (installing them from Debian's packages when
# missing). Tests of server backends use them through `cargo xtask test`; without them those
# tests are named skips, or failures where MNEMIX_TEST_REQUIRE names the backend.
set -euo pipefail

need_install=()
command -v pg_ctlcluster >/dev/null 2>&1 || need_install+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_install+=(redis-server)
# `redis-cli --cluster create` joins the throwaway cluster `cargo xtask test` starts.
command -v redis-cli >/dev/null 2>&1 || need_install+=(redis-tools)
# The rediss:// test makes its throwaway CA and server certificate with `openssl`.
command -v openssl >/dev/null 2>&1 || need_install+=(openssl)
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

ready=0
for _ in $(seq 1 30); do
  if pg_isready -h 127.0.0.1 -p 5432 -q && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 1
done
if [ "$ready" != 1 ]; then
  echo "services.sh: PostgreSQL or Redis did not come up" >&2
  exit 1
fi

# The tests connect as postgres without a password to the database `test` on 127.0.0.1, as this
# machine kind provides. A PostgreSQL installed here just now has neither: add both.
if [[ " ${need_install[*]:-} " == *" postgresql "* ]]; then
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  grep -q '^host all all 127.0.0.1/32 trust' "$hba" ||
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$version" main reload
fi
# The suite runs several test processes at once, each with its own pools: PostgreSQL's default
# 100 connections ran out. The setting takes a restart.
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SHOW max_connections')" -lt 400 ]; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'ALTER SYSTEM SET max_connections = 400'
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  for _ in $(seq 1 30); do pg_isready -h 127.0.0.1 -p 5432 -q && break; sleep 1; done
fi
if ! psql -h 127.0.0.1 -U postgres -d test -c 'SELECT 1' >/dev/null 2>&1; then
  runuser -u postgres -- createdb test
fi
