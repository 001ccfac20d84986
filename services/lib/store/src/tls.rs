//! TLS for PostgreSQL connections (rustls with aws-lc-rs, chosen explicitly
//! so no process-wide crypto provider is needed).
//!
//! Whether a connection uses TLS is the URL's `sslmode`, as tokio-postgres
//! reads it: `disable` never, `prefer` (the default) when the server offers
//! it, `require` always. What is *checked* follows libpq:
//! - `require`, or any mode with a CA file (`MNEME_DATABASE_CA_FILE`): the
//!   server's certificate must chain to the system's roots or the file's and
//!   name the host connected to;
//! - `prefer` without a CA file: the connection is encrypted but the
//!   certificate is not checked. `prefer` cannot stop an active attacker
//!   anyway (who can answer "no TLS"), and checking would break local servers
//!   that offer TLS with a self-signed certificate (Debian enables its
//!   "snakeoil" certificate by default), which plaintext used to reach.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::Client;
use tokio_postgres::config::SslMode;

pub use tokio_postgres_rustls::MakeRustlsConnect;

use crate::{Result, StoreError};

/// The setting that names the CA file, for error messages.
const CA_FILE_SETTING: &str = mneme_config::settings::DATABASE_CA_FILE.name;

/// The connector for connections whose `sslmode` is `ssl_mode`, trusting the
/// system's roots plus the certificates in `ca_file`. Fails when `ca_file`
/// cannot be read or holds no certificate.
pub fn connector(ssl_mode: SslMode, ca_file: Option<&Path>) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Invalid(format!("cannot set up TLS: {e}")))?;
    let verify = ssl_mode == SslMode::Require || ca_file.is_some();
    let mut config = if verify {
        builder
            .with_root_certificates(trusted_roots(ca_file)?)
            .with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(
                provider.signature_verification_algorithms,
            )))
            .with_no_client_auth()
    };
    // As libpq 17 does; needed for `sslnegotiation=direct`, ignored before 17.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeRustlsConnect::new(config))
}

/// Opens one connection to `url` outside the pool (migrations, fixtures) and
/// drives it in the background until the client is dropped.
pub async fn connect(
    url: &str,
    ca_file: Option<&Path>,
) -> Result<(Client, tokio::task::JoinHandle<()>)> {
    let config: tokio_postgres::Config = url.parse()?;
    let tls = connector(config.get_ssl_mode(), ca_file)?;
    let (client, connection) = config.connect(tls).await?;
    let driver = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "database connection ended with an error");
        }
    });
    Ok((client, driver))
}

/// The system's root certificates plus those of `ca_file`.
fn trusted_roots(ca_file: Option<&Path>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(system_roots().iter().cloned());
    if let Some(path) = ca_file {
        for cert in read_ca_file(path)? {
            roots.add(cert).map_err(|e| {
                StoreError::Invalid(format!(
                    "{CA_FILE_SETTING}={}: unusable CA certificate: {e}",
                    path.display()
                ))
            })?;
        }
    }
    if roots.is_empty() {
        return Err(StoreError::Invalid(format!(
            "TLS to PostgreSQL needs trusted root certificates, but the system has none; \
             set {CA_FILE_SETTING} or install the ca-certificates package"
        )));
    }
    Ok(roots)
}

/// The certificates of a PEM file; an unreadable file or one without any
/// certificate is an error naming the setting.
fn read_ca_file(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let invalid =
        |why: String| StoreError::Invalid(format!("{CA_FILE_SETTING}={}: {why}", path.display()));
    let pem = std::fs::read(path).map_err(|e| invalid(format!("cannot read the file: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not a PEM file of certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid("holds no PEM certificate".into()));
    }
    Ok(certs)
}

/// The system's trust store, loaded once per process (`SSL_CERT_FILE` and
/// `SSL_CERT_DIR` override where it is looked for).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for error in &loaded.errors {
            tracing::warn!(%error, "some system root certificates could not be loaded");
        }
        loaded.certs
    })
}

/// `prefer` without a CA file: any certificate is accepted, but the
/// handshake's signatures are still verified, so the session keys belong to
/// whoever holds the presented certificate's key.
#[derive(Debug)]
struct EncryptOnly(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_an_error_naming_the_setting() {
        let Err(err) = connector(
            SslMode::Require,
            Some(Path::new("/nonexistent/mneme-ca.pem")),
        ) else {
            panic!("a missing CA file must be refused");
        };
        let message = err.to_string();
        assert!(
            message.contains("MNEME_DATABASE_CA_FILE=/nonexistent/mneme-ca.pem"),
            "{message}"
        );
        assert!(message.contains("cannot read"), "{message}");
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let path =
            std::env::temp_dir().join(format!("mneme-not-a-ca-{}.pem", uuid::Uuid::new_v4()));
        std::fs::write(&path, "not a certificate\n").unwrap();
        let result = connector(SslMode::Prefer, Some(&path));
        std::fs::remove_file(&path).unwrap();
        let Err(err) = result else {
            panic!("a file without certificates must be refused");
        };
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
    }

    #[test]
    fn every_mode_builds_a_connector_without_a_process_wide_provider() {
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            connector(mode, None).unwrap();
        }
    }
}
