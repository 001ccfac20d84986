#!/usr/bin/env bash
# Helpers shared by the local scripts. Sourced, not executed.

export MNEME_STATE_DIR="${MNEME_STATE_DIR:-${XDG_DATA_HOME:-$HOME/.local/share}/mneme}"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export PATH="/usr/lib/postgresql/15/bin:$HOME/.cargo/bin:$PATH"

step() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31merror:\033[0m %s\n' "$*" >&2; exit 1; }

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null; then
        sudo "$@"
    else
        die "need root for: $* (install sudo or run as root)"
    fi
}

# psql as the PostgreSQL superuser over the local socket (peer authentication).
psql_admin() {
    if [[ $EUID -eq 0 ]]; then
        runuser -u postgres -- psql -p "${PG_PORT:-5432}" "$@"
    else
        sudo -u postgres psql -p "${PG_PORT:-5432}" "$@"
    fi
}
