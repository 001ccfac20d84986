//! `/admin/api/openapi.json`: the admin API's OpenAPI 3.1 description,
//! built from the route table below (kept next to `super::routes`; the
//! API tests check that every documented route answers).

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

use crate::App;

/// (method, path, who may call it, summary).
pub(crate) const ROUTES: &[(&str, &str, &str, &str)] = &[
    (
        "post",
        "/session",
        "anyone",
        "Sign in with email and password; sets the session cookie.",
    ),
    (
        "get",
        "/session",
        "signed in",
        "Who is signed in, and the CSRF token for changes.",
    ),
    ("delete", "/session", "signed in", "Sign out."),
    (
        "get",
        "/tenants",
        "signed in",
        "Tenants: all for platform admins, one's own otherwise.",
    ),
    ("post", "/tenants", "platform", "Create a tenant."),
    (
        "patch",
        "/tenants/{id}",
        "platform",
        "Suspend or reactivate a tenant.",
    ),
    (
        "get",
        "/overview",
        "any role",
        "Counts, health, today's calls, recent changes and alerts.",
    ),
    ("get", "/users", "manage", "The tenant's people."),
    (
        "post",
        "/users",
        "manage",
        "Add a person (owners only add owners).",
    ),
    (
        "patch",
        "/users/{id}",
        "manage",
        "Change a person's role or status, or reset their password.",
    ),
    (
        "get",
        "/keys",
        "manage",
        "API keys with fragment counts and today's calls.",
    ),
    (
        "post",
        "/keys",
        "manage",
        "Create a key; the answer holds its secret, shown this once.",
    ),
    (
        "get",
        "/keys/{id}",
        "manage",
        "A key, its usage and its standing against its limits.",
    ),
    (
        "patch",
        "/keys/{id}",
        "manage",
        "Change a key's name, permissions, defaults, limits or expiry.",
    ),
    (
        "post",
        "/keys/{id}/revoke",
        "manage",
        "Revoke a key at once on every pod.",
    ),
    ("get", "/groups", "manage", "Key groups and their members."),
    ("post", "/groups", "manage", "Create a key group."),
    ("delete", "/groups/{id}", "manage", "Delete a key group."),
    (
        "put",
        "/groups/{id}/members/{key_id}",
        "manage",
        "Add a key to a group.",
    ),
    (
        "delete",
        "/groups/{id}/members/{key_id}",
        "manage",
        "Remove a key from a group.",
    ),
    (
        "get",
        "/memory/overview",
        "any role",
        "Memory counts by type, key and topic.",
    ),
    (
        "get",
        "/memory",
        "any role",
        "Browse memories: q, type, topic, key, workspace, includeInvalid, limit, cursor.",
    ),
    (
        "get",
        "/memory/{id}",
        "any role",
        "One memory with its links and earlier versions.",
    ),
    (
        "patch",
        "/memory/{id}",
        "manage",
        "Amend a memory (versioned).",
    ),
    ("delete", "/memory/{id}", "manage", "Forget a memory."),
    (
        "get",
        "/memory/export",
        "manage",
        "Export memories as NDJSON (optionally of one key).",
    ),
    (
        "post",
        "/memory/import",
        "manage",
        "Import NDJSON memories as a key, through the normal write path.",
    ),
    (
        "get",
        "/graph",
        "any role",
        "Knowledge graph: the most important memories and their links.",
    ),
    ("get", "/sessions", "any role", "Live MCP sessions."),
    (
        "delete",
        "/sessions/{id}",
        "manage",
        "Terminate an MCP session.",
    ),
    (
        "get",
        "/search-analytics",
        "any role",
        "Recalls per day: count, empty results, latency.",
    ),
    (
        "get",
        "/surfacing",
        "any role",
        "Active surfacing: events, ratings, per tool.",
    ),
    (
        "get",
        "/upstreams",
        "manage",
        "Upstream MCP servers behind the proxy.",
    ),
    (
        "get",
        "/consolidation/runs",
        "any role",
        "Consolidation run history.",
    ),
    (
        "post",
        "/consolidation/run",
        "manage",
        "Run consolidation now (or a dry run).",
    ),
    (
        "get",
        "/usage",
        "any role",
        "Tool calls per day and per key.",
    ),
    (
        "get",
        "/metrics",
        "any role",
        "This gateway pod's request figures and the last hour.",
    ),
    (
        "get",
        "/audit",
        "manage",
        "The audit log of changes, newest first.",
    ),
];

pub(super) async fn document(State(app): State<App>) -> Json<Value> {
    let mut paths = Map::new();
    for (method, path, role, summary) in ROUTES {
        let parameters: Vec<Value> = path
            .split('/')
            .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .chain(
                (*role != "platform" && !path.starts_with("/session") && !path.starts_with("/tenants"))
                    .then(|| json!({
                        "name": "tenant", "in": "query", "required": false,
                        "description": "The tenant to act in (platform admins only; required for them).",
                        "schema": {"type": "string", "format": "uuid"},
                    })),
            )
            .collect();
        let operation = json!({
            "summary": summary,
            "description": format!("Who may call it: {role}."),
            "parameters": parameters,
            "security": if *role == "anyone" { json!([]) } else { json!([{"session": []}]) },
            "responses": {
                "200": {"description": "OK (JSON; see docs/ADMIN.md)"},
                "default": {"description": "{\"error\": {\"code\", \"message\"}}"},
            },
        });
        let entry = paths
            .entry(format!("/admin/api{path}"))
            .or_insert_with(|| json!({}));
        entry[*method] = operation;
    }
    Json(json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mneme admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "For people signed in to the dashboard. Changes need the X-CSRF-Token header from GET /admin/api/session.",
        },
        "servers": [{"url": app.public_url}],
        "components": {"securitySchemes": {"session": {
            "type": "apiKey", "in": "cookie",
            "name": if app.public_url.starts_with("https://") { "__Host-mneme-admin" } else { "mneme-admin" },
        }}},
        "paths": paths,
    }))
}
