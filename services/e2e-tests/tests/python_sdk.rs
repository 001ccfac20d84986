//! Interoperability with an independent client: the official MCP Python SDK
//! (`mcp` from PyPI) drives remember → recall → forget in both protocol eras
//! and over the legacy HTTP+SSE transport (`python/sdk_client.py`).

use mneme_e2e_tests::Stack;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};

#[tokio::test]
async fn the_official_python_sdk_works_in_both_protocol_eras() {
    let stack = Stack::start("hash", &[]).await;
    let tenant = create_tenant(&stack.db.store(), "python", ALL_PERMISSIONS).await;
    let python_path = std::env::var("MNEME_TEST_PYTHONPATH").expect(
        "MNEME_TEST_PYTHONPATH must hold the `mcp` package; ./deploy/local/test.sh installs it",
    );
    let output = tokio::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/python/sdk_client.py"))
        .arg(stack.mcp_url())
        .arg(&tenant.api_key)
        .env("PYTHONPATH", python_path)
        .output()
        .await
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python SDK client failed:\n{stdout}\n{stderr}"
    );
    assert!(
        ["legacy: ok", "auto: ok", "sse: ok"]
            .iter()
            .all(|mode| stdout.contains(mode)),
        "{stdout}"
    );
    println!("{stdout}");
    stack.shutdown().await.unwrap();
}
