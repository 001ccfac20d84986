//! Interoperability with an independent client: the official MCP Python SDK
//! (`mcp` from PyPI) drives remember → recall → forget in both protocol eras
//! and over the legacy HTTP+SSE transport (`python/sdk_client.py`), and
//! signs in through OAuth (`python/oauth_client.py`).

use mneme_e2e_tests::Stack;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};

/// Runs `python/<script>` against a fresh stack with a tenant's API key;
/// its stdout, after asserting that it succeeded.
async fn run_script(script: &str, tenant: &str) -> String {
    let stack = Stack::start("hash", &[]).await;
    let tenant = create_tenant(&stack.db.store(), tenant, ALL_PERMISSIONS).await;
    let python_path = std::env::var("MNEME_TEST_PYTHONPATH").expect(
        "MNEME_TEST_PYTHONPATH must hold the `mcp` package; ./deploy/local/test.sh installs it",
    );
    let output = tokio::process::Command::new("python3")
        .arg(format!("{}/python/{script}", env!("CARGO_MANIFEST_DIR")))
        .arg(stack.mcp_url())
        .arg(&tenant.api_key)
        .env("PYTHONPATH", python_path)
        .output()
        .await
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{stderr}"
    );
    stack.shutdown().await.unwrap();
    stdout
}

#[tokio::test]
async fn the_official_python_sdk_works_in_both_protocol_eras() {
    let stdout = run_script("sdk_client.py", "python").await;
    assert!(
        ["legacy: ok", "auto: ok", "sse: ok"]
            .iter()
            .all(|mode| stdout.contains(mode)),
        "{stdout}"
    );
    println!("{stdout}");
}

#[tokio::test]
async fn the_official_python_sdk_signs_in_through_oauth_and_calls_tools() {
    let stdout = run_script("oauth_client.py", "python-oauth").await;
    assert!(stdout.contains("oauth: ok"), "{stdout}");
}
