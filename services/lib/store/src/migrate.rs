//! Schema migrations: the numbered SQL files in `migrations/`, embedded at
//! build time and applied by `mneme migrate` with refinery.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{Result, StoreError};

mod embedded {
    refinery::embed_migrations!("../../../migrations");
}

/// The table refinery records applied migrations in.
const HISTORY_TABLE: &str = "mneme_schema_history";

/// One applied migration, for reporting.
#[derive(Debug, Clone)]
pub struct Applied {
    pub version: i32,
    pub name: String,
}

/// Applies every pending migration over a dedicated connection to `url`
/// (a role allowed to create schemas; see `docs/OPERATIONS.md`), trusting
/// the system's root certificates for TLS.
pub async fn run(url: &str) -> Result<Vec<Applied>> {
    run_with_ca_file(url, None).await
}

/// [`run`], also trusting the CA certificates in `ca_file`
/// (`MNEME_DATABASE_CA_FILE`).
pub async fn run_with_ca_file(url: &str, ca_file: Option<&Path>) -> Result<Vec<Applied>> {
    apply(url, ca_file, refinery::Target::Latest).await
}

/// Applies the pending migrations up to `version` only: tests of a data
/// migration fill a database as it was before it, then [`run`] the rest.
pub async fn run_until(url: &str, version: i32) -> Result<Vec<Applied>> {
    apply(url, None, refinery::Target::Version(version)).await
}

async fn apply(
    url: &str,
    ca_file: Option<&Path>,
    target: refinery::Target,
) -> Result<Vec<Applied>> {
    let (mut client, driver) = crate::tls::connect(url, ca_file).await?;
    let mut runner = embedded::migrations::runner().set_target(target);
    let report = runner
        .set_migration_table_name(HISTORY_TABLE)
        .run_async(&mut client)
        .await
        .map_err(|e| StoreError::Invalid(format!("migration failed: {e}")));
    drop(client);
    let _ = driver.await;
    Ok(report?
        .applied_migrations()
        .iter()
        .map(|m| Applied {
            version: m.version(),
            name: m.name().to_owned(),
        })
        .collect())
}

/// A digest of every embedded migration; it changes whenever the schema
/// does. Test fixtures key their template databases by it.
pub fn fingerprint() -> String {
    let mut hasher = Sha256::new();
    for migration in embedded::migrations::runner().get_migrations() {
        hasher.update(migration.version().to_le_bytes());
        hasher.update(migration.checksum().to_le_bytes());
    }
    hex::encode(&hasher.finalize()[..8])
}
