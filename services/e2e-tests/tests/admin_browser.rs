//! The admin dashboard in a real browser: headless Chromium, driven by
//! `services/e2e-tests/browser/admin.mjs` (playwright-core), signs in as a
//! tenant owner and walks every screen against the whole stack — creates
//! and copies a key, changes its quota, searches and opens a memory, draws
//! the graph, terminates a live MCP session, runs a consolidation dry run,
//! finds the key's creation in the audit log and signs out; then a member
//! looks around without a managing control in sight, and a platform admin
//! picks the tenant and sees its keys — failing on any
//! console error, page error or failed request. It leaves a screenshot of
//! every screen in `<target>/admin-screenshots/` (and, with
//! `MNEME_UPDATE_SCREENSHOTS=1`, in `docs/admin/` for docs/ADMIN.md).
//!
//! Chromium and playwright-core come from
//! `MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use mneme_e2e_tests::{Mcp, Stack};
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::{Value, json};
use tokio::process::Command;

const EMAIL: &str = "owner@acme.example";
const MEMBER_EMAIL: &str = "member@acme.example";
const PLATFORM_EMAIL: &str = "ops@mneme.example";
const PASSWORD: &str = "a long enough password for the dashboard";
/// A word of one seeded memory, searched for in the memory browser.
const TERM: &str = "lighthouse";
const SETUP: &str = "run MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh \
                     (it installs Chromium and the browser test's node packages)";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// `$CARGO_TARGET_DIR/admin-screenshots`, or `<repo>/target/…`.
fn screenshot_dir(root: &Path) -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if Path::new(&dir).is_absolute() => PathBuf::from(dir),
        Some(dir) => root.join(dir),
        None => root.join("target"),
    };
    target.join("admin-screenshots")
}

/// Chromium, the node binary and the directory holding
/// `node_modules/playwright-core`; a missing one fails the test, naming
/// the set-up step that installs it.
fn browser_tools(root: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let chromium =
        PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned()));
    assert!(
        chromium.is_file(),
        "Chromium is not installed at {}: {SETUP}",
        chromium.display()
    );
    let packages = std::env::var_os("MNEME_BROWSER_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("services/e2e-tests/browser"));
    assert!(
        packages
            .join("node_modules/playwright-core/package.json")
            .is_file(),
        "playwright-core is not installed in {}/node_modules: {SETUP}",
        packages.display()
    );
    // playwright-core needs Node.js 20 or newer; set-up's Node 22 (the
    // conformance suite's) is used when present, else `node` from PATH.
    let node = std::env::var_os("MNEME_TEST_NODE22")
        .map(PathBuf::from)
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("node"));
    (chromium, node, packages)
}

/// Stores a memory that must be new; returns its id.
async fn remember(mcp: &Mcp, memory: Value) -> String {
    let stored = mcp.ok("remember", memory).await;
    assert_eq!(stored["outcome"], "created", "{stored}");
    stored["id"].as_str().expect("an id").to_owned()
}

/// A small knowledge graph: a procedure, the error it caused, the decision
/// that resolved it, and an unrelated pair about release notes.
async fn seed_memories(mcp: &Mcp) {
    let procedure = remember(
        mcp,
        json!({
            "content": "The deploy pipeline switches the payments service to the new slot only after the lighthouse health check passes.",
            "topic": "deploy", "type": "procedure", "importance": 0.8,
        }),
    )
    .await;
    let error = remember(
        mcp,
        json!({
            "content": "On 3 March a lighthouse check timed out after 10 seconds and rolled the payments service back although it was healthy.",
            "topic": "deploy", "type": "error", "importance": 0.6,
            "linkedTo": [procedure],
        }),
    )
    .await;
    let decision = remember(
        mcp,
        json!({
            "content": "The team raised the lighthouse check timeout from 10 to 30 seconds to stop false rollbacks of the payments service.",
            "topic": "deploy", "type": "decision", "importance": 0.7,
        }),
    )
    .await;
    let linked = mcp
        .ok(
            "link",
            json!({"fromId": error, "toId": decision, "relationType": "resolved_by"}),
        )
        .await;
    assert_eq!(linked["linked"], true, "{linked}");
    let preference = remember(
        mcp,
        json!({
            "content": "The team wants release notes in both Korean and English.",
            "topic": "release", "type": "preference", "importance": 0.5,
        }),
    )
    .await;
    remember(
        mcp,
        json!({
            "content": "Release notes are generated every Friday from the merged pull requests of the week.",
            "topic": "release", "type": "procedure", "importance": 0.4,
            "linkedTo": [preference],
        }),
    )
    .await;
    remember(
        mcp,
        json!({
            "content": "The payments API allows 100 requests per minute per client key; bursts above that get HTTP 429.",
            "topic": "payments-api", "type": "fact", "importance": 0.6,
        }),
    )
    .await;
}

