//! The admin API's route table: every route under `/admin/api/`, with who
//! may call it, what it does and its handler. It is the one list of the
//! API: [`api`] builds the router from it, [`Access`] is enforced from it
//! before the handler runs, and `/admin/api/openapi.json` is written from
//! it (the API tests sweep every role over the routes that document lists).
//! A route that is not here is not served.

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use mneme_core::Error;

use super::{Actor, activity, memory, openapi, session, tenancy};
use crate::App;
use crate::error::ApiError;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Anybody, without a session.
    Anyone,
    /// Any signed-in person; the route acts in no particular tenant.
    SignedIn,
    /// Any role of the tenant the request acts in.
    AnyRole,
    /// The tenant's owners and admins, and platform admins.
    Manage,
    /// Platform admins only.
    Platform,
}

impl Access {
    /// As the OpenAPI document and docs/ADMIN.md name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Access::Anyone => "anyone",
            Access::SignedIn => "signed in",
            Access::AnyRole => "any role",
            Access::Manage => "manage",
            Access::Platform => "platform",
        }
    }

    /// Whether the route acts in a tenant (`?tenant=` for platform admins).
    pub(crate) fn in_tenant(self) -> bool {
        matches!(self, Access::AnyRole | Access::Manage)
    }

    /// Refuses a person whose standing does not reach this level.
    fn check(self, actor: &Actor) -> Result<(), Error> {
        match self {
            Access::Anyone | Access::SignedIn | Access::AnyRole => Ok(()),
            Access::Manage => actor.require_manage(),
            Access::Platform => actor.require_platform(),
        }
    }
}

/// An HTTP method of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    /// Lower case, as OpenAPI names operations.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    fn filter(self) -> MethodFilter {
        match self {
            Verb::Get => MethodFilter::GET,
            Verb::Post => MethodFilter::POST,
            Verb::Put => MethodFilter::PUT,
            Verb::Patch => MethodFilter::PATCH,
            Verb::Delete => MethodFilter::DELETE,
        }
    }
}

/// One operation of the admin API.
pub(crate) struct Route {
    pub(crate) verb: Verb,
    /// Below `/admin/api`, with `{name}` path parameters.
    pub(crate) path: &'static str,
    pub(crate) access: Access,
    pub(crate) summary: &'static str,
    /// The handler, answering `verb` only.
    handler: fn(MethodFilter) -> MethodRouter<App>,
}

const fn route(
    verb: Verb,
    path: &'static str,
    access: Access,
    summary: &'static str,
    handler: fn(MethodFilter) -> MethodRouter<App>,
) -> Route {
    Route {
        verb,
        path,
        access,
        summary,
        handler,
    }
}

use Access::{AnyRole, Anyone, Manage, Platform, SignedIn};
use Verb::{Delete, Get, Patch, Post, Put};

