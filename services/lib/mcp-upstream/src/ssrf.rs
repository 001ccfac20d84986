//! Which upstream URLs mneme may dial on a tenant's behalf.
//!
//! A tenant sets the URL, so without a guard it could point mneme at the
//! cloud metadata service, the database or anything else on the private
//! network. The rule: `https` (or `http` when the operator allows private
//! ranges, for development), a host, no credentials in the URL, and every
//! address the host resolves to public ([`mneme_core::net::is_public`]).
//! The HTTP client is then pinned to the checked addresses with redirects
//! off, so a second DNS answer (rebinding) or a redirect cannot lead
//! elsewhere.

use std::net::SocketAddr;
use std::time::Duration;

use mneme_core::net::is_public;
use reqwest::Url;

/// Why a URL may not be dialled. The messages are safe to show the tenant:
/// they name the rule, never what a private address answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SsrfError {
    #[error("the upstream URL is not a valid absolute URL")]
    Invalid,
    #[error("the upstream URL must use https")]
    Scheme,
    #[error("the upstream URL must not contain a user name or password (use headers)")]
    Credentials,
    #[error("the upstream host does not resolve")]
    Unresolved,
    #[error("the upstream host resolves to a non-public address")]
    Private,
}

/// The operator's rule for upstream URLs.
#[derive(Debug, Clone, Copy)]
pub struct UrlPolicy {
    /// Private, loopback and link-local addresses (and plain http) allowed:
    /// for development and single-tenant installs only.
    pub allow_private: bool,
    /// Bound on the DNS lookup.
    pub resolve_timeout: Duration,
}

impl UrlPolicy {
    /// Checks what can be checked without the network (for registration).
    pub fn check_syntax(&self, url: &str) -> Result<Url, SsrfError> {
        let url = Url::parse(url).map_err(|_| SsrfError::Invalid)?;
        match url.scheme() {
            "https" => {}
            "http" if self.allow_private => {}
            _ => return Err(SsrfError::Scheme),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(SsrfError::Invalid);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(SsrfError::Credentials);
        }
        Ok(url)
    }

    /// Resolves the URL's host and checks every address; returns the
    /// addresses to pin the connection to.
    pub async fn resolve(&self, url: &Url) -> Result<Vec<SocketAddr>, SsrfError> {
        let host = url.host_str().ok_or(SsrfError::Invalid)?;
        let port = url.port_or_known_default().ok_or(SsrfError::Invalid)?;
        let addresses: Vec<SocketAddr> = tokio::time::timeout(
            self.resolve_timeout,
            tokio::net::lookup_host((host.trim_matches(['[', ']']), port)),
        )
        .await
        .map_err(|_| SsrfError::Unresolved)?
        .map_err(|_| SsrfError::Unresolved)?
        .collect();
        if addresses.is_empty() {
            return Err(SsrfError::Unresolved);
        }
        if !self.allow_private && addresses.iter().any(|a| !is_public(a.ip())) {
            return Err(SsrfError::Private);
        }
        Ok(addresses)
    }

    /// A client for `url` that can only reach the checked addresses and
    /// follows no redirects.
    pub async fn pinned_client(
        &self,
        url: &Url,
        connect_timeout: Duration,
    ) -> Result<reqwest::Client, SsrfError> {
        let addresses = self.resolve(url).await?;
        let host = url.host_str().ok_or(SsrfError::Invalid)?;
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(connect_timeout)
            .resolve_to_addrs(host.trim_matches(['[', ']']), &addresses)
            .build()
            .map_err(|_| SsrfError::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow_private: bool) -> UrlPolicy {
        UrlPolicy {
            allow_private,
            resolve_timeout: Duration::from_secs(2),
        }
    }

    #[test]
    fn syntax_rules() {
        let strict = policy(false);
        assert!(strict.check_syntax("https://mcp.example.com/mcp").is_ok());
        assert_eq!(
            strict.check_syntax("http://mcp.example.com/mcp"),
            Err(SsrfError::Scheme)
        );
        assert_eq!(
            strict.check_syntax("file:///etc/passwd"),
            Err(SsrfError::Scheme)
        );
        assert_eq!(
            strict.check_syntax("https://user:pw@mcp.example.com/"),
            Err(SsrfError::Credentials)
        );
        assert_eq!(strict.check_syntax("not a url"), Err(SsrfError::Invalid));
        assert!(
            policy(true)
                .check_syntax("http://127.0.0.1:3001/mcp")
                .is_ok()
        );
    }

    #[tokio::test]
    async fn private_addresses_are_refused_unless_allowed() {
        for url in [
            "https://127.0.0.1/mcp",
            "https://[::1]:8443/mcp",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/mcp",
        ] {
            let parsed = Url::parse(url).unwrap();
            assert_eq!(
                policy(false).resolve(&parsed).await,
                Err(SsrfError::Private),
                "{url}"
            );
            assert!(policy(true).resolve(&parsed).await.is_ok(), "{url}");
        }
    }
}