#[tokio::test]
async fn the_dashboard_works_in_a_real_browser_with_no_console_errors() {
    let root = repo_root();
    let (chromium, node, packages) = browser_tools(&root);
    let shots = screenshot_dir(&root);
    if shots.is_dir() {
        std::fs::remove_dir_all(&shots).expect("clear the old screenshots");
    }
    std::fs::create_dir_all(&shots).expect("the screenshot directory");

    // Tool calls reach the usage table within a second, for the charts.
    let stack = Stack::start("hash", &[("MNEME_USAGE_FLUSH_SECS", "1")]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    for (email, role) in [
        (EMAIL, mneme_store::users::Role::Owner),
        (MEMBER_EMAIL, mneme_store::users::Role::Member),
    ] {
        mneme_test_support::create_user(&store, acme.tenant_id, email, role, PASSWORD).await;
    }
    // A platform admin, who picks the tenant to act in.
    {
        let hash = mneme_core::password::hash(PASSWORD).unwrap();
        let db = store.client().await.unwrap();
        mneme_store::platform_admins::create(&db, PLATFORM_EMAIL, &hash)
            .await
            .unwrap();
    }
    // A second tenant, so the platform admin has a choice to make.
    create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    // An agent connected over MCP: its memories fill the browser and the
    // graph, its session is the one the browser terminates.
    let agent = stack.mcp(&acme.api_key).await;
    seed_memories(&agent).await;
    agent
        .ok("recall", json!({"text": "lighthouse timeout"}))
        .await;
    // Once embedded, a hook's call gets memories surfaced (Surfacing screen).
    let deadline = Instant::now() + Duration::from_secs(20);
    while stack
        .db
        .count_in_tenant(acme.tenant_id, "embedding IS NULL")
        .await
        > 0
    {
        assert!(Instant::now() < deadline, "the memories were not embedded");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let surfaced = reqwest::Client::new()
        .post(format!("http://{}/v1/surface", stack.http_addr))
        .bearer_auth(&acme.api_key)
        .json(&json!({"server": "docs", "tool": "search",
                      "arguments": {"_context_query": "lighthouse check timeout rollback"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(surfaced.status(), 200);
    let surfaced: Value = surfaced.json().await.unwrap();
    if let Some(id) = surfaced["surfacingId"].as_str() {
        agent
            .ok(
                "stm_surfacing_feedback",
                json!({"surfacing_id": id, "rating": "helpful"}),
            )
            .await;
    }
    // The usage flush (every second) has run.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let started = Instant::now();
    let mut command = Command::new(&node);
    command
        .arg(root.join("services/e2e-tests/browser/admin.mjs"))
        .current_dir(&root)
        .env(
            "MNEME_ADMIN_URL",
            format!("http://{}/admin", stack.http_addr),
        )
        .env("MNEME_ADMIN_EMAIL", EMAIL)
        .env("MNEME_ADMIN_PASSWORD", PASSWORD)
        .env("MNEME_MEMBER_EMAIL", MEMBER_EMAIL)
        .env("MNEME_MEMBER_PASSWORD", PASSWORD)
        .env("MNEME_PLATFORM_EMAIL", PLATFORM_EMAIL)
        .env("MNEME_PLATFORM_PASSWORD", PASSWORD)
        .env("MNEME_TENANT_NAME", "acme")
        .env("MNEME_MEMORY_TERM", TERM)
        .env("MNEME_SCREENSHOT_DIR", &shots)
        .env("MNEME_BROWSER_TEST_DIR", &packages)
        .env("CHROMIUM", &chromium)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(300), command.output())
        .await
        .expect("the browser walk finishes within 5 minutes")
        .unwrap_or_else(|e| panic!("{} could not be started ({e}): {SETUP}", node.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser walk failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n\
         (screenshots in {})",
        output.status,
        shots.display()
    );
    eprintln!(
        "{}browser walk took {:.1} s",
        stdout,
        started.elapsed().as_secs_f64()
    );

    // What the browser did reached the database.
    let tuned = stack
        .db
        .count_rows(
            acme.tenant_id,
            "api_keys",
            "name = 'browser-agent' AND daily_call_limit = 777 AND fragment_limit = 2500",
        )
        .await;
    assert_eq!(tuned, 1, "the quota changed in the browser is stored");

    for name in [
        "signin",
        "overview",
        "overview-phone",
        "keys",
        "key-created",
        "groups",
        "users",
        "memory",
        "memory-detail",
        "memory-import",
        "graph",
        "sessions",
        "surfacing",
        "upstreams",
        "consolidation",
        "metrics",
        "audit",
        "tenants",
    ] {
        let file = shots.join(format!("{name}.png"));
        assert!(file.is_file(), "no screenshot {}", file.display());
    }
    if std::env::var("MNEME_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let docs = root.join("docs/admin");
        std::fs::create_dir_all(&docs).unwrap();
        for entry in std::fs::read_dir(&shots).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "png") {
                std::fs::copy(&path, docs.join(path.file_name().unwrap())).unwrap();
            }
        }
        eprintln!("screenshots copied to {}", docs.display());
    }
    // The session was terminated in the browser; closing the client now
    // keeps its farewell DELETE from racing the shutdown.
    let _ = agent.client.cancel().await;
    stack.shutdown().await.unwrap();
}
