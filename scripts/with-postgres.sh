#!/usr/bin/env bash
# Runs a command with a PostgreSQL server of its own, for the test suites on
# PostgreSQL: Debian's `postgresql` binaries, a server in a temporary
# directory (as the `postgres` user through runuser when run as root),
# reachable only through a Unix socket there, stopped and removed when the
# command ends. The command sees GPUPLANE_TEST_POSTGRES (the socket
# directory); with it, every test server gets a database of its own there
# (testkit/src/postgres.rs).
#
#   scripts/with-postgres.sh cargo nextest run -p gpuplane-server -p gpuplane-testkit
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "PostgreSQL is not installed: apt-get install postgresql (./scripts/test.sh does)" >&2; exit 1; }
dir=$(mktemp -d /tmp/gpuplane-test-pg-XXXXXX)
chmod 755 "$dir"
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" != 0 ] || chown postgres: "$dir"

stop() {
  status=$?
  if [ $status -ne 0 ] && [ -f "$dir/server.log" ]; then
    echo "PostgreSQL's errors (each once, with the statement):" >&2
    grep -A1 ' ERROR: ' "$dir/server.log" | sed -E 's/^[0-9-]+ [0-9:.]+ UTC \[[0-9]+\] //' | sort | uniq -c | sort -rn | head -80 >&2
  fi
  as_postgres "$bin/pg_ctl" -m immediate -D "$dir/data" stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

as_postgres "$bin/initdb" --auth=trust --username=postgres --encoding=UTF8 --no-sync -D "$dir/data" >/dev/null
# Each test server holds up to 16 connections and the suites run two tests at once.
as_postgres "$bin/pg_ctl" -w -l "$dir/server.log" -D "$dir/data" \
  -o "-c listen_addresses='' -k $dir -c fsync=off -c synchronous_commit=off -c max_connections=400" start >/dev/null
echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') in $dir (its log: $dir/server.log)" >&2

GPUPLANE_TEST_POSTGRES="$dir" "$@"
