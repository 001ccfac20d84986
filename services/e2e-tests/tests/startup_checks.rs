//! Services run as separate processes (a production deployment) refuse to
//! start without the secrets that protect them: the internal token that
//! signs every gateway→backend call (and from which the OAuth signing key
//! and the upstream-secret encryption key derive unless set), and a token
//! too short to resist guessing. They say which setting is wrong, and never
//! echo its value.

use std::process::Stdio;
use std::time::Duration;

use mneme_e2e_tests::processes::{free_port, service_binary};

/// Runs `binary` with `env` only; returns its exit status and stderr.
async fn run_until_exit(binary: &str, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let child = tokio::process::Command::new(service_binary(binary))
        .env_clear()
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{binary} started instead of refusing to"))
        .unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn services_refuse_to_start_without_a_strong_internal_token() {
    let redis = std::env::var("MNEME_TEST_REDIS_URL").expect("MNEME_TEST_REDIS_URL");
    // Nothing listens here: a service that got past its checks would
    // fail later, with another message.
    let database = format!("postgres://nobody:nothing@127.0.0.1:{}/none", free_port());
    let short = "short-token-1234";
    for binary in ["mneme-gateway", "mneme-recall", "mneme-remember"] {
        let base = [
            ("MNEME_DATABASE_URL", database.as_str()),
            ("MNEME_REDIS_URL", redis.as_str()),
            ("MNEME_EMBEDDER", "hash"),
        ];
        let (status, stderr) = run_until_exit(binary, &base).await;
        assert!(!status.success(), "{binary} started without a token");
        assert!(
            stderr.contains("MNEME_INTERNAL_TOKEN"),
            "{binary} did not name the missing setting: {stderr}"
        );

        let mut with_short = base.to_vec();
        with_short.push(("MNEME_INTERNAL_TOKEN", short));
        let (status, stderr) = run_until_exit(binary, &with_short).await;
        assert!(
            !status.success(),
            "{binary} started with a 16-character token"
        );
        assert!(
            stderr.contains("MNEME_INTERNAL_TOKEN") && stderr.contains("32 characters"),
            "{binary} did not explain the weak token: {stderr}"
        );
        assert!(
            !stderr.contains(short),
            "{binary} echoed the token: {stderr}"
        );
    }
}
