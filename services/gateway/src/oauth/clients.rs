//! Who may ask for tokens: clients registered through RFC 7591 (`/register`)
//! and clients whose `client_id` is the URL of their metadata document
//! (CIMD), fetched through an SSRF guard; and where codes may be sent.

use std::net::SocketAddr;

use mneme_core::net::is_public;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use mneme_store::oauth::{self, OAuthClient};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{digest, random_token};
use crate::App;

/// Redirect URIs of the chat hosts, allowed for every client.
const HOST_CALLBACKS: &[&str] = &[
    "https://claude.ai/api/mcp/auth_callback",
    "https://claude.com/api/mcp/auth_callback",
    "https://chatgpt.com/connector_platform_oauth_redirect",
];
/// ChatGPT gives each connector its own callback under this prefix.
const HOST_CALLBACK_PREFIX: &str = "https://chatgpt.com/connector/oauth/";

const CIMD_MAX_BYTES: usize = 5 * 1024;
const CIMD_TIMEOUT: Duration = Duration::from_secs(5);
const CIMD_CACHE_TTL: Duration = Duration::from_secs(300);

/// A client as the authorization server sees it.
#[derive(Debug, Clone)]
pub(crate) struct Client {
    pub(crate) client_id: String,
    pub(crate) name: String,
    pub(crate) redirect_uris: Vec<String>,
    pub(crate) secret_hash: Option<Vec<u8>>,
    /// `(tenant, key)` the client may act as, when an API key registered it.
    pub(crate) bound_key: Option<(uuid::Uuid, uuid::Uuid)>,
}

impl From<OAuthClient> for Client {
    fn from(stored: OAuthClient) -> Self {
        Self {
            client_id: stored.client_id,
            name: stored.client_name,
            redirect_uris: stored.redirect_uris,
            secret_hash: stored.client_secret_hash,
            bound_key: stored.bound_key,
        }
    }
}

impl Client {
    /// Whether the authorization server may send a code to `uri`.
    pub(crate) fn allows_redirect(&self, uri: &str) -> bool {
        if HOST_CALLBACKS.contains(&uri) || is_loopback_redirect(uri) {
            return true;
        }
        if let Some(rest) = uri.strip_prefix(HOST_CALLBACK_PREFIX) {
            // Host-locked: no tricks that change the authority or escape the path.
            return !rest.is_empty()
                && !rest.contains(['@', '\\', '#'])
                && !rest.contains("..")
                && reqwest::Url::parse(uri).is_ok_and(|u| u.host_str() == Some("chatgpt.com"));
        }
        self.redirect_uris
            .iter()
            .any(|registered| registered == uri)
    }
}

