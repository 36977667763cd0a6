#!/bin/sh
# First start of the PostgreSQL container: the indexer's owner role and database, and indexer_reader as a login
# role (Grafana connects with it; `indexer migrate` grants it SELECT on schema api and nothing else).
# Passwords come from the secrets (installed for this service by secrets-init), never from this file.
set -eu
indexer_pw=$(cat /run/keys/postgres/indexer_db_password)
reader_pw=$(cat /run/keys/postgres/reader_db_password)
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres \
     -v indexer_pw="$indexer_pw" -v reader_pw="$reader_pw" <<'SQL'
CREATE ROLE indexer LOGIN PASSWORD :'indexer_pw';
CREATE ROLE indexer_reader LOGIN PASSWORD :'reader_pw';
CREATE DATABASE indexer OWNER indexer;
SQL
