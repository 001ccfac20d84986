#!/usr/bin/env bash
# Sets up this machine and runs mneme's whole test suite: formatting, lints
# (warnings are errors) and every test against real PostgreSQL + pgvector,
# Redis and the e5 model. CI runs exactly this (.ci/run).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=deploy/local/common.sh
source "$here/common.sh"

MNEME_INSTALL_TEST_TOOLS=1 "$here/setup.sh"
# shellcheck disable=SC1091
source "$MNEME_STATE_DIR/env"
cd "$repo_root"

started=$SECONDS
elapsed() { printf '%dm%02ds' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)); }

# Databases left by earlier runs (a failed test keeps its database for inspection).
for db in $(psql_admin -Atc "SELECT datname FROM pg_database WHERE datname LIKE 'mneme\_test\_%' OR datname LIKE 'mneme\_tmpl\_%'"); do
    psql_admin -q -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)"
done

step "formatting"
cargo fmt --all -- --check

step "lints (all features, warnings are errors)"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
# The default build (without candle) must compile on its own.
cargo check -p mneme-embed --locked

step "API docs (broken and private intra-doc links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --locked

step "dependency policy (deny.toml: licenses, sources, banned crates)"
"$MNEME_CARGO_DENY" --locked check --hide-inclusion-graph bans licenses sources

step "tests [$(elapsed)]"
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-features --locked --profile ci
else
    cargo test --workspace --all-features --locked
fi
# After the tests, not beside them: fuzzing takes both cores, and the
# fault-injection and timing tests measure latencies. The corpus grows in a
# cache directory from run to run (docs/FUZZING.md).
step "fuzzing, ${MNEME_FUZZ_SECONDS:-20} s per target [$(elapsed)]"
MNEME_FUZZ_SECONDS="${MNEME_FUZZ_SECONDS:-20}" \
    MNEME_FUZZ_CORPUS="${MNEME_FUZZ_CORPUS:-$HOME/.cache/mneme/fuzz-corpus}" \
    MNEME_FUZZ_KEEP_CORPUS=1 \
    ./.ci/fuzz
step "all checks passed in $(elapsed)"