/// `http://127.0.0.1|[::1]|localhost[:port]/…`: native apps and CLIs on the
/// user's own machine (RFC 8252 §7.3, any port).
fn is_loopback_redirect(uri: &str) -> bool {
    reqwest::Url::parse(uri).is_ok_and(|u| {
        u.scheme() == "http"
            && u.fragment().is_none()
            && matches!(u.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"))
    })
}

/// A redirect URI a client may register: absolute, no fragment, https or
/// loopback http.
fn registrable_redirect(uri: &str) -> bool {
    reqwest::Url::parse(uri).is_ok_and(|u| {
        u.fragment().is_none()
            && u.host_str().is_some()
            && (u.scheme() == "https" || is_loopback_redirect(uri))
    })
}

/// Finds clients: registered ones in PostgreSQL, metadata documents on the
/// web (cached).
pub(crate) struct ClientDirectory {
    documents: moka::future::Cache<String, Arc<Client>>,
    allow_private: bool,
}

impl ClientDirectory {
    pub(crate) fn new(allow_private: bool) -> Self {
        Self {
            documents: moka::future::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(CIMD_CACHE_TTL)
                .build(),
            allow_private,
        }
    }

    /// The client, or why there is none usable.
    pub(crate) async fn find(
        &self,
        store: &mneme_store::Store,
        client_id: &str,
    ) -> Result<Arc<Client>, String> {
        if client_id.starts_with("https://") || client_id.starts_with("http://") {
            if let Some(cached) = self.documents.get(client_id).await {
                return Ok(cached);
            }
            let client = Arc::new(self.fetch_document(client_id).await?);
            self.documents
                .insert(client_id.to_owned(), client.clone())
                .await;
            return Ok(client);
        }
        let db = store.client().await.map_err(|e| e.to_string())?;
        oauth::use_client(&db, client_id)
            .await
            .map_err(|e| e.to_string())?
            .map(|stored| Arc::new(Client::from(stored)))
            .ok_or_else(|| "unknown client_id".to_owned())
    }

    /// Fetches a client-ID metadata document: https only, every address
    /// the host resolves to public, the connection pinned to a checked
    /// address, no redirects, at most 5 KB within 5 s.
    async fn fetch_document(&self, client_id: &str) -> Result<Client, String> {
        let url =
            reqwest::Url::parse(client_id).map_err(|_| "client_id is not a URL".to_owned())?;
        if url.scheme() != "https" && !(self.allow_private && url.scheme() == "http") {
            return Err("a client metadata document must be served over https".into());
        }
        let host = url
            .host_str()
            .ok_or_else(|| "client_id has no host".to_owned())?
            .to_owned();
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses: Vec<SocketAddr> = tokio::time::timeout(
            CIMD_TIMEOUT,
            tokio::net::lookup_host((host.trim_matches(['[', ']']), port)),
        )
        .await
        .map_err(|_| "client metadata host did not resolve in time".to_owned())?
        .map_err(|_| "client metadata host does not resolve".to_owned())?
        .collect();
        let Some(first) = addresses.first().copied() else {
            return Err("client metadata host does not resolve".into());
        };
        if !self.allow_private && addresses.iter().any(|a| !is_public(a.ip())) {
            return Err("client metadata host resolves to a non-public address".into());
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(CIMD_TIMEOUT)
            .resolve(&host, first)
            .build()
            .map_err(|e| e.to_string())?;
        let mut response = http
            .get(url.clone())
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|_| "client metadata document could not be fetched".to_owned())?;
        if !response.status().is_success() {
            return Err(format!(
                "client metadata document answered {}",
                response.status()
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|_| "client metadata document could not be read".to_owned())?
        {
            body.extend_from_slice(&chunk);
            if body.len() > CIMD_MAX_BYTES {
                return Err("client metadata document is larger than 5 KB".into());
            }
        }
        let document: ClientMetadata = serde_json::from_slice(&body)
            .map_err(|e| format!("client metadata document is invalid: {e}"))?;
        if document.client_id.as_deref() != Some(client_id) {
            return Err("client metadata document names another client_id".into());
        }
        let redirect_uris = document.redirect_uris.unwrap_or_default();
        if redirect_uris.is_empty() || !redirect_uris.iter().all(|u| registrable_redirect(u)) {
            return Err("client metadata document has no valid redirect_uris".into());
        }
        Ok(Client {
            client_id: client_id.to_owned(),
            name: document.client_name.unwrap_or(host),
            redirect_uris,
            // A document cannot hold a secret: such clients are public.
            secret_hash: None,
            bound_key: None,
        })
    }
}

/// RFC 7591 client metadata (the fields mneme uses).
#[derive(Debug, Deserialize)]
struct ClientMetadata {
    client_id: Option<String>,
    client_name: Option<String>,
    redirect_uris: Option<Vec<String>>,
    token_endpoint_auth_method: Option<String>,
    grant_types: Option<Vec<String>>,
    response_types: Option<Vec<String>>,
}

fn registration_error(error: &str, description: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": error, "error_description": description})),
    )
        .into_response()
}

/// `POST /register` (RFC 7591). With `Authorization: Bearer <API key>`, the
/// client is bound to that key and can never act as another.
pub(super) async fn register(State(app): State<App>, request: Request) -> Response {
    let client_ip = app.limiter.client_ip(&request);
    let token = crate::auth::bearer_of(&request);
    if let Some(ip) = client_ip
        && let Some(refusal) = app
            .limiter
            .admit_address("register", ip, app.oauth.config.register_per_ip)
            .await
    {
        return refusal;
    }
    let bound_key = match &token {
        Some(token) => match crate::auth::resolve_bearer_key(&app, token, client_ip).await {
            Ok(key) => key,
            Err(refusal) => return refusal,
        },
        None => None,
    };
    let body = match axum::body::to_bytes(request.into_body(), 64 * 1024).await {
        Ok(body) => body,
        Err(_) => return registration_error("invalid_client_metadata", "body too large"),
    };
    let metadata: ClientMetadata = match serde_json::from_slice(&body) {
        Ok(metadata) => metadata,
        Err(e) => return registration_error("invalid_client_metadata", &e.to_string()),
    };
    let redirect_uris = metadata.redirect_uris.unwrap_or_default();
    if redirect_uris.is_empty() || redirect_uris.len() > 20 {
        return registration_error("invalid_redirect_uri", "give 1 to 20 redirect_uris");
    }
    if let Some(bad) = redirect_uris.iter().find(|u| !registrable_redirect(u)) {
        return registration_error(
            "invalid_redirect_uri",
            &format!(
                "`{bad}`: use an absolute https URL (or http on a loopback address), without fragment"
            ),
        );
    }
    let auth_method = metadata
        .token_endpoint_auth_method
        .unwrap_or_else(|| "none".into());
    if !["none", "client_secret_post", "client_secret_basic"].contains(&auth_method.as_str()) {
        return registration_error(
            "invalid_client_metadata",
            "token_endpoint_auth_method must be none, client_secret_post or client_secret_basic",
        );
    }
    let grant_types = metadata
        .grant_types
        .unwrap_or_else(|| vec!["authorization_code".into(), "refresh_token".into()]);
    if grant_types
        .iter()
        .any(|g| g != "authorization_code" && g != "refresh_token")
    {
        return registration_error(
            "invalid_client_metadata",
            "grant_types may hold authorization_code and refresh_token",
        );
    }
    if metadata
        .response_types
        .is_some_and(|types| types.iter().any(|t| t != "code"))
    {
        return registration_error("invalid_client_metadata", "response_types may hold code");
    }
    let name: String = metadata
        .client_name
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "MCP client".into())
        .chars()
        .take(200)
        .collect();
    let secret = (auth_method != "none").then(random_token);
    let client = OAuthClient {
        client_id: format!("mneme-client-{}", &random_token()[..22]),
        client_name: name,
        redirect_uris,
        token_endpoint_auth_method: auth_method,
        client_secret_hash: secret.as_deref().map(digest),
        bound_key: bound_key.map(|k| (k.key.tenant_id, k.key.id)),
        created_at: chrono::Utc::now(),
    };
    let stored = async {
        let db = app.store.client().await?;
        oauth::register_client(&db, &client).await
    }
    .await;
    if let Err(error) = stored {
        tracing::error!(%error, "client registration failed");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": "temporarily_unavailable"})),
        )
            .into_response();
    }
    let mut body: Value = json!({
        "client_id": client.client_id,
        "client_id_issued_at": client.created_at.timestamp(),
        "client_name": client.client_name,
        "redirect_uris": client.redirect_uris,
        "token_endpoint_auth_method": client.token_endpoint_auth_method,
        "grant_types": grant_types,
        "response_types": ["code"],
    });
    if let Some(secret) = secret {
        body["client_secret"] = json!(secret);
        body["client_secret_expires_at"] = json!(0);
    }
    (
        StatusCode::CREATED,
        [(header::CACHE_CONTROL, "no-store")],
        Json(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(uris: &[&str]) -> Client {
        Client {
            client_id: "c".into(),
            name: "n".into(),
            redirect_uris: uris.iter().map(|u| (*u).to_owned()).collect(),
            secret_hash: None,
            bound_key: None,
        }
    }

    #[test]
    fn redirects_match_exactly_except_the_hosts_callbacks_and_loopback() {
        let c = client(&["https://app.example/cb"]);
        assert!(c.allows_redirect("https://app.example/cb"));
        assert!(!c.allows_redirect("https://app.example/cb/"));
        assert!(!c.allows_redirect("https://app.example/cb?x=1"));
        assert!(c.allows_redirect("https://claude.ai/api/mcp/auth_callback"));
        assert!(c.allows_redirect("https://chatgpt.com/connector/oauth/abc123"));
        assert!(!c.allows_redirect("https://chatgpt.com/connector/oauth/"));
        assert!(!c.allows_redirect("https://chatgpt.com/connector/oauth/x@evil.com"));
        assert!(!c.allows_redirect("https://chatgpt.com.evil.com/connector/oauth/x"));
        assert!(c.allows_redirect("http://127.0.0.1:53682/callback"));
        assert!(!c.allows_redirect("http://192.168.1.5/callback"));
    }
}
