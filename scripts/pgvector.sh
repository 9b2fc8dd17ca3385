#!/usr/bin/env bash
# Builds and installs pgvector for the machine's PostgreSQL from Debian's source package.
#
# pgvector is not packaged for this Debian release (bookworm), so this takes the `pgvector`
# source package of the next release (trixie, 0.8.x), builds it against
# postgresql-server-dev-<major> pinned to the running server's version (unpinned, apt would
# upgrade the server too), and installs it. Only a deb-src line is added: no binary package
# comes from trixie. Idempotent: does nothing when the extension is already installed.
set -euo pipefail

major=$(ls /etc/postgresql | sort -V | tail -n 1)
if [ -f "/usr/share/postgresql/$major/extension/vector.control" ]; then
  echo "pgvector.sh: pgvector already installed for PostgreSQL $major"
  exit 0
fi

uri=$(bash "$(dirname "$0")/debian-mirror.sh")
cat > /etc/apt/sources.list.d/agent-memory-trixie-src.sources <<SOURCES
Types: deb-src
URIs: $uri
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES

apt-get update -qq
server_version=$(dpkg-query -W -f='${Version}' "postgresql-$major")
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "postgresql-server-dev-$major=$server_version" dpkg-dev make gcc >/dev/null

build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
cd "$build"
apt-get source -qq pgvector >/dev/null
cd pgvector-*/
make -s OPTFLAGS="" PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >/dev/null
make -s install PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" >/dev/null
echo "pgvector.sh: installed pgvector $(basename "$PWD" | sed 's/^pgvector-//') for PostgreSQL $major"
