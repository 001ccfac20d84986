//! Authentication of every protected request.
//!
//! The bearer credential is an API key (`Authorization: Bearer mn_…`) or an
//! OAuth access token (a JWT of [`crate::oauth`], acting as one key with
//! the permissions its scope grants). The resolved [`Principal`] is stored
//! in the request extensions, where MCP tools read it. A 401 names the
//! protected-resource metadata, where MCP clients discover how to sign in. Credentials
//! are accepted only in the `Authorization` header: one in the query string
//! would end up in access logs, so such requests are refused outright.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use mneme_core::principal::DEFAULT_AGENT_ID;
use mneme_core::{Error, Permission, Principal};
use mneme_store::api_keys::{self, Authenticated};
use mneme_store::{Store, StoreError};

use crate::App;
use crate::error::ApiError;
use crate::limits::KeyLimits;
use crate::tools::Mode;

/// Restricts a session to a set of tools (see [`Mode`]).
pub(crate) const MODE_HEADER: &str = "x-mneme-mode";

/// Resolves API keys, remembering verified ones for a short while so a busy
/// session does not cost a database round trip per request.
#[derive(Clone)]
pub(crate) struct KeyResolver {
    store: Store,
    /// Verified keys by SHA-256 of the raw key; `None` when caching is off.
    cache: Option<moka::sync::Cache<[u8; 32], Arc<Authenticated>>>,
    /// Keys named by access tokens, by tenant and key id.
    by_id: Option<moka::sync::Cache<(uuid::Uuid, uuid::Uuid), Arc<Authenticated>>>,
}

impl std::fmt::Debug for KeyResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyResolver")
            .field("cached", &self.cache.is_some())
            .finish()
    }
}

/// Verified keys a pod keeps at most.
const KEY_CACHE_CAPACITY: u64 = 10_000;

impl KeyResolver {
    pub(crate) fn new(store: Store, ttl: Duration) -> Self {
        let cache = (!ttl.is_zero()).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(KEY_CACHE_CAPACITY)
                .time_to_live(ttl)
                .support_invalidation_closures()
                .build()
        });
        let by_id = (!ttl.is_zero()).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(KEY_CACHE_CAPACITY)
                .time_to_live(ttl)
                .support_invalidation_closures()
                .build()
        });
        Self {
            store,
            cache,
            by_id,
        }
    }

    /// Forgets a revoked key at once, whatever credential named it.
    pub(crate) fn forget_key(&self, key_id: uuid::Uuid) {
        if let Some(cache) = &self.cache {
            let _ = cache.invalidate_entries_if(move |_, found| found.key.id == key_id);
        }
        if let Some(cache) = &self.by_id {
            let _ = cache.invalidate_entries_if(move |(_, id), _| *id == key_id);
        }
    }

    /// A key by id, for access tokens that name it.
    pub(crate) async fn resolve_id(
        &self,
        tenant_id: uuid::Uuid,
        key_id: uuid::Uuid,
    ) -> Result<Option<Arc<Authenticated>>, StoreError> {
        if let Some(hit) = self
            .by_id
            .as_ref()
            .and_then(|c| c.get(&(tenant_id, key_id)))
        {
            return Ok(Some(hit));
        }
        let lookup = async {
            let mut client = self.store.client().await?;
            api_keys::authenticate_by_id(&mut client, tenant_id, key_id).await
        };
        let Some(found) = self.store.unless_silent(lookup).await? else {
            return Ok(None);
        };
        let found = Arc::new(found);
        if let Some(cache) = &self.by_id {
            cache.insert((tenant_id, key_id), Arc::clone(&found));
        }
        Ok(Some(found))
    }

    /// The key, when it was verified recently on this pod.
    fn cached(&self, raw: &str) -> Option<Arc<Authenticated>> {
        let digest = mneme_core::api_key::hash(raw);
        self.cache.as_ref().and_then(|c| c.get(&digest))
    }

    /// The verified key, or `None` for any credential that must not pass.
    /// Only successes are cached, so a wrong key costs a lookup every time.
    pub(crate) async fn resolve(
        &self,
        raw: &str,
    ) -> Result<Option<Arc<Authenticated>>, StoreError> {
        if let Some(hit) = self.cached(raw) {
            return Ok(Some(hit));
        }
        let digest = mneme_core::api_key::hash(raw);
        let lookup = async {
            let mut client = self.store.client().await?;
            api_keys::authenticate(&mut client, raw).await
        };
        let Some(found) = self.store.unless_silent(lookup).await? else {
            return Ok(None);
        };
        let found = Arc::new(found);
        if let Some(cache) = &self.cache {
            cache.insert(digest, Arc::clone(&found));
        }
        Ok(Some(found))
    }
}

/// Query parameters that look like credentials.
const CREDENTIAL_PARAMS: &[&str] = &["access_token", "api_key", "apikey", "key", "token"];

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn has_credential_in_query(request: &Request) -> bool {
    request.uri().query().is_some_and(|query| {
        query.split('&').any(|pair| {
            let name = pair.split('=').next().unwrap_or_default();
            CREDENTIAL_PARAMS
                .iter()
                .any(|p| name.eq_ignore_ascii_case(p))
        })
    })
}

