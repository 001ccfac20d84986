#!/usr/bin/env bash
# Sets up this machine and runs mneme (gateway, recall, remember, embedding
# worker) in the foreground. Prints the MCP URL and an API key first.
#
#   ./deploy/local/run.sh            # serves http://127.0.0.1:8080/mcp
#   MNEME_HTTP_ADDR=0.0.0.0:9000 MNEME_PUBLIC_URL=https://mneme.example.com ./deploy/local/run.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/local/common.sh
source "$here/common.sh"

"$here/setup.sh"
# shellcheck disable=SC1091
source "$MNEME_STATE_DIR/env"
cd "$repo_root"

step "building mneme (release)"
cargo build --release --locked -p mneme
mneme="${CARGO_TARGET_DIR:-$repo_root/target}/release/mneme"

step "migrating the database"
"$mneme" migrate

tenant="${MNEME_LOCAL_TENANT:-local}"
if ! "$mneme" tenants list | cut -f2 | grep -qx "$tenant"; then
    "$mneme" tenants create "$tenant"
fi

# The raw key is shown only once, so keep it (owner-readable only) and make a
# new one if the stored key no longer exists or was revoked.
key_file="$MNEME_STATE_DIR/local-api-key"
key=""
if [[ -s "$key_file" ]]; then
    key="$(cat "$key_file")"
    prefix="$(cut -d_ -f2 <<<"$key")"
    "$mneme" keys list --tenant "$tenant" | awk -F'\t' -v p="mn_${prefix}_…" '$3 == p && $4 == "active"' | grep -q . || key=""
fi
if [[ -z "$key" ]]; then
    key="$("$mneme" keys create --tenant "$tenant" --name "local-$(date +%Y%m%d%H%M%S)" --permissions read,write | tail -n1)"
    (umask 077 && printf '%s\n' "$key" >"$key_file")
fi

# The dashboard's local owner: created once, its password kept 0600 beside
# the key.
owner_email="${MNEME_LOCAL_OWNER_EMAIL:-owner@$tenant.localhost}"
password_file="$MNEME_STATE_DIR/local-dashboard-password"
if ! "$mneme" users list --tenant "$tenant" | cut -f2 | grep -qx "$owner_email"; then
    password="$("$mneme" users create --tenant "$tenant" --email "$owner_email" --role owner --generate-password | tail -n1)"
    (umask 077 && printf '%s\n' "$password" >"$password_file")
fi

public_url="${MNEME_PUBLIC_URL:-http://${MNEME_HTTP_ADDR:-127.0.0.1:8080}}"
cat <<INFO

  MCP endpoint:  ${public_url%/}/mcp
  API key:       $key
  (send it as "Authorization: Bearer <key>"; it is stored in $key_file)
  Dashboard:     ${public_url%/}/admin
  Sign in as:    $owner_email (password in $password_file)

INFO
exec "$mneme" up
