#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the Postgres/Supabase store tests.
#
#   bash scripts/pg-start.sh          install if missing, init, start, print the URL
#   bash scripts/pg-start.sh stop     stop the server this script started
#
# Idempotent: a second run finds the cluster already up and only prints the
# connection string again. The server listens on 127.0.0.1 only and trusts
# local connections, so it is for tests on this machine and nothing else.
#
# Each checkout gets its own cluster, so two clones on one machine never share
# a database: by default it lives in /tmp/byollm-pg-<h> and listens on port
# 20000 + (h mod 10000), below Linux's ephemeral range, where <h> is a hash of
# this checkout's path. (/tmp and not the checkout: as root the server runs as
# the `postgres` user, who may not be able to enter the checkout's folders.)
# $BYOLLM_PG_DIR and $BYOLLM_PG_PORT override both.
#
# The connection string is printed on stdout (last line) and written to
# $DIR/url. `npm test` (scripts/test.mjs) and the store tests run this script
# themselves unless BYOLLM_PG_URL names a server.
set -euo pipefail

CHECKOUT="$(cd "$(dirname "$0")/.." && pwd -P)"
HASH="$(printf %s "$CHECKOUT" | sha256sum | cut -c1-8)"
PORT="${BYOLLM_PG_PORT:-$((20000 + 0x$HASH % 10000))}"
DIR="${BYOLLM_PG_DIR:-/tmp/byollm-pg-$HASH}"
DATA="$DIR/data"
LOG="$DIR/server.log"
DB="${BYOLLM_PG_DB:-byollm}"
URL="postgres://postgres@127.0.0.1:${PORT}/${DB}"

log() { echo "pg-start: $*" >&2; }

# Debian puts the server binaries under /usr/lib/postgresql/<major>/bin and
# not on PATH; take the newest installed major.
find_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

BIN="$(find_bindir || true)"
if [ -z "$BIN" ]; then
  log "PostgreSQL not found; installing it from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
  BIN="$(find_bindir)"
fi

# initdb and postgres refuse to run as root; run them as the `postgres` system
# user the Debian package creates (or as ourselves when we are not root).
as_pg() {
  if [ "$(id -u)" = "0" ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-}" = "stop" ]; then
  if [ -f "$DATA/postmaster.pid" ]; then
    as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >&2
  else
    log "not running"
  fi
  exit 0
fi

mkdir -p "$DIR"
if [ "$(id -u)" = "0" ]; then chown postgres: "$DIR"; fi
# Test files started at once each run this script (without BYOLLM_PG_URL):
# one of them initialises and starts the cluster, the others wait for it.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$DIR.lock"
  flock 9
fi

if [ ! -f "$DATA/PG_VERSION" ]; then
  log "initialising a cluster in $DATA"
  as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 ||
    as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C >"$DIR/initdb.log" 2>&1
fi

if ! as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  log "starting on 127.0.0.1:$PORT"
  # Unix socket in our own directory (the default /var/run/postgresql may not
  # exist without the Debian service), TCP on loopback only. fsync off: test
  # data is disposable and the suites create and drop databases often.
  # 9>&-: the server must not inherit the lock's descriptor, or it would
  # hold the lock for its whole life and every later run would wait forever.
  as_pg "$BIN/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" >&2 9>&-
fi

# Wait until it accepts connections (pg_ctl -w normally covers this).
for _ in $(seq 1 50); do
  if "$BIN/pg_isready" -h 127.0.0.1 -p "$PORT" -q; then break; fi
  sleep 0.2
done
"$BIN/pg_isready" -h 127.0.0.1 -p "$PORT" -q || { log "server did not come up; see $LOG"; exit 1; }

if ! "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -tAc \
  "select 1 from pg_database where datname = '$DB'" | grep -q 1; then
  "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi

echo "$URL" >"$DIR/url"
chmod 644 "$DIR/url"
echo "$URL"