/// 401 with the challenge MCP clients discover authorization from: the
/// absolute URL of the protected-resource metadata and the scopes to ask
/// for (RFC 9728 §5.1, MCP authorization).
fn unauthorized(app: &App, message: &str, token_presented: bool) -> Response {
    let mut response = ApiError(Error::unauthenticated(message)).into_response();
    let error = if token_presented {
        r#", error="invalid_token""#
    } else {
        ""
    };
    let challenge = format!(
        r#"Bearer resource_metadata="{}", scope="{}"{error}"#,
        app.oauth.resource_metadata_url(),
        crate::oauth::DEFAULT_SCOPE,
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// Why a credential was refused, as counted in `mneme_auth_failures_total`.
#[derive(Debug, Clone, Copy)]
enum AuthFailure {
    Missing,
    InUrl,
    UnknownKey,
    InvalidToken,
    Throttled,
}

impl AuthFailure {
    fn count(self) {
        let reason = match self {
            Self::Missing => "missing",
            Self::InUrl => "in_url",
            Self::UnknownKey => "unknown_key",
            Self::InvalidToken => "invalid_token",
            Self::Throttled => "throttled",
        };
        crate::metrics::METRICS
            .auth_failures
            .with_label_values(&[reason])
            .inc();
    }
}

/// 401, counted against the client's address.
async fn failed(
    app: &App,
    client_ip: Option<std::net::IpAddr>,
    message: &str,
    why: AuthFailure,
) -> Response {
    // A request without credentials guesses nothing and costs no lookup;
    // it is how every connector's discovery starts, from egress addresses
    // that claude.ai and ChatGPT users share, so it must not use up the
    // address's failures (and lock those users' sign-ins out).
    if let Some(ip) = client_ip
        && !matches!(why, AuthFailure::Missing)
    {
        app.limiter.record_failed_auth(ip).await;
    }
    crate::metrics::METRICS
        .rejected
        .with_label_values(&["unauthenticated"])
        .inc();
    why.count();
    unauthorized(app, message, !matches!(why, AuthFailure::Missing))
}

/// The bearer credential of a request, owned (so no borrow of the request
/// lives across an await: its body is not `Sync`).
pub(crate) fn bearer_of(request: &Request) -> Option<String> {
    bearer(request).map(str::to_owned)
}

/// The API key `token` names: `Err(401)` for one that does not verify. For
/// endpoints where a key is optional (client registration binds the
/// client to it).
pub(crate) async fn resolve_bearer_key(
    app: &App,
    token: &str,
    client_ip: Option<std::net::IpAddr>,
) -> Result<Option<Arc<Authenticated>>, Response> {
    match app.keys.resolve(token).await {
        Ok(Some(found)) => Ok(Some(found)),
        Ok(None) => Err(failed(
            app,
            client_ip,
            "invalid, revoked or expired API key",
            AuthFailure::UnknownKey,
        )
        .await),
        Err(error) => Err(ApiError(error.into()).into_response()),
    }
}

/// What a verified credential grants.
struct Credential {
    found: Arc<Authenticated>,
    /// Narrowed by an access token's scope; `None` for an API key.
    scope_permissions: Option<Vec<Permission>>,
}

/// Middleware: resolves the caller or answers 401.
pub(crate) async fn require_principal(
    State(app): State<App>,
    mut request: Request,
    next: Next,
) -> Response {
    if has_credential_in_query(&request) {
        AuthFailure::InUrl.count();
        return ApiError(Error::invalid_argument(
            "credentials are accepted only in the Authorization header, never in the URL",
        ))
        .into_response();
    }
    let client_ip = app.limiter.client_ip(&request);
    let Some(token) = bearer(&request).map(str::to_owned) else {
        return failed(
            &app,
            client_ip,
            "missing bearer credentials: send `Authorization: Bearer <API key or access token>`",
            AuthFailure::Missing,
        )
        .await;
    };
    let is_api_key = mneme_core::api_key::parse_prefix(&token).is_some();
    let credential = if is_api_key {
        let cached = app.keys.cached(&token);
        // Credentials this pod has not verified lately cost a database
        // lookup: an address that keeps failing is refused before that.
        if cached.is_none()
            && let Some(ip) = client_ip
            && let Some(refusal) = app.limiter.check_ip(ip).await
        {
            AuthFailure::Throttled.count();
            return refusal;
        }
        match cached {
            Some(found) => Some(Credential {
                found,
                scope_permissions: None,
            }),
            None => match app.keys.resolve(&token).await {
                Ok(found) => found.map(|found| Credential {
                    found,
                    scope_permissions: None,
                }),
                Err(error) => return ApiError(error.into()).into_response(),
            },
        }
    } else {
        match access_token(&app, &token).await {
            Ok(credential) => credential,
            Err(response) => return response,
        }
    };
    let Some(Credential {
        found,
        scope_permissions,
    }) = credential
    else {
        return failed(
            &app,
            client_ip,
            "invalid, revoked or expired API key or access token",
            if is_api_key {
                AuthFailure::UnknownKey
            } else {
                AuthFailure::InvalidToken
            },
        )
        .await;
    };
    let key = &found.key;
    // The session's mode: the `X-Mneme-Mode` header, else the key's default.
    let mode = match request.headers().get(MODE_HEADER) {
        Some(value) => match value
            .to_str()
            .map_err(|_| ())
            .and_then(|name| Mode::parse(name).map(|_| name).map_err(|_| ()))
        {
            Ok(name) => Some(name.to_owned()),
            Err(()) => {
                return ApiError(Error::invalid_argument(
                    "X-Mneme-Mode must be recall-only, write-only, onboarding or audit",
                ))
                .into_response();
            }
        },
        None => key
            .default_mode
            .clone()
            .filter(|name| Mode::parse(name).is_ok()),
    };
    let session_id = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if scope_permissions.is_some() {
        request.extensions_mut().insert(TokenKey {
            key_permissions: key.permissions.clone(),
        });
    }
    request.extensions_mut().insert(KeyLimits {
        tenant_rate_limit: found.tenant_rate_limit,
        key_rate_limit: key.rate_limit,
        daily_call_limit: key.daily_call_limit,
    });
    request.extensions_mut().insert(Principal {
        tenant_id: key.tenant_id,
        key_id: key.id,
        group_key_ids: found.group_key_ids.clone(),
        user_id: None,
        permissions: match &scope_permissions {
            None => key.permissions.clone(),
            Some(granted) => narrowed(&key.permissions, granted),
        },
        workspace: key.default_workspace.clone(),
        mode,
        session_id,
        agent_id: DEFAULT_AGENT_ID.to_owned(),
    });
    next.run(request).await
}

/// The key an access token acts as, if the token verifies and the key may
/// still be used (revocation and suspension apply at once, up to the
/// resolver's cache lifetime).
async fn access_token(app: &App, token: &str) -> Result<Option<Credential>, Response> {
    let Ok(claims) = app.oauth.keys.verify(token) else {
        return Ok(None);
    };
    match app.keys.resolve_id(claims.tenant_id, claims.key_id).await {
        Ok(found) => Ok(found.map(|found| Credential {
            found,
            scope_permissions: Some(crate::oauth::scope_permissions(&claims.scope)),
        })),
        Err(error) => Err(ApiError(error.into()).into_response()),
    }
}

/// The key's permissions that the granted scope covers: a token never
/// exceeds its key, and `memory:admin` is needed for admin tools.
fn narrowed(key: &[Permission], granted: &[Permission]) -> Vec<Permission> {
    let key_has = |p: Permission| key.contains(&p) || key.contains(&Permission::Admin);
    granted.iter().copied().filter(|p| key_has(*p)).collect()
}

/// Marks a request made with an access token: the permissions of the key
/// behind it, which the token's scope may narrow.
#[derive(Debug, Clone)]
pub(crate) struct TokenKey {
    key_permissions: Vec<Permission>,
}

/// The scope that grants `permission`.
fn scope_for(permission: Permission) -> &'static str {
    crate::oauth::SCOPES
        .iter()
        .find(|(_, granted)| *granted == permission)
        .map_or("memory:read", |(name, _)| *name)
}

/// Middleware after the message peek: a tool call that an access token's
/// scope does not cover, but its key would, gets 403 `insufficient_scope`
/// naming the scope to ask for (step-up authorization). What the key itself
/// may not do stays a tool error: asking again would not help.
pub(crate) async fn require_scope(
    State(app): State<App>,
    request: Request,
    next: Next,
) -> Response {
    let (Some(token_key), Some(principal)) = (
        request.extensions().get::<TokenKey>(),
        request.extensions().get::<Principal>(),
    ) else {
        return next.run(request).await;
    };
    let tool = request
        .extensions()
        .get::<crate::jsonrpc::McpCall>()
        .and_then(|call| call.tool.clone())
        .or_else(|| {
            request
                .uri()
                .path()
                .strip_prefix("/v1/tools/")
                .map(str::to_owned)
        });
    let Some(tool) = tool
        .as_deref()
        .and_then(|name| crate::tools::REGISTRY.get(name))
    else {
        return next.run(request).await;
    };
    let mut needed = vec![tool.permission];
    if tool.requires_admin {
        needed.push(Permission::Admin);
    }
    let key_has = |p: Permission| {
        token_key.key_permissions.contains(&p)
            || token_key.key_permissions.contains(&Permission::Admin)
    };
    let Some(missing) = needed
        .into_iter()
        .find(|p| !principal.has(*p) && key_has(*p))
    else {
        return next.run(request).await;
    };
    let mut response = ApiError(Error::permission_denied(format!(
        "the access token's scope does not include `{}`; authorize again with it",
        scope_for(missing)
    )))
    .into_response();
    let challenge = format!(
        r#"Bearer error="insufficient_scope", scope="{}", resource_metadata="{}""#,
        scope_for(missing),
        app.oauth.resource_metadata_url(),
    );
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}
