#!/usr/bin/env bash
# A local PostgreSQL server for LoopX's test suite.
#
# Installs PostgreSQL from Debian's packages if it is missing, makes sure a cluster exists,
# listens on 127.0.0.1 only and is running, creates a login role and a test database (C
# collation, so text sorts byte-wise as it does in SQLite), and prints the URL to export:
#
#     export LOOPX_TEST_POSTGRES_URL=$(scripts/postgres.sh)
#
# Idempotent: running it again changes nothing that is already right. Runs as root (CI runs it
# on a fresh Debian 12 machine). Progress goes to stderr; stdout is only the URL.
#
# Environment: LOOPX_PG_ROLE (loopx), LOOPX_PG_PASSWORD (loopx), LOOPX_PG_DB (loopx_test).
set -euo pipefail

ROLE=${LOOPX_PG_ROLE:-loopx}
PASSWORD=${LOOPX_PG_PASSWORD:-loopx}
DB=${LOOPX_PG_DB:-loopx_test}
CLUSTER=main

log() { echo "postgres.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run me as root (I install packages and manage the server)"
case "$ROLE$DB" in *[!a-z0-9_]*) die "role and database names must be [a-z0-9_]" ;; esac
case "$PASSWORD" in *"'"*) die "the password must not contain a single quote" ;; esac

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v pg_ctlcluster >/dev/null; then
    log "installing PostgreSQL from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
fi

VERSION=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
[ -x "/usr/lib/postgresql/$VERSION/bin/postgres" ] || die "no PostgreSQL server binaries found"

if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$VERSION $CLUSTER"; then
    log "creating cluster $VERSION/$CLUSTER"
    pg_createcluster --encoding UTF8 --locale C.UTF-8 "$VERSION" "$CLUSTER" >&2
fi

cluster_field() {  # pg_lsclusters columns: Ver Cluster Port Status Owner Data Log
    pg_lsclusters -h | awk -v v="$VERSION" -v c="$CLUSTER" -v f="$1" '$1 == v && $2 == c {print $f}'
}
PORT=$(cluster_field 3)

# Only the loopback interface: a test server must not be reachable from the network. Debian's
# postgresql.conf includes conf.d/, so our settings live in a file of our own.
CONF=/etc/postgresql/$VERSION/$CLUSTER/conf.d/loopx.conf
WANT_CONF="listen_addresses = '127.0.0.1'"
if [ "$(cat "$CONF" 2>/dev/null)" != "$WANT_CONF" ]; then
    log "writing $CONF"
    mkdir -p "$(dirname "$CONF")"
    echo "$WANT_CONF" > "$CONF"
    if [ "$(cluster_field 4)" = online ]; then
        pg_ctlcluster "$VERSION" "$CLUSTER" restart >&2
    fi
fi

if [ "$(cluster_field 4)" != online ]; then
    log "starting cluster $VERSION/$CLUSTER on port $PORT"
    pg_ctlcluster "$VERSION" "$CLUSTER" start >&2
fi

for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p "$PORT" && break
    sleep 1
done
pg_isready -q -h 127.0.0.1 -p "$PORT" || die "the server did not become ready on 127.0.0.1:$PORT"

as_postgres() { (cd / && su postgres -s /bin/sh -c "psql -X -q -v ON_ERROR_STOP=1 -p $PORT $*"); }

if [ -z "$(as_postgres "-tA -c \"SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'\"" </dev/null)" ]; then
    log "creating role $ROLE"
    as_postgres <<SQL
CREATE ROLE $ROLE LOGIN PASSWORD '$PASSWORD';
SQL
fi

if [ -z "$(as_postgres "-tA -c \"SELECT 1 FROM pg_database WHERE datname = '$DB'\"" </dev/null)" ]; then
    log "creating database $DB"
    as_postgres <<SQL
CREATE DATABASE $DB OWNER $ROLE TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C';
SQL
fi

echo "postgresql://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DB"
