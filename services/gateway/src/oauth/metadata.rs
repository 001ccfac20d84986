//! Discovery documents: where the resource is, who authorizes it, how.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use super::SCOPES;
use crate::App;

fn scopes() -> Vec<&'static str> {
    SCOPES.iter().map(|(name, _)| *name).collect()
}

/// RFC 9728, at the root and path-inserted for `/mcp` (clients try both).
pub(super) async fn protected_resource(State(app): State<App>) -> Json<Value> {
    let oauth = &app.oauth;
    Json(json!({
        "resource": oauth.resource,
        "authorization_servers": [oauth.issuer],
        "scopes_supported": scopes(),
        "bearer_methods_supported": ["header"],
        "resource_name": "mneme",
        "resource_documentation": oauth.url("/"),
    }))
}

/// RFC 8414 (also served as OpenID discovery, which some clients ask for).
pub(super) async fn authorization_server(State(app): State<App>) -> Json<Value> {
    let oauth = &app.oauth;
    Json(json!({
        "issuer": oauth.issuer,
        "authorization_endpoint": oauth.url("/authorize"),
        "token_endpoint": oauth.url("/token"),
        "registration_endpoint": oauth.url("/register"),
        "revocation_endpoint": oauth.url("/revoke"),
        "jwks_uri": oauth.url("/.well-known/jwks.json"),
        "scopes_supported": scopes(),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "client_id_metadata_document_supported": true,
        "authorization_response_iss_parameter_supported": true,
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["EdDSA"],
    }))
}

pub(super) async fn jwks(State(app): State<App>) -> Json<Value> {
    Json(app.oauth.keys.jwks())
}
