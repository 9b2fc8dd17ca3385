#!/usr/bin/env bash
# Builds the images docker-compose.yml runs, from the Dockerfiles under docker/, with no registry
# pull: the base image is Debian bookworm made here by debootstrap from the machine's own mirror
# (once; later runs reuse it), and every service image installs its packages with apt inside
# its build (docker's cache makes a rebuild take seconds).
#
#   scripts/images.sh           the services: mnemix/postgres, /redis, /redis-cluster
#   scripts/images.sh --cli BIN  also mnemix/cli from an `mnemix` binary built here
set -euo pipefail
cd "$(dirname "$0")/.."

# One build at a time: CI starts this script in the background while it compiles, and the compose
# suite runs it again before bringing the stack up; the second waits, then finds every image
# built (seconds).
mkdir -p target
exec 9>target/images.lock
flock 9

cli=""
if [ "${1:-}" = "--cli" ]; then
  cli=${2:?"--cli needs the path of an mnemix binary"}
fi

base=mnemix/base:bookworm
if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  echo "images.sh: making $base with debootstrap"
  debootstrap --variant=minbase bookworm "$root" "$(bash scripts/debian-mirror.sh)" >/dev/null
  tar -C "$root" -c . | docker import - "$base" >/dev/null
fi

build() {
  local name=$1 dockerfile=$2 context=$3
  echo "images.sh: building $name"
  docker build -q -t "$name" -f "$dockerfile" "$context" >/dev/null
}
# PostgreSQL's build installs pgvector as scripts/pgvector.sh does on a machine.
context=$(mktemp -d)
cp scripts/pgvector.sh scripts/debian-mirror.sh docker/postgres/start.sh "$context/"
build mnemix/postgres:dev docker/postgres/Dockerfile "$context"
rm -rf "$context"
build mnemix/redis:dev docker/redis/Dockerfile docker/redis
build mnemix/redis-cluster:dev docker/redis-cluster/Dockerfile docker/redis-cluster
if [ -n "$cli" ]; then
  context=$(mktemp -d)
  cp "$cli" "$context/mnemix"
  build mnemix/cli:dev docker/cli/Dockerfile "$context"
  rm -rf "$context"
fi
