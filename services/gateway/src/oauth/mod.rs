//! mneme's OAuth 2.1 authorization server, for the chat hosts' connectors
//! (claude.ai, ChatGPT) and any MCP client that authorizes.
//!
//! Layout:
//! - [`keys`]: access-token signing keys, JWKS and claims;
//! - `metadata`: RFC 9728 protected-resource and RFC 8414 server metadata;
//! - `clients`: RFC 7591 registration, client-ID metadata documents
//!   (CIMD, fetched through an SSRF guard) and the redirect-URI rules;
//! - `authorize`: the sign-in and consent page;
//! - `token`: the token and revocation endpoints.
//!
//! Written by hand on axum (see `docs/SECURITY.md` for the model): the
//! maintained Rust authorization-server crates support neither dynamic
//! registration, CIMD, nor the metadata documents MCP clients discover
//! servers with. Every token acts as one concrete API key of one tenant;
//! its permissions are the key's, narrowed by the granted scope.

mod authorize;
mod clients;
pub(crate) mod keys;
mod metadata;
mod token;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mneme_cache::Cache;
use mneme_core::Permission;
use mneme_store::Store;
use sha2::{Digest, Sha256};

use crate::App;
pub(crate) use authorize::cookie_value;
pub(crate) use keys::{AccessClaims, TokenKeys};

/// Scopes a token can carry, and the key permission each grants.
pub(crate) const SCOPES: &[(&str, Permission)] = &[
    ("memory:read", Permission::Read),
    ("memory:write", Permission::Write),
    ("memory:admin", Permission::Admin),
];
/// Granted when a client asks for none.
pub(crate) const DEFAULT_SCOPE: &str = "memory:read memory:write";

/// The authorization server's shared state.
pub(crate) struct OAuth {
    pub(crate) keys: TokenKeys,
    /// The issuer: the gateway's public base URL.
    pub(crate) issuer: String,
    /// The protected resource: the MCP endpoint URL (tokens' `aud`).
    pub(crate) resource: String,
    pub(crate) config: mneme_config::OAuthConfig,
    pub(crate) store: Store,
    pub(crate) cache: Cache,
    pub(crate) clients: clients::ClientDirectory,
    /// Keys the CSRF tokens of the sign-in form.
    csrf_key: [u8; 32],
    /// Whether cookies may carry the `__Host-` prefix (https only).
    secure_cookies: bool,
    /// Fragment quota of keys created for connectors at consent.
    default_fragment_limit: Option<i32>,
}

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth")
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

impl OAuth {
    pub(crate) fn new(
        config: &mneme_config::Config,
        store: Store,
        cache: Cache,
        internal_token: &str,
    ) -> anyhow::Result<Self> {
        let gateway = &config.gateway;
        let issuer = gateway.public_url.clone();
        let resource = gateway.mcp_url();
        let keys = TokenKeys::new(&gateway.oauth, internal_token, &issuer, &resource)?;
        let csrf_key = Sha256::digest(format!("mneme oauth csrf v1:{internal_token}")).into();
        Ok(Self {
            keys,
            secure_cookies: issuer.starts_with("https://"),
            issuer,
            resource,
            config: gateway.oauth.clone(),
            clients: clients::ClientDirectory::new(gateway.outbound_allow_private),
            store,
            cache,
            csrf_key,
            default_fragment_limit: config.remember.default_fragment_limit,
        })
    }

    /// The absolute URL of an endpoint path.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.issuer)
    }

    /// The protected-resource metadata URL named in 401 challenges.
    pub(crate) fn resource_metadata_url(&self) -> String {
        self.url("/.well-known/oauth-protected-resource/mcp")
    }
}

/// The permissions a token's scope grants.
pub(crate) fn scope_permissions(scope: &str) -> Vec<Permission> {
    scope
        .split_whitespace()
        .filter_map(|s| SCOPES.iter().find(|(name, _)| *name == s).map(|(_, p)| *p))
        .collect()
}

/// A new opaque secret (codes, refresh tokens, client secrets).
pub(crate) fn random_token() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// What is stored of a secret: its SHA-256.
pub(crate) fn digest(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route(
            "/.well-known/oauth-protected-resource",
            get(metadata::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(metadata::protected_resource),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata::authorization_server),
        )
        .route(
            "/.well-known/oauth-authorization-server/mcp",
            get(metadata::authorization_server),
        )
        .route(
            "/.well-known/openid-configuration",
            get(metadata::authorization_server),
        )
        .route("/.well-known/jwks.json", get(metadata::jwks))
        .route("/register", post(clients::register))
        .route("/authorize", get(authorize::page).post(authorize::decide))
        .route("/token", post(token::token))
        .route("/revoke", post(token::revoke))
}

pub(crate) type Shared = Arc<OAuth>;
