#!/usr/bin/env bash
# Sets the `postgres` user's password from $POSTGRES_PASSWORD (required: every connection from
# outside the container authenticates with it), then runs the server in the foreground.
set -euo pipefail
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD: connections from outside the container authenticate with it}"
bin=/usr/lib/postgresql/bin
conf=/etc/postgresql/main/postgresql.conf
# Single-user mode, before the server listens: the password is never open to a race.
printf "ALTER USER postgres PASSWORD '%s'\n" "${POSTGRES_PASSWORD//\'/\'\'}" \
  | "$bin/postgres" --single -c config_file="$conf" postgres >/dev/null
exec "$bin/postgres" -c config_file="$conf"