/// Every admin API route.
pub(crate) const ROUTES: &[Route] = &[
    route(
        Post,
        "/session",
        Anyone,
        "Sign in with email and password; sets the session cookie.",
        |m| on(m, session::sign_in),
    ),
    route(
        Get,
        "/session",
        SignedIn,
        "Who is signed in, and the CSRF token for changes.",
        |m| on(m, session::current),
    ),
    route(Delete, "/session", SignedIn, "Sign out.", |m| {
        on(m, session::sign_out)
    }),
    route(
        Get,
        "/openapi.json",
        Anyone,
        "This document: the admin API's routes and who may call them.",
        |m| on(m, openapi::document),
    ),
    route(
        Get,
        "/tenants",
        SignedIn,
        "Tenants: all for platform admins, one's own otherwise.",
        |m| on(m, tenancy::tenants),
    ),
    route(Post, "/tenants", Platform, "Create a tenant.", |m| {
        on(m, tenancy::create_tenant)
    }),
    route(
        Patch,
        "/tenants/{id}",
        Platform,
        "Suspend or reactivate a tenant.",
        |m| on(m, tenancy::update_tenant),
    ),
    route(
        Get,
        "/overview",
        AnyRole,
        "Counts, health, today's calls, recent changes and alerts.",
        |m| on(m, activity::overview),
    ),
    route(Get, "/users", Manage, "The tenant's people.", |m| {
        on(m, tenancy::users)
    }),
    route(
        Post,
        "/users",
        Manage,
        "Add a person (owners only add owners).",
        |m| on(m, tenancy::create_user),
    ),
    route(
        Patch,
        "/users/{id}",
        Manage,
        "Change a person's role or status, or reset their password (owners only touch owners).",
        |m| on(m, tenancy::update_user),
    ),
    route(
        Get,
        "/keys",
        Manage,
        "API keys with fragment counts and today's calls.",
        |m| on(m, tenancy::keys),
    ),
    route(
        Post,
        "/keys",
        Manage,
        "Create a key; the answer holds its secret, shown this once.",
        |m| on(m, tenancy::create_key),
    ),
    route(
        Get,
        "/keys/{id}",
        Manage,
        "A key, its usage and its standing against its limits.",
        |m| on(m, tenancy::key),
    ),
    route(
        Patch,
        "/keys/{id}",
        Manage,
        "Change a key's name, permissions, defaults, limits or expiry.",
        |m| on(m, tenancy::update_key),
    ),
    route(
        Post,
        "/keys/{id}/revoke",
        Manage,
        "Revoke a key at once on every pod.",
        |m| on(m, tenancy::revoke_key),
    ),
    route(
        Get,
        "/groups",
        Manage,
        "Key groups and their members.",
        |m| on(m, tenancy::groups),
    ),
    route(Post, "/groups", Manage, "Create a key group.", |m| {
        on(m, tenancy::create_group)
    }),
    route(Delete, "/groups/{id}", Manage, "Delete a key group.", |m| {
        on(m, tenancy::delete_group)
    }),
    route(
        Put,
        "/groups/{id}/members/{key_id}",
        Manage,
        "Add a key to a group.",
        |m| on(m, tenancy::add_member),
    ),
    route(
        Delete,
        "/groups/{id}/members/{key_id}",
        Manage,
        "Remove a key from a group.",
        |m| on(m, tenancy::remove_member),
    ),
    route(
        Get,
        "/memory/overview",
        AnyRole,
        "Memory counts by type, key and topic.",
        |m| on(m, memory::overview),
    ),
    route(
        Get,
        "/memory",
        AnyRole,
        "Browse memories: q, type, topic, key, workspace, includeInvalid, limit, cursor.",
        |m| on(m, memory::browse),
    ),
    route(
        Get,
        "/memory/{id}",
        AnyRole,
        "One memory with its links and earlier versions.",
        |m| on(m, memory::show),
    ),
    route(
        Patch,
        "/memory/{id}",
        Manage,
        "Amend a memory (versioned).",
        |m| on(m, memory::amend),
    ),
    route(Delete, "/memory/{id}", Manage, "Forget a memory.", |m| {
        on(m, memory::forget)
    }),
    route(
        Get,
        "/memory/export",
        Manage,
        "Export memories as NDJSON (optionally of one key).",
        |m| on(m, memory::export),
    ),
    route(
        Post,
        "/memory/import",
        Manage,
        "Import NDJSON memories as a key, through the normal write path.",
        |m| on(m, memory::import),
    ),
    route(
        Get,
        "/graph",
        AnyRole,
        "Knowledge graph: the most important memories and their links.",
        |m| on(m, memory::graph),
    ),
    route(Get, "/sessions", AnyRole, "Live MCP sessions.", |m| {
        on(m, activity::sessions)
    }),
    route(
        Get,
        "/sessions/{id}",
        AnyRole,
        "An MCP session and its working memory.",
        |m| on(m, activity::session),
    ),
    route(
        Delete,
        "/sessions/{id}",
        Manage,
        "Terminate an MCP session.",
        |m| on(m, activity::terminate_session),
    ),
    route(
        Post,
        "/sessions/{id}/reflect",
        Manage,
        "Keep a session's working memory for good, as `reflect` at its end.",
        |m| on(m, activity::reflect_session),
    ),
    route(
        Get,
        "/session-reflections",
        AnyRole,
        "Automatic reflections of idle and closed sessions, newest first.",
        |m| on(m, activity::session_reflections),
    ),
    route(
        Get,
        "/search-analytics",
        AnyRole,
        "Recalls per day: count, empty results, latency.",
        |m| on(m, activity::search_analytics),
    ),
    route(
        Get,
        "/surfacing",
        AnyRole,
        "Active surfacing: events, ratings, per tool.",
        |m| on(m, activity::surfacing),
    ),
    route(
        Get,
        "/upstreams",
        Manage,
        "Upstream MCP servers behind the proxy.",
        |m| on(m, activity::upstreams),
    ),
    route(
        Get,
        "/consolidation/runs",
        AnyRole,
        "Consolidation run history.",
        |m| on(m, activity::consolidation_runs),
    ),
    route(
        Post,
        "/consolidation/run",
        Manage,
        "Run consolidation now (or a dry run).",
        |m| on(m, activity::run_consolidation),
    ),
    route(
        Get,
        "/usage",
        AnyRole,
        "Tool calls per day and per key.",
        |m| on(m, activity::usage),
    ),
    route(
        Get,
        "/metrics",
        AnyRole,
        "This gateway pod's request figures and the last hour; per-tool figures for platform admins only.",
        |m| on(m, activity::metrics),
    ),
    route(
        Get,
        "/audit",
        Manage,
        "The audit log of changes, newest first.",
        |m| on(m, activity::audit),
    ),
];

