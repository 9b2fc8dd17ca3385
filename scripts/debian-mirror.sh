#!/usr/bin/env bash
# Prints the machine's Debian mirror, as its apt sources name it (deb822 or one-line format).
set -euo pipefail
uri=""
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  uri=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
  uri=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' /etc/apt/sources.list)
fi
if [ -z "$uri" ]; then
  echo "debian-mirror.sh: cannot find the machine's Debian mirror in /etc/apt/sources*" >&2
  exit 1
fi
echo "$uri"
