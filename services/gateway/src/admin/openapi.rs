//! `/admin/api/openapi.json`: the admin API's OpenAPI 3.1 description,
//! written from the route table the router is built from
//! ([`super::table::ROUTES`]), so it lists every route the API serves.
//! Each operation names who may call it in `x-mneme-access` (`anyone`,
//! `signed in`, `any role`, `manage`, `platform`); the API tests sweep
//! every role over that.

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

use super::table::{Access, ROUTES};
use crate::App;

pub(super) async fn document(State(app): State<App>) -> Json<Value> {
    Json(describe(&app.public_url))
}

/// The document for a gateway whose public URL is `public_url`.
fn describe(public_url: &str) -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        let access = route.access.name();
        let parameters: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .chain(route.access.in_tenant().then(|| {
                json!({
                    "name": "tenant", "in": "query", "required": false,
                    "description": "The tenant to act in (platform admins only; required for them).",
                    "schema": {"type": "string", "format": "uuid"},
                })
            }))
            .collect();
        let operation = json!({
            "summary": route.summary,
            "description": format!("Who may call it: {access}."),
            "x-mneme-access": access,
            "parameters": parameters,
            "security": if route.access == Access::Anyone { json!([]) } else { json!([{"session": []}]) },
            "responses": {
                "200": {"description": "OK (JSON; see docs/ADMIN.md)"},
                "default": {"description": "{\"error\": {\"code\", \"message\"}}"},
            },
        });
        let entry = paths
            .entry(format!("/admin/api{}", route.path))
            .or_insert_with(|| json!({}));
        entry[route.verb.name()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "mneme admin API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "For people signed in to the dashboard. Changes need the X-CSRF-Token header from GET /admin/api/session.",
        },
        "servers": [{"url": public_url}],
        "components": {"securitySchemes": {"session": {
            "type": "apiKey", "in": "cookie",
            "name": if public_url.starts_with("https://") { "__Host-mneme-admin" } else { "mneme-admin" },
        }}},
        "paths": paths,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The router serves exactly `ROUTES` (see `table::api`); the document
    /// must describe each of them, with its access level, and nothing else.
    #[test]
    fn the_document_describes_every_route_the_router_serves() {
        let document = describe("https://mneme.example");
        let documented: BTreeSet<(String, String, String)> =
            document["paths"]
                .as_object()
                .expect("paths")
                .iter()
                .flat_map(|(path, operations)| {
                    operations.as_object().expect("operations").iter().map(
                        move |(verb, operation)| {
                            (
                                path.clone(),
                                verb.clone(),
                                operation["x-mneme-access"]
                                    .as_str()
                                    .unwrap_or("")
                                    .to_owned(),
                            )
                        },
                    )
                })
                .collect();
        let routed: BTreeSet<(String, String, String)> = ROUTES
            .iter()
            .map(|r| {
                (
                    format!("/admin/api{}", r.path),
                    r.verb.name().to_owned(),
                    r.access.name().to_owned(),
                )
            })
            .collect();
        assert_eq!(documented, routed);
        // The routes the audit found missing once.
        for (path, verb) in [
            ("/admin/api/sessions/{id}", "get"),
            ("/admin/api/sessions/{id}/reflect", "post"),
        ] {
            assert!(
                documented.iter().any(|(p, v, _)| p == path && v == verb),
                "{verb} {path}"
            );
        }
        assert_eq!(
            document["components"]["securitySchemes"]["session"]["name"],
            "__Host-mneme-admin"
        );
    }

    #[test]
    fn only_tenant_scoped_routes_take_a_tenant_and_path_parameters_are_declared() {
        let document = describe("http://127.0.0.1:8080");
        for route in ROUTES {
            let operation =
                &document["paths"][format!("/admin/api{}", route.path)][route.verb.name()];
            let names: Vec<&str> = operation["parameters"]
                .as_array()
                .expect("parameters")
                .iter()
                .map(|p| p["name"].as_str().expect("a name"))
                .collect();
            assert_eq!(
                names.contains(&"tenant"),
                route.access.in_tenant(),
                "{} {}",
                route.verb.name(),
                route.path
            );
            for placeholder in route.path.split('/').filter(|p| p.starts_with('{')) {
                assert!(
                    names.contains(&placeholder.trim_matches(['{', '}'])),
                    "{} {} declares {placeholder}",
                    route.verb.name(),
                    route.path
                );
            }
            assert_eq!(
                operation["security"]
                    .as_array()
                    .expect("security")
                    .is_empty(),
                route.access == Access::Anyone
            );
        }
    }
}
