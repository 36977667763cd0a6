#!/bin/sh
# Builds DATABASE_URL from the password secret (so the password is in no environment file, image or command line),
# then runs `indexer "$@"`. An explicit DATABASE_URL (e.g. from an environment file) wins.
set -eu
if [ -z "${DATABASE_URL:-}" ]; then
    secret="${INDEXER_DB_PASSWORD_FILE:-/run/secrets/indexer_db_password}"
    if [ ! -r "$secret" ]; then
        echo "indexer-entrypoint: no DATABASE_URL and no readable password file $secret" >&2
        exit 2
    fi
    password=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(open(sys.argv[1]).read().strip(), safe=""))' "$secret")
    export DATABASE_URL="postgresql://${INDEXER_DB_USER:-indexer}:${password}@${INDEXER_DB_HOST:-localhost}:${INDEXER_DB_PORT:-5432}/${INDEXER_DB_NAME:-indexer}"
fi
exec indexer "$@"
