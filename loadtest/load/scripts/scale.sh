#!/usr/bin/env bash
# Recall at scale (issue 11's targets): one database holding a tenant of
# SMALL memories (default 100,000) and one of LARGE (default 1,000,000),
# seeded through `batch_remember`, then `recall` at 20 clients against each.
#
#   loadtest/load/scripts/scale.sh seed      # create and fill the database (kept)
#   loadtest/load/scripts/scale.sh index     # (re)build its HNSW index only
#   loadtest/load/scripts/scale.sh measure   # recall runs against it
#   loadtest/load/scripts/scale.sh drop      # drop it
#
# Needs `source ~/.local/share/mneme/env` and release builds of `mneme` and
# `mneme-loadtest` (`cargo build --release -p mneme -p mneme-loadtest`).
# Reports go to $OUT (default /tmp/mneme-scale): seed-*.json, recall-*.json
# and the stack's log.
#
# What is not the default, and why:
# - the hash embedder: seeding a million memories through e5 would take
#   days on two cores; query embedding with e5 is measured elsewhere
#   (docs/BENCHMARKS.md) and adds the same on every tenant size;
# - automatic links off while seeding (`MNEME_PROACTIVE_LINKS=false`,
#   `MNEME_TEMPORAL_LINK_MAX=0`): their cost is the write path's, and
#   the generated data would give the graph layer links real memories do
#   not have;
# - the HNSW index is dropped for the load and built once afterwards, the
#   bulk-import procedure of docs/OPERATIONS.md: one insertion at a time
#   into a graph of 800,000 vectors runs at about 160 rows/s here, a build
#   takes minutes.
set -euo pipefail

: "${MNEME_TEST_DATABASE_URL:?source ~/.local/share/mneme/env first}"
db="${MNEME_SCALE_DATABASE:-mneme_scale}"
small="${SMALL:-100000}"
large="${LARGE:-1000000}"
out="${OUT:-/tmp/mneme-scale}"
port="${MNEME_SCALE_PORT:-8090}"
bin="${CARGO_TARGET_DIR:-target}/release"
mneme="$bin/mneme"
loadtest="$bin/mneme-loadtest"
mkdir -p "$out"

owner_url="${MNEME_MIGRATE_DATABASE_URL%/*}/$db"
app_url="${MNEME_DATABASE_URL%/*}/$db"
# Row-level security hides every tenant's rows from the owner role too, so
# counting the embedding queue and VACUUM need a superuser.
admin_url="${MNEME_SCALE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/$db}"

# The stack serves on ports of its own, so a local `run.sh` can keep running.
export MNEME_DATABASE_URL="$app_url" MNEME_MIGRATE_DATABASE_URL="$owner_url"
export MNEME_HTTP_ADDR="127.0.0.1:$port" MNEME_RECALL_GRPC_ADDR="127.0.0.1:$((port + 1))"
export MNEME_REMEMBER_GRPC_ADDR="127.0.0.1:$((port + 2))" MNEME_EMBEDDER=hash
export MNEME_SESSION_REUSE_BY_TOKEN=false MNEME_RATE_LIMIT_TENANT=1000000000
export MNEME_RATE_LIMIT_KEY=1000000000 MNEME_RATE_LIMIT_KEY_WRITES=1000000000

psql_admin() { psql -X -q -v ON_ERROR_STOP=1 "$admin_url" "$@"; }
note() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }

stack_pid=""
start_stack() {
    note "starting mneme on 127.0.0.1:$port (log: $out/stack.log)"
    "$mneme" up >>"$out/stack.log" 2>&1 &
    stack_pid=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && return
        sleep 0.2
    done
    echo "mneme did not start; see $out/stack.log" >&2
    exit 1
}
stop_stack() {
    [[ -n "$stack_pid" ]] && kill "$stack_pid" 2>/dev/null && wait "$stack_pid" 2>/dev/null || true
    stack_pid=""
}
trap 'stop_maintenance; stop_stack' EXIT

# This machine's PostgreSQL runs without autovacuum; while seeding, do what it
# would: fresh planner statistics every minute, dead rows (every memory is
# written twice, the second time with its vector) reclaimed every five.
maintenance_pid=""
start_maintenance() {
    (
        for ((minute = 1; ; minute++)); do
            sleep 60
            psql_admin -c "ANALYZE mneme.fragments" -c "ANALYZE mneme.fragment_links" \
                -c "ANALYZE mneme.case_events" -c "VACUUM pg_catalog.pg_class" \
                -c "VACUUM pg_catalog.pg_attribute" -c "VACUUM pg_catalog.pg_type" || true
            if ((minute % 5 == 0)); then psql_admin -c "VACUUM mneme.fragments" || true; fi
        done
    ) &
    maintenance_pid=$!
}
stop_maintenance() {
    [[ -n "$maintenance_pid" ]] && kill "$maintenance_pid" 2>/dev/null || true
    maintenance_pid=""
}