/// The routes of `ROUTES` that `pick` selects, added to `router`, each
/// behind the check of its [`Access`].
pub(super) fn api(router: Router<App>, pick: fn(Access) -> bool) -> Router<App> {
    ROUTES
        .iter()
        .filter(|r| pick(r.access))
        .fold(router, |router, r| {
            router.route(
                r.path,
                (r.handler)(r.verb.filter())
                    .route_layer(middleware::from_fn_with_state(r.access, require_access)),
            )
        })
}

/// Runs before the handler (and before it reads the body): a person whose
/// role does not reach the route's gets `403 permission_denied`.
async fn require_access(State(access): State<Access>, request: Request, next: Next) -> Response {
    if access != Access::Anyone {
        let Some(actor) = request.extensions().get::<Actor>() else {
            return ApiError(Error::unauthenticated("sign in to the dashboard first"))
                .into_response();
        };
        if let Err(error) = access.check(actor) {
            return ApiError(error).into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use axum::body::Body;
    use axum::routing::get;
    use mneme_store::users::Role;
    use tower::ServiceExt;

    use super::*;
    use crate::admin::Standing;

    #[test]
    fn every_route_is_listed_once_and_the_router_takes_them_all() {
        let mut seen = BTreeSet::new();
        for r in ROUTES {
            assert!(r.path.starts_with('/'), "{}", r.path);
            assert!(
                seen.insert((r.path, r.verb)),
                "{} {} is listed twice",
                r.verb.name(),
                r.path
            );
        }
        // axum panics on a path it cannot parse or a method routed twice.
        let _ = api(Router::new(), |_| true);
    }

    /// The table is the only place an admin API route is registered: a
    /// route added with axum's `Router::route` anywhere else in the API's
    /// modules would be served without the OpenAPI document or the role
    /// check knowing of it. (`assets` serves the pages outside the API.)
    #[test]
    fn no_admin_api_route_is_registered_outside_the_table() {
        let sources = [
            ("mod.rs", include_str!("mod.rs")),
            ("table.rs", include_str!("table.rs")),
            ("session.rs", include_str!("session.rs")),
            ("tenancy.rs", include_str!("tenancy.rs")),
            ("memory.rs", include_str!("memory.rs")),
            ("activity.rs", include_str!("activity.rs")),
            ("openapi.rs", include_str!("openapi.rs")),
        ];
        // Split so that this test's own text does not count.
        let needles = [concat!(".rou", "te("), concat!(".rou", "te_service(")];
        let mut found = Vec::new();
        for (file, text) in sources {
            for needle in needles {
                for _ in text.matches(needle) {
                    found.push(format!("{file}: {needle}"));
                }
            }
        }
        assert_eq!(
            found,
            vec![format!("table.rs: {}", needles[0])],
            "admin API routes belong in table::ROUTES"
        );
    }

    fn actor(standing: Standing) -> Actor {
        let signed = serde_json::from_value(serde_json::json!({
            "platform": standing == Standing::Platform,
            "id": uuid::Uuid::now_v7(),
            "email": "someone@example.test",
            "tenant_id": uuid::Uuid::now_v7(),
            "csrf": "token",
        }))
        .expect("a session record");
        Actor {
            signed,
            standing,
            ip: None,
        }
    }

    async fn status(access: Access, standing: Option<Standing>) -> u16 {
        let handler = get(|| async { "ok" })
            .route_layer(middleware::from_fn_with_state(access, require_access));
        let handler = match standing {
            Some(standing) => handler.layer(axum::Extension(actor(standing))),
            None => handler,
        };
        let request = axum::http::Request::get("/x").body(Body::empty()).unwrap();
        handler.oneshot(request).await.unwrap().status().as_u16()
    }

    #[tokio::test]
    async fn each_access_level_admits_exactly_its_people() {
        let platform = Some(Standing::Platform);
        let owner = Some(Standing::Tenant(Role::Owner));
        let admin = Some(Standing::Tenant(Role::Admin));
        let member = Some(Standing::Tenant(Role::Member));
        let expected = [
            (Access::Anyone, [200, 200, 200, 200, 200]),
            (Access::SignedIn, [401, 200, 200, 200, 200]),
            (Access::AnyRole, [401, 200, 200, 200, 200]),
            (Access::Manage, [401, 200, 200, 200, 403]),
            (Access::Platform, [401, 200, 403, 403, 403]),
        ];
        for (access, statuses) in expected {
            for (standing, want) in [None, platform, owner, admin, member]
                .into_iter()
                .zip(statuses)
            {
                assert_eq!(
                    status(access, standing).await,
                    want,
                    "{} as {standing:?}",
                    access.name()
                );
            }
        }
    }
}
