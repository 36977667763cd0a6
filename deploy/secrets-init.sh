#!/bin/sh
# The compose stack's `secrets-init` service, run as root before every other service starts.
# Compose mounts file secrets with the host file's owner and mode (its uid/gid/mode settings only work in swarm), so
# a root-owned 0600 file cannot be read by postgres (uid 999), Grafana (uid 472) or the indexer image's user. This
# copies each secret into the `keys` volume as $SECRETS_TO/<service>/<name>, owned by that service's user, mode 0400,
# in a directory only that user can enter (0500). $SECRET_GRANTS lists, space-separated,
# <service>:<uid>:<gid>:<secret>[,<secret>...]; sources are $SECRETS_FROM/<secret> (compose's /run/secrets).
set -eu
from="${SECRETS_FROM:-/run/secrets}"
to="${SECRETS_TO:-/run/keys}"
umask 077
chmod 0755 "$to"
for grant in ${SECRET_GRANTS:?SECRET_GRANTS is empty}; do
    service=${grant%%:*}; rest=${grant#*:}
    uid=${rest%%:*}; rest=${rest#*:}
    gid=${rest%%:*}; names=${rest#*:}
    mkdir -p "$to/$service"
    for name in $(echo "$names" | tr ',' ' '); do
        if [ ! -r "$from/$name" ]; then
            echo "secrets-init: $from/$name is missing: create deploy/secrets/$name (deploy/secrets/README.md)" >&2
            exit 2
        fi
        cp "$from/$name" "$to/$service/$name.new"
        chown "$uid:$gid" "$to/$service/$name.new"
        chmod 0400 "$to/$service/$name.new"
        mv -f "$to/$service/$name.new" "$to/$service/$name"
    done
    chown "$uid:$gid" "$to/$service"
    chmod 0500 "$to/$service"
done
echo "secrets-init: secrets installed for $(echo "$SECRET_GRANTS" | sed 's/:[^ ]*//g')"
