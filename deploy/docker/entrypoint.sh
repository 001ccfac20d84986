#!/bin/sh
# Picks the service a container runs: `gateway`, `recall`, `remember`,
# `consolidator` start that service's own binary; anything else is a `mneme`
# command (`up`, `migrate`, `config check`, `tenants …`).
set -eu
case "${1:-up}" in
    gateway | recall | remember | consolidator)
        service="$1"
        shift
        exec "/usr/local/bin/mneme-$service" "$@"
        ;;
    *)
        exec /usr/local/bin/mneme "$@"
        ;;
esac