unqueued() {
    psql_admin -Atc "SELECT count(*) FROM mneme.fragments WHERE embedding IS NULL AND embedding_parked_at IS NULL"
}

seed() {
    if psql -X -Atc "SELECT 1" "$owner_url" >/dev/null 2>&1; then
        echo "database $db exists; run \`$0 drop\` first" >&2
        exit 1
    fi
    note "creating database $db"
    psql -X -q -v ON_ERROR_STOP=1 "$MNEME_TEST_DATABASE_URL" \
        -c "CREATE DATABASE $db OWNER mneme_owner ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8' TEMPLATE template1"
    "$mneme" migrate
    for name in small large; do
        "$mneme" tenants create "scale-$name" >/dev/null
        "$mneme" keys create --tenant "scale-$name" --name load --permissions read,write \
            --fragment-limit unlimited | tail -n1 >"$out/key-$name.txt"
    done
    hnsw="$(psql_admin -Atc "SELECT pg_get_indexdef('mneme.fragments_embedding_hnsw'::regclass)")"
    # The definition of a partitioned index reads `ON ONLY`, which would
    # build the parent's index alone, none of the partitions'.
    hnsw="${hnsw/ ON ONLY / ON }"
    printf '%s\n' "$hnsw" >"$out/hnsw.sql"
    note "dropping the HNSW index for the load (kept in $out/hnsw.sql)"
    psql_admin -c "DROP INDEX mneme.fragments_embedding_hnsw"

    MNEME_PROACTIVE_LINKS=false MNEME_TEMPORAL_LINK_MAX=0 start_stack
    start_maintenance
    for name in small large; do
        count=$small
        [[ $name == large ]] && count=$large
        note "seeding $count memories into scale-$name"
        "$loadtest" seed --url "http://127.0.0.1:$port/mcp" --keys-file "$out/key-$name.txt" \
            --fragments "$count" --json "$out/seed-$name.json"
    done
    note "waiting for the embedding worker"
    while (( $(unqueued) > 0 )); do sleep 5; done
    stop_stack
    stop_maintenance

    build_index
}

build_index() {
    note "building the HNSW index"
    start=$(date +%s)
    psql_admin -c "DROP INDEX IF EXISTS mneme.fragments_embedding_hnsw" \
        -c "SET maintenance_work_mem = '4GB'" -c "SET max_parallel_maintenance_workers = 1" \
        -c "$(cat "$out/hnsw.sql")"
    echo "$(($(date +%s) - start))" >"$out/hnsw-build-seconds.txt"
    note "HNSW index built in $(cat "$out/hnsw-build-seconds.txt") s; VACUUM ANALYZE"
    psql_admin -c "VACUUM ANALYZE mneme.fragments" -c "VACUUM ANALYZE mneme.fragment_links"
    psql_admin -Atc "SELECT t.name, count(*) FROM mneme.fragments f JOIN mneme.tenants t ON t.id = f.tenant_id GROUP BY 1 ORDER BY 1"
    psql_admin -Atc "SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)) FROM pg_class c
                      WHERE c.relname LIKE 'fragments_p%embedding%' AND pg_relation_size(c.oid) > 1000000"
}

# Recall reads its partitions' heap and indexes on every call; measured
# with them larger than shared_buffers, much of PostgreSQL's time is copying
# pages from the kernel's cache (docs/BENCHMARKS.md, "Where recall spends its
# time"). Say so rather than report a figure of the server's configuration.
check_buffers() {
    local buffers data
    buffers="$(psql_admin -Atc "SELECT pg_size_bytes(current_setting('shared_buffers'))")"
    data="$(psql_admin -Atc "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c
                              WHERE c.relname ~ '^fragments_p[0-9]+$'")"
    if ((buffers < data)); then
        note "warning: shared_buffers ($((buffers >> 20)) MB) is smaller than the fragments' partitions and indexes ($((data >> 20)) MB);"
        note "  for figures comparable to docs/BENCHMARKS.md: ALTER SYSTEM SET shared_buffers = '4GB', then restart PostgreSQL"
    fi
}

measure() {
    check_buffers
    start_stack
    for name in small large; do
        for clients in 20 1; do
            note "recall, scale-$name, $clients client(s)"
            "$loadtest" run recall --url "http://127.0.0.1:$port/mcp" --keys-file "$out/key-$name.txt" \
                --concurrency "$clients" --warmup 5 --duration 30 --json "$out/recall-$name-$clients.json"
        done
    done
}

case "${1:-}" in
    seed) seed ;;
    index) build_index ;;
    measure) measure ;;
    drop) psql -X -q "$MNEME_TEST_DATABASE_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" ;;
    *) echo "usage: $0 seed|measure|drop" >&2; exit 2 ;;
esac
