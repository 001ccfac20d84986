//! TLS to a real PostgreSQL: `deploy/local/setup.sh` (with
//! `MNEME_INSTALL_TEST_TOOLS=1`) turns TLS on in the local server with a
//! certificate for `localhost` and 127.0.0.1 signed by a throwaway CA, and
//! exports that CA's file as `MNEME_TEST_PG_CA_FILE`.

use std::path::{Path, PathBuf};

use mneme_store::{Store, StoreError, StoreOptions};
use mneme_test_support::TestDatabase;

/// A self-signed CA that signed nothing the server presents.
const UNRELATED_CA: &str = "-----BEGIN CERTIFICATE-----
MIIBqjCCAVGgAwIBAgIUEud/zybK9A8CSbeIhkN0IBPKEmkwCgYIKoZIzj0EAwIw
IjEgMB4GA1UEAwwXbW5lbWUgdW5yZWxhdGVkIHRlc3QgQ0EwIBcNMjYxMjAxMTUy
MzI2WhgPMjEyNjExMDcxNTIzMjZaMCIxIDAeBgNVBAMMF21uZW1lIHVucmVsYXRl
ZCB0ZXN0IENBMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdVjEcRU0rhkGKi3h
HMySnyf2VX0sDmo115qwsqRIBn5KZmbm69UqkNoFVIUVPeHeQa4ODbp3g7im9etX
zKJSjKNjMGEwHQYDVR0OBBYEFG2/ZxO3d40AMv61eBfiGI46X1ibMB8GA1UdIwQY
MBaAFG2/ZxO3d40AMv61eBfiGI46X1ibMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0P
AQH/BAQDAgEGMAoGCCqGSM49BAMCA0cAMEQCIAtcfbaPgsS+72iwvptVtHKVSdT4
dp38TXKDPZmfib4eAiAxIoS32lN3qdhGZUyfqoxykrGUqyBy1HPO3Rcdrs07GA==
-----END CERTIFICATE-----
";

/// The CA that signed the test server's certificate.
fn server_ca() -> PathBuf {
    let path = std::env::var("MNEME_TEST_PG_CA_FILE").unwrap_or_else(|_| {
        panic!(
            "environment variable `MNEME_TEST_PG_CA_FILE` must be set for this test; \
             run the suite with ./deploy/local/test.sh, which turns TLS on in the local \
             PostgreSQL and sets it"
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "MNEME_TEST_PG_CA_FILE={} does not exist; run \
         `MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh` to create it",
        path.display()
    );
    path
}

/// The unrelated CA, in a file of its own for this test.
struct UnrelatedCa(PathBuf);

impl UnrelatedCa {
    fn new() -> Self {
        let path =
            std::env::temp_dir().join(format!("mneme-unrelated-ca-{}.pem", uuid::Uuid::new_v4()));
        std::fs::write(&path, UNRELATED_CA).expect("write the unrelated CA");
        Self(path)
    }
}

impl Drop for UnrelatedCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn store(url: &str, ca_file: Option<&Path>) -> Store {
    Store::connect(
        url,
        &StoreOptions {
            ca_file: ca_file.map(Path::to_path_buf),
            ..StoreOptions::default()
        },
    )
    .expect("the pool is built")
}

/// Whether the store's connection is encrypted, according to the server.
async fn uses_tls(store: &Store) -> Result<bool, StoreError> {
    let client = store.client().await?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// The app URL (key-value form, `host=127.0.0.1 …`) with `extra` appended.
fn url(db: &TestDatabase, extra: &str) -> String {
    format!("{} {extra}", db.app_url)
}

#[tokio::test]
async fn require_with_the_servers_ca_is_encrypted() {
    let ca = server_ca();
    let db = TestDatabase::create().await;
    let by_ip = store(&url(&db, "sslmode=require"), Some(&ca));
    assert!(
        uses_tls(&by_ip).await.unwrap(),
        "sslmode=require over 127.0.0.1"
    );
    // The certificate names `localhost` too.
    assert!(
        db.app_url.contains("host=127.0.0.1 "),
        "the test server is expected at 127.0.0.1: {}",
        db.app_url
    );
    let by_name = store(
        &url(&db, "sslmode=require").replacen("host=127.0.0.1 ", "host=localhost ", 1),
        Some(&ca),
    );
    assert!(
        uses_tls(&by_name).await.unwrap(),
        "sslmode=require over localhost"
    );
    // Ordinary queries run over it.
    by_ip.check_service_role(false).await.unwrap();
}

#[tokio::test]
async fn require_refuses_a_certificate_no_trusted_ca_signed() {
    let db = TestDatabase::create().await;
    let unrelated = UnrelatedCa::new();
    for (ca_file, what) in [
        (None, "the system's roots"),
        (Some(unrelated.0.as_path()), "an unrelated CA file"),
    ] {
        let refusing = store(&url(&db, "sslmode=require"), ca_file);
        let err = uses_tls(&refusing)
            .await
            .expect_err("a certificate no trusted CA signed must be refused");
        let message = format!("{err:?} / {err}");
        assert!(
            message.contains("UnknownIssuer") || message.to_lowercase().contains("certificate"),
            "with {what}, the error should be about the certificate: {message}"
        );
    }
}

#[tokio::test]
async fn prefer_checks_the_certificate_only_with_a_ca_file() {
    let ca = server_ca();
    let db = TestDatabase::create().await;
    // The default, `prefer`, without a CA file: encrypted, unchecked (so
    // servers with self-signed certificates keep working).
    assert!(uses_tls(&store(&db.app_url, None)).await.unwrap());
    // With a CA file, `prefer` checks the certificate: the right CA passes…
    assert!(
        uses_tls(&store(&url(&db, "sslmode=prefer"), Some(&ca)))
            .await
            .unwrap()
    );
    // …and an unrelated one is refused rather than falling back to plaintext.
    let unrelated = UnrelatedCa::new();
    uses_tls(&store(&url(&db, "sslmode=prefer"), Some(&unrelated.0)))
        .await
        .expect_err("prefer with a CA file checks the certificate");
}

#[tokio::test]
async fn disable_stays_plaintext() {
    let db = TestDatabase::create().await;
    let plain = store(&url(&db, "sslmode=disable"), None);
    assert!(!uses_tls(&plain).await.unwrap());
}

#[tokio::test]
async fn an_unreadable_ca_file_fails_at_start_up_naming_the_setting() {
    let err = Store::connect(
        "postgres://mneme_app@127.0.0.1:5432/mneme?sslmode=require",
        &StoreOptions {
            ca_file: Some(PathBuf::from("/nonexistent/rds-ca.pem")),
            ..StoreOptions::default()
        },
    )
    .expect_err("a missing CA file must stop start-up");
    assert!(
        err.to_string()
            .contains("MNEME_DATABASE_CA_FILE=/nonexistent/rds-ca.pem: cannot read the file"),
        "{err}"
    );
}
