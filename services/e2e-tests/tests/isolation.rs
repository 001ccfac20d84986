//! Tenant-isolation attack suite (issue 12, item 3): tenant A, holding
//! every permission, tries to read, infer, modify or delete what tenant B
//! owns, through every door of the whole stack.
//!
//! - [`every_mcp_and_rest_tool_answers_for_another_tenants_objects_exactly_as_for_random_ones`]:
//!   every tool `tools/list` shows (a new tool fails the test until it has
//!   a probe here), over MCP and `POST /v1/tools/{name}`, plus
//!   `GET /memories/{id}` and `/openapi.json`: B's fragment ids, case id,
//!   idempotency key, surfacing id and progressive-result key, in
//!   arguments and forged `_keyId`/`_tenantId`/`_permissions` arguments.
//!   An id of B's answers exactly like a random id (bodies compared after
//!   removing ids and trace ids); searches show nothing of B; B's rows in
//!   every tenant-owned table are byte-for-byte unchanged afterwards.
//! - [`admin_routes_answer_for_another_tenants_objects_exactly_as_for_random_ones`]:
//!   every admin API route (enumerated from `/admin/api/openapi.json`)
//!   with B's key, user, group, memory, session and tenant ids, a
//!   cross-tenant group membership, and `?tenant=`/`?key=` naming B.
//! - [`another_tenants_upstreams_cannot_be_seen_called_changed_or_removed`]:
//!   `/v1/upstreams/{name}`, proxied `prefix__tool` calls over MCP and
//!   REST, and the REST OpenAPI listing.
//! - [`another_tenants_mcp_session_id_opens_nothing_and_ends_nothing`]:
//!   B's `MCP-Session-Id` with A's key, for calls and `DELETE`.
//! - [`backends_refuse_forged_principals_without_the_internal_token`]:
//!   the recall and remember gRPC services, called directly with tonic,
//!   with no principal and with B's principal signed by a wrong token.
//! - [`oauth_refresh_tokens_clients_and_audiences_stay_with_their_owner`]:
//!   B's refresh token with A's client (refresh and revoke), a client
//!   bound to A's key given B's key, an access token at another mneme.
//! - [`recall_latency_does_not_reveal_another_tenants_near_duplicates`]:
//!   the timing oracle — A's recall medians with and without B holding
//!   near-duplicates of A's query.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mneme_core::Permission;
use mneme_e2e_tests::{Mcp, Stack, eventually};
use mneme_store::users::Role;
use mneme_test_support::{TestDatabase, TestRedis, TestTenant, create_tenant};
use reqwest::Method;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use uuid::Uuid;

const PASSWORD: &str = "correct horse battery staple";
/// A word only B's memories contain.
const MARKER: &str = "quuxfjord";
const B_TOPIC: &str = "quuxfjord-deal";
const B_CASE: &str = "case-quuxfjord-7";
const B_IDEMPOTENCY: &str = "idem-quuxfjord-1";
const B_CONTENT: &str =
    "The Globex quuxfjord merger closes on the fifth of May at 4.2 billion dollars.";
const EVERY_PERMISSION: &[Permission] = &[Permission::Read, Permission::Write, Permission::Admin];
/// Tenant-owned tables whose rows of B must not change while A attacks.
const TENANT_TABLES: &[&str] = &[
    "fragments",
    "fragment_links",
    "fragment_versions",
    "fragment_claims",
    "fragment_evidence",
    "case_events",
    "case_event_edges",
    "tool_feedback",
    "task_feedback",
    "surfacing_events",
    "surfacing_feedback",
    "search_events",
    "upstream_servers",
    "api_keys",
    "key_groups",
    "key_group_members",
    "users",
    "oauth_refresh_tokens",
    "link_reconsolidations",
    "consolidation_state",
    "consolidation_runs",
];

// ---------------------------------------------------------------- helpers

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// `text` with everything that legitimately differs between two otherwise
/// identical answers removed: the probed value itself, and every run of 16
/// or more hex digits and dashes (uuids, trace ids, keys).
fn normalise(text: &str, target: &str) -> String {
    // A's own writes differ in what they find among A's earlier writes
    // (conflict hints) and in the keywords of their stand-in text.
    let text = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut map)) => {
            map.remove("conflicts");
            map.remove("keywords");
            // Row numbers of A's own records (feedback).
            if map.get("id").is_some_and(Value::is_number) {
                map.remove("id");
            }
            Value::Object(map).to_string()
        }
        _ => text.to_owned(),
    };
    let text = if target.is_empty() {
        text
    } else {
        text.replace(target, "<target>")
    };
    // A's own search log numbers its recalls.
    let mut text = text;
    let field = "\"searchEventId\":";
    let mut from = 0;
    while let Some(at) = text[from..].find(field) {
        let start = from + at + field.len();
        let end = start
            + text[start..]
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(text.len() - start);
        text.replace_range(start..end, "N");
        from = start;
    }
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() >= 16 && run.chars().any(|c| c.is_ascii_digit()) {
            out.push_str("<hex>");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() || c == '-' {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The text of a tool result, or the protocol error.
fn result_text(result: &Result<CallToolResult, rmcp::ServiceError>) -> (bool, String) {
    match result {
        Ok(result) => (
            result.is_error == Some(true),
            result
                .content
                .iter()
                .filter_map(|c| c.as_text())
                .map(|t| t.text.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Err(error) => (true, format!("protocol error: {error}")),
    }
}

async fn call_tool(mcp: &Mcp, name: &str, arguments: &Value) -> (bool, String) {
    let Value::Object(arguments) = arguments.clone() else {
        panic!("arguments are an object")
    };
    let result = mcp
        .client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(arguments))
        .await;
    result_text(&result)
}

async fn request(
    stack: &Stack,
    bearer: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, String) {
    let mut request = http()
        .request(method, format!("http://{}{path}", stack.http_addr))
        .bearer_auth(bearer);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

/// Runs `sql` (one text value) as the owner inside `tenant`.
async fn text_in_tenant(stack: &Stack, tenant: Uuid, sql: &str) -> String {
    let row = stack
        .db
        .owner_in_tenant(tenant)
        .await
        .query_one(sql, &[&tenant])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    row.get::<_, Option<String>>(0).unwrap_or_default()
}

/// A digest of every row `tenant` owns in [`TENANT_TABLES`], by table.
async fn fingerprint(stack: &Stack, tenant: Uuid) -> BTreeMap<&'static str, String> {
    let mut digests = BTreeMap::new();
    for table in TENANT_TABLES {
        let sql = format!(
            "SELECT count(*)::text || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '')
               FROM mneme.{table} t WHERE tenant_id = $1"
        );
        digests.insert(*table, text_in_tenant(stack, tenant, &sql).await);
    }
    digests
}

/// Polls until `tenant`'s rows are embedded and stop changing (automatic
/// links and claims are written after the answer); returns their digest.
async fn settled_fingerprint(stack: &Stack, tenant: Uuid) -> BTreeMap<&'static str, String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = BTreeMap::new();
    loop {
        let pending = stack.db.count_in_tenant(tenant, "embedding IS NULL").await;
        let now = fingerprint(stack, tenant).await;
        if pending == 0 && now == last {
            return now;
        }
        assert!(Instant::now() < deadline, "tenant {tenant} never settled");
        last = now;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A signed-in dashboard session.
struct Person {
    base: String,
    cookie: String,
    csrf: String,
}

impl Person {
    async fn sign_in(stack: &Stack, email: &str) -> Person {
        let base = format!("http://{}/admin/api", stack.http_addr);
        let response = http()
            .post(format!("{base}/session"))
            .json(&json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{email} signs in");
        let cookie = response.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned();
        let body: Value = response.json().await.unwrap();
        Person {
            base,
            cookie,
            csrf: body["csrfToken"].as_str().unwrap().to_owned(),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> (u16, String) {
        let mut request = http()
            .request(method.clone(), format!("{}{path}", self.base))
            .header("cookie", &self.cookie);
        if method != Method::GET {
            request = request.header("x-csrf-token", &self.csrf);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    }

    async fn ok(&self, method: Method, path: &str, body: Option<&Value>) -> Value {
        let (status, text) = self.call(method.clone(), path, body).await;
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {text}"
        );
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }
}

/// An upstream MCP server of the test's own with one read-only tool,
/// `show_args`, answering with the arguments it received.
#[derive(Clone)]
struct Upstream;

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let Value::Object(schema) = json!({"type": "object"}) else {
            unreachable!()
        };
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("show_args", "Shows its arguments.", Arc::new(schema))
                .with_annotations(ToolAnnotations::new().read_only(true)),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{MARKER} upstream saw {arguments}"
        ))])
        .into())
    }
}

async fn start_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let service = StreamableHttpService::new(
        || Ok(Upstream),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_allowed_hosts(vec![addr.to_string()]),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/mcp")
}

/// Opens a legacy (2025-11-25) MCP session with raw HTTP; its id.
async fn open_session(stack: &Stack, key: &str) -> String {
    let response = http()
        .post(stack.mcp_url())
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    session_post(
        stack,
        key,
        &id,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    id
}

/// Posts one JSON-RPC message on session `id`: status and body text.
async fn session_post(stack: &Stack, key: &str, id: &str, message: &Value) -> (u16, String) {
    let response = http()
        .post(stack.mcp_url())
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-11-25")
        .json(message)
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

fn tools_call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": name, "arguments": arguments}})
}

/// Everything B owns that A will aim at.
struct Victim {
    tenant: TestTenant,
    fragments: Vec<String>,
    surfacing_id: String,
    progressive_key: String,
    session_id: String,
}

impl Victim {
    /// Strings that must never reach A.
    fn needles(&self) -> Vec<String> {
        let mut needles = vec![
            MARKER.to_owned(),
            "zebra".to_owned(),
            self.tenant.key_id.to_string(),
            self.tenant.tenant_id.to_string(),
        ];
        needles.extend(self.fragments.iter().cloned());
        needles
    }

    fn assert_absent(&self, what: &str, text: &str) {
        for needle in self.needles() {
            assert!(
                !text.contains(&needle),
                "{what} shows B's `{needle}`: {text}"
            );
        }
    }
}

struct World {
    stack: Stack,
    a: TestTenant,
    b: Victim,
    a_mcp: Mcp,
    a_fragment: String,
}

const HEADER_KEY: [u8; 32] = [42u8; 32];

async fn world() -> World {
    let header_key = base64::engine::general_purpose::STANDARD.encode(HEADER_KEY);
    let stack = Stack::start(
        "hash",
        &[
            ("MNEME_PROXY_ALLOW_PRIVATE_UPSTREAMS", "true"),
            ("MNEME_PROXY_HEADER_KEY", header_key.as_str()),
        ],
    )
    .await;
    let store = stack.db.store();
    let a = create_tenant(&store, "acme", EVERY_PERMISSION).await;
    let b = create_tenant(&store, "globex", EVERY_PERMISSION).await;
    mneme_test_support::create_user(
        &store,
        a.tenant_id,
        "owner@acme.test",
        Role::Owner,
        PASSWORD,
    )
    .await;
    mneme_test_support::create_user(
        &store,
        b.tenant_id,
        "owner@globex.test",
        Role::Owner,
        PASSWORD,
    )
    .await;

    // B's memories: linked, in a case, with an idempotency key, one of
    // them surfaced.
    let b_mcp = stack.mcp(&b.api_key).await;
    let first = b_mcp
        .ok(
            "remember",
            json!({"content": B_CONTENT, "topic": B_TOPIC, "type": "fact",
                   "keywords": [MARKER, "merger"], "caseId": B_CASE,
                   "idempotencyKey": B_IDEMPOTENCY, "importance": 0.9}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = b_mcp
        .remember_new(
            "The quuxfjord merger was approved by the board after the audit.",
            B_TOPIC,
            "decision",
        )
        .await;
    let runbook = b_mcp
        .remember_new(
            "Runbook 7: the zebra fleet migration is rolled back with ops/zebra-rollback.sh.",
            "zebra-ops",
            "procedure",
        )
        .await;
    b_mcp
        .ok(
            "link",
            json!({"fromId": second, "toId": first, "relationType": "caused_by"}),
        )
        .await;
    eventually("B's memories are embedded", Duration::from_secs(20), || {
        let pending = stack.db.count_in_tenant(b.tenant_id, "embedding IS NULL");
        async move { pending.await == 0 }
    })
    .await;
    let (status, surfaced) = request(
        &stack,
        &b.api_key,
        Method::POST,
        "/v1/surface",
        Some(&json!({"server": "docs", "tool": "search", "arguments":
                     {"_context_query": "zebra fleet migration rollback runbook"}})),
    )
    .await;
    assert_eq!(status, 200, "{surfaced}");
    let surfaced: Value = serde_json::from_str(&surfaced).unwrap();
    let surfacing_id = surfaced["surfacingId"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing surfaced for B: {surfaced}"))
        .to_owned();
    let cache = mneme_cache::Cache::connect(&stack.redis.url, &stack.redis.prefix)
        .await
        .unwrap();
    let progressive_key = format!("{:024x}", 0xb0b_u64);
    assert!(
        cache
            .store_progressive(
                &b.tenant_id.to_string(),
                &b.key_id.to_string(),
                &progressive_key,
                &format!("{MARKER} long upstream result. ").repeat(400),
                Duration::from_secs(600),
            )
            .await
    );
    let session_id = open_session(&stack, &b.api_key).await;
    let (status, _) = session_post(
        &stack,
        &b.api_key,
        &session_id,
        &tools_call(
            2,
            "remember",
            json!({"content": "Drafting the quuxfjord memo in this session.",
                   "topic": "work", "type": "fact", "scope": "session"}),
        ),
    )
    .await;
    assert_eq!(status, 200);
    // B's upstream, its dashboard group with its key.
    let upstream = start_upstream().await;
    let (status, body) = request(
        &stack,
        &b.api_key,
        Method::POST,
        "/v1/upstreams",
        Some(&json!({"name": "globex-tools", "prefix": "bx", "url": upstream})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let b_owner = Person::sign_in(&stack, "owner@globex.test").await;
    let group = b_owner
        .ok(
            Method::POST,
            "/groups",
            Some(&json!({"name": "globex-team"})),
        )
        .await;
    let group_id = group["group"]["id"]
        .as_str()
        .or_else(|| group["id"].as_str())
        .unwrap_or_else(|| panic!("a group id: {group}"))
        .to_owned();
    b_owner
        .ok(
            Method::PUT,
            &format!("/groups/{group_id}/members/{}", b.key_id),
            None,
        )
        .await;

    let a_mcp = stack.mcp(&a.api_key).await;
    let a_fragment = a_mcp
        .remember_new(
            "Acme deploys the storefront every Tuesday.",
            "deploys",
            "fact",
        )
        .await;
    World {
        stack,
        a,
        b: Victim {
            tenant: b,
            fragments: vec![first, second, runbook],
            surfacing_id,
            progressive_key,
            session_id,
        },
        a_mcp,
        a_fragment,
    }
}

/// Replaces the string `"<T>"` anywhere in `value` by `target`.
fn aimed(value: &Value, target: &str) -> Value {
    match value {
        Value::String(s) if s == "<T>" => json!(target),
        // Inside text (contents of A's own writes): a stand-in, so A's
        // memories never carry B's ids themselves.
        Value::String(s) if s.contains("<T>") => {
            let stand_in: String = Sha256::digest(target.as_bytes())
                .iter()
                .take(5)
                .map(|b| format!("{b:02x}"))
                .collect();
            json!(s.replace("<T>", &stand_in))
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| aimed(v, target)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), aimed(v, target)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One attempt of A on a tool.
enum Probe {
    /// `"<T>"` in the arguments becomes B's value, then a random one of the
    /// same kind: the two answers must be the same; `must_fail` when the
    /// tool cannot succeed on an object A does not have.
    Aimed {
        arguments: Value,
        theirs: String,
        random: String,
        must_fail: bool,
    },
    /// Arguments that would show B's data if isolation failed.
    Blind(Value),
}

fn aimed_probe(arguments: Value, theirs: &str, random: String, must_fail: bool) -> Probe {
    Probe::Aimed {
        arguments,
        theirs: theirs.to_owned(),
        random,
        must_fail,
    }
}

/// The attempts on `tool`; `None` for a tool this suite does not know yet.
fn probes(tool: &str, w: &World) -> Option<Vec<Probe>> {
    let b = &w.b;
    let random = || Uuid::now_v7().to_string();
    let fragment_probes = |make: &dyn Fn() -> Value, must_fail: bool| -> Vec<Probe> {
        b.fragments
            .iter()
            .map(|id| aimed_probe(make(), id, random(), must_fail))
            .collect()
    };
    Some(match tool {
        "amend" => fragment_probes(
            &|| json!({"id": "<T>", "content": "Overwritten by acme.", "importance": 0.1}),
            true,
        ),
        "batch_remember" => vec![
            aimed_probe(
                json!({"fragments": [{"content": "Acme batch note one about <T>.", "topic": "t",
                       "type": "fact", "supersedes": ["<T>"]}]}),
                &b.fragments[0],
                random(),
                false,
            ),
            aimed_probe(
                json!({"fragments": [{"content": "Acme batch note two about <T>.", "topic": "t",
                       "type": "fact", "linkedTo": ["<T>"]}]}),
                &b.fragments[1],
                random(),
                false,
            ),
        ],
        "context" => vec![Probe::Blind(json!({"tokenBudget": 4000}))],
        "fetch" => fragment_probes(&|| json!({"id": "<T>"}), true),
        "forget" => {
            let mut probes = fragment_probes(&|| json!({"id": "<T>", "force": true}), true);
            probes.push(aimed_probe(
                json!({"topic": "<T>", "force": true}),
                B_TOPIC,
                format!("topic-{}", random()),
                false,
            ));
            probes
        }
        "fragment_history" => fragment_probes(&|| json!({"id": "<T>"}), true),
        "get_skill_guide" => vec![Probe::Blind(json!({}))],
        "graph_explore" => fragment_probes(&|| json!({"startId": "<T>", "depth": 3}), true),
        "link" => {
            let own = w.a_fragment.clone();
            let mut probes = fragment_probes(
                &|| json!({"fromId": own, "toId": "<T>", "relationType": "related"}),
                true,
            );
            probes.extend(fragment_probes(
                &|| json!({"fromId": "<T>", "toId": own, "relationType": "caused_by"}),
                true,
            ));
            probes
        }
        "memory_consolidate" => vec![Probe::Blind(json!({"dryRun": false}))],
        "memory_stats" => vec![Probe::Blind(json!({}))],
        "recall" => vec![
            Probe::Blind(json!({"text": B_CONTENT, "keywords": [MARKER], "limit": 50,
                                "includeSuperseded": true, "includeContext": true})),
            Probe::Blind(json!({"topic": B_TOPIC, "includeLinks": true})),
            aimed_probe(
                json!({"caseId": "<T>", "caseMode": true, "text": "merger"}),
                B_CASE,
                format!("case-{}", random()),
                false,
            ),
        ],
        "reconstruct_history" => vec![
            aimed_probe(
                json!({"caseId": "<T>"}),
                B_CASE,
                format!("case-{}", random()),
                false,
            ),
            Probe::Blind(json!({"entity": MARKER, "query": "merger", "limit": 50})),
        ],
        "reflect" => vec![Probe::Blind(json!({
            "summary": ["Acme looked at the quarter."], "topic": "acme-quarter"}))],
        "remember" => vec![
            aimed_probe(
                json!({"content": "Acme supersedes something: <T>.", "topic": "t", "type": "fact",
                       "supersedes": ["<T>"]}),
                &b.fragments[0],
                random(),
                false,
            ),
            aimed_probe(
                json!({"content": "Acme links to something: <T>.", "topic": "t", "type": "fact",
                       "linkedTo": ["<T>"]}),
                &b.fragments[1],
                random(),
                false,
            ),
        ],
        "search" => vec![Probe::Blind(json!({"query": B_CONTENT}))],
        "search_traces" => vec![
            Probe::Blind(json!({"entityKey": MARKER, "limit": 50})),
            Probe::Blind(json!({"limit": 50})),
        ],
        "stm_proxy_read_more" => vec![aimed_probe(
            json!({"key": "<T>", "offset": 0}),
            &b.progressive_key,
            format!("{:024x}", 0xdead_u64),
            true,
        )],
        "stm_surfacing_feedback" => vec![aimed_probe(
            json!({"surfacing_id": "<T>", "rating": "harmful"}),
            &b.surfacing_id,
            random(),
            true,
        )],
        "stm_surfacing_stats" => vec![Probe::Blind(json!({"limit": 50}))],
        "tool_feedback" => vec![aimed_probe(
            json!({"fragment_ids": ["<T>"], "relevant": false, "sufficient": false,
                   "tool_name": "recall"}),
            &b.fragments[0],
            random(),
            false,
        )],
        _ => return None,
    })
}

/// Adds the identity arguments some MCP servers trust.
fn with_forged_identity(arguments: &Value, b: &TestTenant) -> Value {
    let mut arguments = arguments.clone();
    let map = arguments.as_object_mut().unwrap();
    map.insert("_keyId".into(), json!(b.key_id.to_string()));
    map.insert("_tenantId".into(), json!(b.tenant_id.to_string()));
    map.insert("_permissions".into(), json!(["read", "write", "admin"]));
    arguments
}

/// Both transports' answers to one call: MCP (error flag, text) and REST
/// (status, body).
async fn attempt(w: &World, tool: &str, arguments: &Value) -> ((bool, String), (u16, String)) {
    let arguments = with_forged_identity(arguments, &w.b.tenant);
    let mcp = call_tool(&w.a_mcp, tool, &arguments).await;
    let rest = request(
        &w.stack,
        &w.a.api_key,
        Method::POST,
        &format!("/v1/tools/{tool}"),
        Some(&arguments),
    )
    .await;
    (mcp, rest)
}

// ------------------------------------------------------------------ tests

#[tokio::test]
async fn every_mcp_and_rest_tool_answers_for_another_tenants_objects_exactly_as_for_random_ones() {
    let w = world().await;
    let before = settled_fingerprint(&w.stack, w.b.tenant.tenant_id).await;
    let tools = w.a_mcp.client.list_all_tools().await.unwrap();
    assert!(tools.len() >= 20, "{} tools listed", tools.len());
    let mut unknown = Vec::new();
    for tool in &tools {
        let name = tool.name.to_string();
        let Some(probes) = probes(&name, &w) else {
            unknown.push(name);
            continue;
        };
        for probe in probes {
            match probe {
                Probe::Aimed {
                    arguments,
                    theirs,
                    random,
                    must_fail,
                } => {
                    let (mcp_b, rest_b) = attempt(&w, &name, &aimed(&arguments, &theirs)).await;
                    let (mcp_r, rest_r) = attempt(&w, &name, &aimed(&arguments, &random)).await;
                    assert_eq!(
                        (mcp_b.0, normalise(&mcp_b.1, &theirs)),
                        (mcp_r.0, normalise(&mcp_r.1, &random)),
                        "{name} over MCP tells B's `{theirs}` from a random value ({arguments})"
                    );
                    assert_eq!(
                        (rest_b.0, normalise(&rest_b.1, &theirs)),
                        (rest_r.0, normalise(&rest_r.1, &random)),
                        "{name} over REST tells B's `{theirs}` from a random value ({arguments})"
                    );
                    if must_fail {
                        assert!(mcp_b.0, "{name} on B's {theirs} succeeded: {}", mcp_b.1);
                        assert!(
                            mcp_b.1.contains("not_found"),
                            "{name} on B's {theirs}: not a not-found error: {}",
                            mcp_b.1
                        );
                        assert_eq!(rest_b.0, 404, "{name} over REST: {}", rest_b.1);
                    }
                    w.b.assert_absent(&format!("{name} over MCP"), &mcp_b.1.replace(&theirs, ""));
                    w.b.assert_absent(&format!("{name} over REST"), &rest_b.1.replace(&theirs, ""));
                }
                Probe::Blind(arguments) => {
                    let (mcp, rest) = attempt(&w, &name, &arguments).await;
                    assert!(!mcp.0, "{name} {arguments} failed for A itself: {}", mcp.1);
                    assert_eq!(rest.0, 200, "{name} {arguments} over REST: {}", rest.1);
                    w.b.assert_absent(&format!("{name} over MCP"), &mcp.1);
                    w.b.assert_absent(&format!("{name} over REST"), &rest.1);
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "tools without an isolation probe in tests/isolation.rs: {unknown:?}"
    );

    // A remembers B's exact content under B's idempotency key: a memory of
    // its own, neither B's nor a duplicate of it.
    let mine = w
        .a_mcp
        .ok(
            "remember",
            json!({"content": B_CONTENT, "topic": B_TOPIC, "type": "fact",
                   "caseId": B_CASE, "idempotencyKey": B_IDEMPOTENCY}),
        )
        .await;
    assert_eq!(mine["outcome"], "created", "{mine}");
    assert!(
        !w.b.fragments
            .contains(&mine["id"].as_str().unwrap().to_owned())
    );
    // Now A holds B's content itself: A's recall shows A's copy only.
    let recalled = w
        .a_mcp
        .ok("recall", json!({"text": B_CONTENT, "limit": 50}))
        .await;
    for fragment in recalled["fragments"].as_array().unwrap() {
        let id = fragment["id"].as_str().unwrap().to_owned();
        assert!(!w.b.fragments.contains(&id), "{recalled}");
    }

    // The address `search` and `fetch` cite.
    let theirs = request(
        &w.stack,
        &w.a.api_key,
        Method::GET,
        &format!("/memories/{}", w.b.fragments[0]),
        None,
    )
    .await;
    let random = Uuid::now_v7().to_string();
    let missing = request(
        &w.stack,
        &w.a.api_key,
        Method::GET,
        &format!("/memories/{random}"),
        None,
    )
    .await;
    assert_eq!(theirs.0, 404, "{}", theirs.1);
    assert_eq!(
        (theirs.0, normalise(&theirs.1, &w.b.fragments[0])),
        (missing.0, normalise(&missing.1, &random))
    );
    let (status, openapi) =
        request(&w.stack, &w.a.api_key, Method::GET, "/openapi.json", None).await;
    assert_eq!(status, 200);
    assert!(
        !openapi.contains("bx__"),
        "B's upstream tools in A's OpenAPI"
    );

    // B's rows are exactly as before, and B still sees its memories.
    let after = fingerprint(&w.stack, w.b.tenant.tenant_id).await;
    assert_eq!(before, after, "A's attempts changed B's rows");
    let b_mcp = w.stack.mcp(&w.b.tenant.api_key).await;
    for id in &w.b.fragments {
        let fetched = b_mcp.ok("fetch", json!({"id": id})).await;
        assert!(fetched.to_string().contains(id.as_str()), "{fetched}");
    }
    let stats = b_mcp.ok("memory_stats", json!({})).await;
    assert_eq!(
        stats["total"], 3,
        "B's three memories (session notes are working memory): {stats}"
    );
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn admin_routes_answer_for_another_tenants_objects_exactly_as_for_random_ones() {
    let w = world().await;
    let b_owner = Person::sign_in(&w.stack, "owner@globex.test").await;
    let b_users = b_owner.ok(Method::GET, "/users", None).await;
    let b_user = b_users["users"][0]["id"].as_str().unwrap().to_owned();
    let b_groups = b_owner.ok(Method::GET, "/groups", None).await;
    let b_group = b_groups["groups"][0]["id"].as_str().unwrap().to_owned();
    let b_sessions = b_owner.ok(Method::GET, "/sessions", None).await;
    assert!(
        b_sessions.to_string().contains(&w.b.session_id),
        "B's dashboard lists its MCP session: {b_sessions}"
    );
    let a_owner = Person::sign_in(&w.stack, "owner@acme.test").await;
    let a_group = a_owner
        .ok(Method::POST, "/groups", Some(&json!({"name": "acme-team"})))
        .await;
    let a_group = a_group["group"]["id"]
        .as_str()
        .or_else(|| a_group["id"].as_str())
        .unwrap()
        .to_owned();
    let before = settled_fingerprint(&w.stack, w.b.tenant.tenant_id).await;

    let (status, document) = a_owner.call(Method::GET, "/openapi.json", None).await;
    assert_eq!(status, 200);
    let document: Value = serde_json::from_str(&document).unwrap();
    let paths = document["paths"].as_object().unwrap();
    assert!(paths.len() >= 20, "{} admin paths", paths.len());
    let b_key = w.b.tenant.key_id.to_string();
    let b_tenant = w.b.tenant.tenant_id.to_string();
    let mut unknown = Vec::new();
    let mut aimed_count = 0;
    for (path, operations) in paths {
        let path = path.strip_prefix("/admin/api").unwrap();
        for method in operations.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            if path.starts_with("/session") {
                continue; // the signed-in person's own session
            }
            let body = match (method.as_str(), path) {
                ("PATCH", "/tenants/{id}") => Some(json!({"status": "suspended"})),
                ("PATCH", "/users/{id}") => Some(json!({"role": "member", "status": "disabled"})),
                ("PATCH", "/keys/{id}") => {
                    Some(json!({"name": "hijacked", "permissions": ["read"]}))
                }
                ("PATCH", "/memory/{id}") => Some(json!({"content": "Overwritten by acme."})),
                ("POST", _) | ("PUT", _) => Some(json!({})),
                _ => None,
            };
            if !path.contains('{') {
                if method != Method::GET {
                    continue; // creations act in A's own tenant
                }
                // Listing routes, naming B with `?tenant=` and `?key=`.
                for query in [format!("?tenant={b_tenant}"), format!("?key={b_key}")] {
                    let (status, text) = a_owner
                        .call(Method::GET, &format!("{path}{query}"), None)
                        .await;
                    assert!(status < 500, "GET {path}{query}: {status} {text}");
                    w.b.assert_absent(
                        &format!("GET {path}{query}"),
                        &text.replace(&b_tenant, "").replace(&b_key, ""),
                    );
                    if query.starts_with("?tenant") {
                        let random = format!("?tenant={}", Uuid::now_v7());
                        let (r_status, r_text) = a_owner
                            .call(Method::GET, &format!("{path}{random}"), None)
                            .await;
                        assert_eq!(
                            (status, normalise(&text, &b_tenant)),
                            (r_status, normalise(&r_text, "")),
                            "GET {path} tells B's tenant id from a random one"
                        );
                    }
                }
                continue;
            }
            // Every `{…}` of the path, aimed at B's object, then at random ids.
            let targets: Vec<(&str, String)> = match path {
                "/tenants/{id}" => vec![("{id}", b_tenant.clone())],
                "/users/{id}" => vec![("{id}", b_user.clone())],
                "/keys/{id}" | "/keys/{id}/revoke" => vec![("{id}", b_key.clone())],
                "/groups/{id}" => vec![("{id}", b_group.clone())],
                "/groups/{id}/members/{key_id}" => {
                    // B's group with B's key, and A's own group with B's key
                    // (cross-tenant membership).
                    for (group, key) in [
                        (b_group.clone(), b_key.clone()),
                        (a_group.clone(), b_key.clone()),
                    ] {
                        let theirs = path.replace("{id}", &group).replace("{key_id}", &key);
                        let random_group = if group == a_group {
                            a_group.clone()
                        } else {
                            Uuid::now_v7().to_string()
                        };
                        let random = path
                            .replace("{id}", &random_group)
                            .replace("{key_id}", &Uuid::now_v7().to_string());
                        let (t_status, t_text) =
                            a_owner.call(method.clone(), &theirs, body.as_ref()).await;
                        let (r_status, r_text) =
                            a_owner.call(method.clone(), &random, body.as_ref()).await;
                        assert_eq!(t_status, 404, "{method} {theirs}: {t_text}");
                        assert_eq!(
                            (t_status, normalise(&t_text, "")),
                            (r_status, normalise(&r_text, "")),
                            "{method} {path} tells B's objects from random ones"
                        );
                        aimed_count += 1;
                    }
                    continue;
                }
                "/memory/{id}" => w.b.fragments.iter().map(|f| ("{id}", f.clone())).collect(),
                "/sessions/{id}" | "/sessions/{id}/reflect" => {
                    vec![("{id}", w.b.session_id.clone())]
                }
                other => {
                    unknown.push(format!("{method} {other}"));
                    continue;
                }
            };
            for (placeholder, theirs) in targets {
                let random = if placeholder == "{id}" && path.starts_with("/sessions") {
                    URL_SAFE_NO_PAD.encode(Uuid::new_v4().as_bytes().repeat(2))
                } else {
                    Uuid::now_v7().to_string()
                };
                let (t_status, t_text) = a_owner
                    .call(
                        method.clone(),
                        &path.replace(placeholder, &theirs),
                        body.as_ref(),
                    )
                    .await;
                let (r_status, r_text) = a_owner
                    .call(
                        method.clone(),
                        &path.replace(placeholder, &random),
                        body.as_ref(),
                    )
                    .await;
                assert!(
                    t_status == 404 || (t_status == 403 && path.starts_with("/tenants")),
                    "{method} {path} on B's {theirs}: {t_status} {t_text}"
                );
                assert_eq!(
                    (t_status, normalise(&t_text, &theirs)),
                    (r_status, normalise(&r_text, &random)),
                    "{method} {path} tells B's {theirs} from a random id"
                );
                w.b.assert_absent(&format!("{method} {path}"), &t_text.replace(&theirs, ""));
                aimed_count += 1;
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "admin routes without an isolation probe: {unknown:?}"
    );
    assert!(aimed_count >= 15, "only {aimed_count} aimed admin calls");
    let after = fingerprint(&w.stack, w.b.tenant.tenant_id).await;
    assert_eq!(before, after, "A's admin calls changed B's rows");
    // B's key still works, and its group still holds it.
    let groups = b_owner.ok(Method::GET, "/groups", None).await;
    assert!(groups.to_string().contains(&b_key), "{groups}");
    let b_mcp = w.stack.mcp(&w.b.tenant.api_key).await;
    b_mcp.ok("fetch", json!({"id": w.b.fragments[0]})).await;
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn another_tenants_upstreams_cannot_be_seen_called_changed_or_removed() {
    let w = world().await;
    let before = settled_fingerprint(&w.stack, w.b.tenant.tenant_id).await;
    let a = &w.a.api_key;
    let tools = w.a_mcp.client.list_all_tools().await.unwrap();
    assert!(
        !tools.iter().any(|t| t.name.starts_with("bx__")),
        "B's tools listed for A"
    );
    // Proxied calls: B's prefix reads like a prefix nobody has.
    let theirs = call_tool(&w.a_mcp, "bx__show_args", &json!({"q": "hi"})).await;
    let nobody = call_tool(&w.a_mcp, "zq__show_args", &json!({"q": "hi"})).await;
    assert!(theirs.0, "A reached B's upstream: {}", theirs.1);
    assert_eq!(normalise(&theirs.1, "bx__"), normalise(&nobody.1, "zq__"));
    let rest_theirs = request(
        &w.stack,
        a,
        Method::POST,
        "/v1/tools/bx__show_args",
        Some(&json!({})),
    )
    .await;
    let rest_nobody = request(
        &w.stack,
        a,
        Method::POST,
        "/v1/tools/zq__show_args",
        Some(&json!({})),
    )
    .await;
    assert_eq!(rest_theirs.0, 404, "{}", rest_theirs.1);
    assert_eq!(
        (rest_theirs.0, normalise(&rest_theirs.1, "bx__")),
        (rest_nobody.0, normalise(&rest_nobody.1, "zq__"))
    );
    // The management API.
    for (method, body) in [
        (Method::GET, None),
        (
            Method::PATCH,
            Some(json!({"enabled": false, "url": "http://127.0.0.1:9/mcp"})),
        ),
        (Method::DELETE, None),
    ] {
        let t = request(
            &w.stack,
            a,
            method.clone(),
            "/v1/upstreams/globex-tools",
            body.as_ref(),
        )
        .await;
        let r = request(
            &w.stack,
            a,
            method.clone(),
            "/v1/upstreams/initech-tools",
            body.as_ref(),
        )
        .await;
        assert_eq!(t.0, 404, "{method}: {}", t.1);
        assert_eq!(
            (t.0, normalise(&t.1, "globex-tools")),
            (r.0, normalise(&r.1, "initech-tools")),
            "{method} /v1/upstreams tells B's upstream from a missing one"
        );
    }
    let (status, listing) = request(&w.stack, a, Method::GET, "/v1/upstreams", None).await;
    assert_eq!(status, 200);
    assert!(!listing.contains("globex"), "{listing}");
    // A registering the same name and prefix gets its own, and B keeps its.
    let (status, body) = request(
        &w.stack,
        a,
        Method::POST,
        "/v1/upstreams",
        Some(&json!({"name": "globex-tools", "prefix": "bx", "url": "http://127.0.0.1:9/mcp"})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let mut after = fingerprint(&w.stack, w.b.tenant.tenant_id).await;
    let mut before = before;
    // B's view of its own upstream is unchanged; the rest of B's rows too.
    assert_eq!(
        before.remove("upstream_servers"),
        after.remove("upstream_servers")
    );
    assert_eq!(before, after);
    let b_mcp = w.stack.mcp(&w.b.tenant.api_key).await;
    let own = call_tool(&b_mcp, "bx__show_args", &json!({"q": "mine"})).await;
    assert!(
        !own.0 && own.1.contains("upstream saw"),
        "B lost its upstream: {}",
        own.1
    );
    w.stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn another_tenants_mcp_session_id_opens_nothing_and_ends_nothing() {
    let w = world().await;
    let a = &w.a.api_key;
    let session = &w.b.session_id;
    let forged = URL_SAFE_NO_PAD.encode(Uuid::new_v4().as_bytes().repeat(2));
    for message in [
        tools_call(7, "context", json!({})),
        tools_call(8, "recall", json!({"text": "quuxfjord memo"})),
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
    ] {
        let (status, text) = session_post(&w.stack, a, session, &message).await;
        assert!(
            (400..500).contains(&status),
            "A used B's session: {status} {text}"
        );
        w.b.assert_absent("a call on B's session", &text);
        let (forged_status, forged_text) = session_post(&w.stack, a, &forged, &message).await;
        assert_eq!(forged_status, 404, "an invented session id");
        // B's real session id answers exactly like an invented one.
        assert_eq!((status, &text), (forged_status, &forged_text));
    }
    // A cannot end B's session.
    let ended = http()
        .delete(w.stack.mcp_url())
        .bearer_auth(a)
        .header("mcp-session-id", session.as_str())
        .send()
        .await
        .unwrap();
    assert!(ended.status().is_client_error(), "{}", ended.status());
    let (status, text) = session_post(
        &w.stack,
        &w.b.tenant.api_key,
        session,
        &tools_call(10, "context", json!({})),
    )
    .await;
    assert_eq!(status, 200, "B's session still works: {text}");
    assert!(
        text.contains("Drafting the quuxfjord memo"),
        "B's working memory: {text}"
    );
    w.stack.shutdown().await.unwrap();
}

// ----------------------------------------------------- gRPC without a token

/// `mneme up` on ports the test knows, with a configured internal token.
struct GrpcStack {
    _db: TestDatabase,
    _redis: TestRedis,
    http_addr: SocketAddr,
    recall: SocketAddr,
    remember: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    store: mneme_store::Store,
}

const INTERNAL_TOKEN: &str = "the-test-internal-token-of-at-least-32-characters";

async fn grpc_stack() -> GrpcStack {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let bind = || TcpListener::bind("127.0.0.1:0");
    let (http_listener, recall, remember) = (
        bind().await.unwrap(),
        bind().await.unwrap(),
        bind().await.unwrap(),
    );
    let (http_addr, recall_addr, remember_addr) = (
        http_listener.local_addr().unwrap(),
        recall.local_addr().unwrap(),
        remember.local_addr().unwrap(),
    );
    let env: HashMap<String, String> = HashMap::from([
        ("MNEME_DATABASE_URL".into(), db.app_url.clone()),
        ("MNEME_REDIS_URL".into(), redis.url.clone()),
        ("MNEME_REDIS_PREFIX".into(), redis.prefix.clone()),
        ("MNEME_EMBEDDER".into(), "hash".into()),
        ("MNEME_CONSOLIDATION".into(), "false".into()),
        ("MNEME_INTERNAL_TOKEN".into(), INTERNAL_TOKEN.into()),
        ("MNEME_PUBLIC_URL".into(), format!("http://{http_addr}")),
    ]);
    let config = mneme_config::Config::from_env(&env).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let listeners = mneme::up::Listeners {
        http: http_listener,
        recall,
        remember,
    };
    let task = tokio::spawn(mneme::up::up(
        config,
        listeners,
        stop.clone().cancelled_owned(),
    ));
    let store = db.store();
    GrpcStack {
        _db: db,
        _redis: redis,
        http_addr,
        recall: recall_addr,
        remember: remember_addr,
        stop,
        task,
        store,
    }
}

/// The gRPC code of every RecallService and RememberService method called
/// with `sign` deciding the request's metadata.
async fn grpc_codes(
    stack: &GrpcStack,
    sign: &dyn Fn(&mut tonic::metadata::MetadataMap),
) -> Vec<(&'static str, tonic::Code)> {
    use mneme_proto::v1::recall_service_client::RecallServiceClient;
    use mneme_proto::v1::remember_service_client::RememberServiceClient;
    use mneme_proto::v1::*;
    fn req<T>(message: T, sign: &dyn Fn(&mut tonic::metadata::MetadataMap)) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        sign(request.metadata_mut());
        request
    }
    let code = |r: Result<tonic::Code, tonic::Status>| r.unwrap_or_else(|s| s.code());
    let mut recall = RecallServiceClient::connect(format!("http://{}", stack.recall))
        .await
        .unwrap();
    let mut remember = RememberServiceClient::connect(format!("http://{}", stack.remember))
        .await
        .unwrap();
    vec![
        (
            "Recall",
            code(
                recall
                    .recall(req(
                        RecallRequest {
                            text: Some("merger".into()),
                            ..Default::default()
                        },
                        sign,
                    ))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Context",
            code(
                recall
                    .context(req(ContextRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Fetch",
            code(
                recall
                    .fetch(req(FetchRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Stats",
            code(
                recall
                    .stats(req(StatsRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "GraphExplore",
            code(
                recall
                    .graph_explore(req(GraphExploreRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "FragmentHistory",
            code(
                recall
                    .fragment_history(req(FragmentHistoryRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "ReconstructHistory",
            code(
                recall
                    .reconstruct_history(req(ReconstructHistoryRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "SearchTraces",
            code(
                recall
                    .search_traces(req(SearchTracesRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Surface",
            code(
                recall
                    .surface(req(SurfaceRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Remember",
            code(
                remember
                    .remember(req(RememberRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "BatchRemember",
            code(
                remember
                    .batch_remember(req(BatchRememberRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Forget",
            code(
                remember
                    .forget(req(ForgetRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Amend",
            code(
                remember
                    .amend(req(AmendRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Link",
            code(
                remember
                    .link(req(LinkRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Reflect",
            code(
                remember
                    .reflect(req(ReflectRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "RecordToolFeedback",
            code(
                remember
                    .record_tool_feedback(req(ToolFeedbackRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
        (
            "Consolidate",
            code(
                remember
                    .consolidate(req(ConsolidateRequest::default(), sign))
                    .await
                    .map(|_| tonic::Code::Ok),
            ),
        ),
    ]
}

/// Decides the metadata of a forged gRPC request.
type Sign<'a> = Box<dyn Fn(&mut tonic::metadata::MetadataMap) + 'a>;

#[tokio::test]
async fn backends_refuse_forged_principals_without_the_internal_token() {
    let stack = grpc_stack().await;
    let a = create_tenant(&stack.store, "acme", EVERY_PERMISSION).await;
    let b = create_tenant(&stack.store, "globex", EVERY_PERMISSION).await;
    // B stores a memory through the gateway, as a client would.
    let (status, body) = {
        let response = http()
            .post(format!("http://{}/v1/tools/remember", stack.http_addr))
            .bearer_auth(&b.api_key)
            .json(&json!({"content": B_CONTENT, "topic": B_TOPIC, "type": "fact"}))
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    assert_eq!(status, 200, "{body}");

    let mut b_principal = b.principal();
    b_principal.permissions = EVERY_PERMISSION.to_vec();
    let wrong = mneme_proto::principal::PrincipalSigner::new(
        "not-the-internal-token-but-just-as-long-1234",
    );
    let attach = |signer: &mneme_proto::principal::PrincipalSigner,
                  principal: &mneme_core::Principal,
                  metadata: &mut tonic::metadata::MetadataMap| {
        let mut carrier = tonic::Request::new(());
        signer.attach(&mut carrier, principal);
        *metadata = carrier.metadata().clone();
    };
    let forged: [(&str, Sign<'_>); 3] = [
        (
            "no principal",
            Box::new(|_: &mut tonic::metadata::MetadataMap| {}),
        ),
        (
            "B's principal signed with a wrong token",
            Box::new(|m: &mut tonic::metadata::MetadataMap| attach(&wrong, &b_principal, m)),
        ),
        (
            "a principal header of garbage",
            Box::new(|m: &mut tonic::metadata::MetadataMap| {
                m.insert_bin(
                    mneme_proto::principal::PRINCIPAL_METADATA,
                    tonic::metadata::MetadataValue::from_bytes(b"\x0a\x10not a principal"),
                );
                m.insert(
                    "x-mneme-tenant-id",
                    b.tenant_id.to_string().parse().unwrap(),
                );
            }),
        ),
    ];
    for (what, sign) in &forged {
        for (method, code) in grpc_codes(&stack, sign.as_ref()).await {
            assert_eq!(code, tonic::Code::Unauthenticated, "{method} with {what}");
        }
    }
    // The control: the same calls signed with the real token get past the
    // check (so the refusals above are the signature's doing).
    let right = mneme_proto::principal::PrincipalSigner::new(INTERNAL_TOKEN);
    let a_principal = a.principal();
    let codes = grpc_codes(&stack, &|m| attach(&right, &a_principal, m)).await;
    assert!(
        codes
            .iter()
            .all(|(_, code)| *code != tonic::Code::Unauthenticated),
        "{codes:?}"
    );
    // Nothing of B's was touched: its memory is there, once, unchanged.
    let db = &stack._db;
    assert_eq!(
        db.count_in_tenant(
            b.tenant_id,
            &format!("content = '{B_CONTENT}' AND valid_to IS NULL")
        )
        .await,
        1
    );
    assert_eq!(db.count_in_tenant(b.tenant_id, "true").await, 1);
    stack.stop.cancel();
    stack.task.await.unwrap().unwrap();
}

// ---------------------------------------------------------------- OAuth

const CALLBACK: &str = "http://127.0.0.1:9/callback";

struct OAuth {
    authorize: String,
    token: String,
    register: String,
    revoke: String,
    resource: String,
}

async fn oauth_endpoints(stack: &Stack) -> OAuth {
    let server: Value = http()
        .get(format!(
            "http://{}/.well-known/oauth-authorization-server",
            stack.http_addr
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let endpoint = |name: &str| server[name].as_str().unwrap().to_owned();
    OAuth {
        authorize: endpoint("authorization_endpoint"),
        token: endpoint("token_endpoint"),
        register: endpoint("registration_endpoint"),
        revoke: endpoint("revocation_endpoint"),
        resource: stack.mcp_url(),
    }
}

impl OAuth {
    async fn register(&self, bound_to: Option<&str>) -> String {
        let mut request = http().post(&self.register).json(&json!({
            "client_name": "Isolation connector",
            "redirect_uris": [CALLBACK],
            "token_endpoint_auth_method": "none",
        }));
        if let Some(key) = bound_to {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 201);
        response.json::<Value>().await.unwrap()["client_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// Consent with `api_key` pasted on the page: the code, or the page.
    async fn code(&self, client_id: &str, api_key: &str) -> (Result<String, String>, String) {
        let verifier = URL_SAFE_NO_PAD.encode(
            [
                Uuid::new_v4().as_bytes().as_slice(),
                Uuid::new_v4().as_bytes(),
            ]
            .concat(),
        );
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let page = http()
            .get(&self.authorize)
            .query(&[
                ("response_type", "code"),
                ("client_id", client_id),
                ("redirect_uri", CALLBACK),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
                ("scope", "memory:read memory:write offline_access"),
                ("resource", &self.resource),
                ("state", "s"),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(page.status(), 200);
        let cookie = page
            .headers()
            .get("set-cookie")
            .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_owned());
        let html = page.text().await.unwrap();
        let mut form: HashMap<String, String> = html
            .split("<input type=\"hidden\" ")
            .skip(1)
            .filter_map(|tag| {
                let name = tag.split("name=\"").nth(1)?.split('"').next()?;
                let value = tag.split("value=\"").nth(1)?.split('"').next()?;
                Some((
                    name.to_owned(),
                    value.replace("&amp;", "&").replace("&quot;", "\""),
                ))
            })
            .collect();
        form.insert("api_key".into(), api_key.into());
        form.insert("decision".into(), "allow".into());
        let mut post = http().post(&self.authorize).form(&form);
        if let Some(cookie) = cookie {
            post = post.header("cookie", cookie);
        }
        let answer = post.send().await.unwrap();
        if answer.status().is_redirection() {
            let location =
                reqwest::Url::parse(answer.headers()["location"].to_str().unwrap()).unwrap();
            let code = location
                .query_pairs()
                .find(|(k, _)| k == "code")
                .map(|(_, v)| v.into_owned());
            return (code.ok_or_else(|| location.to_string()), verifier);
        }
        (Err(answer.text().await.unwrap()), verifier)
    }

    async fn token(&self, form: &[(&str, &str)]) -> (u16, Value) {
        let response = http().post(&self.token).form(form).send().await.unwrap();
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(Value::Null),
        )
    }

    /// Access and refresh tokens for `api_key` through `client_id`.
    async fn tokens(&self, client_id: &str, api_key: &str) -> Value {
        let (code, verifier) = self.code(client_id, api_key).await;
        let code = code.expect("a code");
        let (status, tokens) = self
            .token(&[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("client_id", client_id),
                ("redirect_uri", CALLBACK),
                ("code_verifier", &verifier),
            ])
            .await;
        assert_eq!(status, 200, "{tokens}");
        tokens
    }
}

#[tokio::test]
async fn oauth_refresh_tokens_clients_and_audiences_stay_with_their_owner() {
    let stack = Stack::start("hash", &[("MNEME_INTERNAL_TOKEN", INTERNAL_TOKEN)]).await;
    let store = stack.db.store();
    let a = create_tenant(&store, "acme", EVERY_PERMISSION).await;
    let b = create_tenant(&store, "globex", EVERY_PERMISSION).await;
    let oauth = oauth_endpoints(&stack).await;
    let a_client = oauth.register(Some(&a.api_key)).await;
    let b_client = oauth.register(None).await;
    let b_tokens = oauth.tokens(&b_client, &b.api_key).await;
    let b_refresh = b_tokens["refresh_token"].as_str().unwrap().to_owned();
    let before = fingerprint(&stack, b.tenant_id).await;

    // A client bound to A's key cannot be made to act as B's key.
    let (code, _) = oauth.code(&a_client, &b.api_key).await;
    assert!(code.is_err(), "A's bound client got a code for B's key");

    // B's refresh token with A's client: refused like a made-up one.
    let made_up = URL_SAFE_NO_PAD.encode([7u8; 32]);
    let (t_status, theirs) = oauth
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &b_refresh),
            ("client_id", &a_client),
        ])
        .await;
    let (r_status, random) = oauth
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &made_up),
            ("client_id", &a_client),
        ])
        .await;
    assert!((400..500).contains(&t_status), "{theirs}");
    assert_eq!(
        (t_status, normalise(&theirs.to_string(), "")),
        (r_status, normalise(&random.to_string(), "")),
        "B's refresh token reads differently from a made-up one"
    );
    // A's client revoking B's token revokes nothing.
    let revoked = http()
        .post(&oauth.revoke)
        .form(&[
            ("token", b_refresh.as_str()),
            ("client_id", a_client.as_str()),
        ])
        .send()
        .await
        .unwrap();
    assert!(revoked.status().as_u16() < 500);
    assert_eq!(
        before,
        fingerprint(&stack, b.tenant_id).await,
        "A's attempts changed B's rows"
    );
    let (status, refreshed) = oauth
        .token(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", &b_refresh),
            ("client_id", &b_client),
        ])
        .await;
    assert_eq!(
        status, 200,
        "B's refresh token still works for B: {refreshed}"
    );

    // B's access token at another mneme (same signing key, other audience).
    let elsewhere = Stack::start("hash", &[("MNEME_INTERNAL_TOKEN", INTERNAL_TOKEN)]).await;
    let access = refreshed["access_token"].as_str().unwrap();
    let (status, _) = request(
        &elsewhere,
        access,
        Method::POST,
        "/v1/tools/recall",
        Some(&json!({"text": "x"})),
    )
    .await;
    assert_eq!(status, 401, "a token for another audience");
    let (status, _) = request(
        &stack,
        access,
        Method::POST,
        "/v1/tools/recall",
        Some(&json!({"text": "x"})),
    )
    .await;
    assert_eq!(status, 200, "the token works where it was issued");
    elsewhere.shutdown().await.unwrap();
    stack.shutdown().await.unwrap();
}

// ---------------------------------------------------------- timing oracle

/// Median latencies of `n` recalls of each of two queries by `mcp`,
/// interleaved call by call so that the machine's load (other tests, the
/// embedding worker) weighs on both alike.
async fn median_recalls(mcp: &Mcp, queries: [&str; 2], n: usize) -> [Duration; 2] {
    let mut samples = [Vec::with_capacity(n), Vec::with_capacity(n)];
    for _ in 0..n {
        for (query, samples) in queries.iter().zip(&mut samples) {
            let started = Instant::now();
            mcp.ok("recall", json!({"text": query, "limit": 10})).await;
            samples.push(started.elapsed());
        }
    }
    samples.map(|mut samples| {
        samples.sort();
        samples[n / 2]
    })
}

#[tokio::test]
async fn recall_latency_does_not_reveal_another_tenants_near_duplicates() {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let a = create_tenant(&store, "acme", EVERY_PERMISSION).await;
    let b = create_tenant(&store, "globex", EVERY_PERMISSION).await;
    let a_mcp = stack.mcp(&a.api_key).await;
    let b_mcp = stack.mcp(&b.api_key).await;
    // A holds as much about each query; B will hold near-duplicates of the
    // first only. If B's data changed A's recall time, the first query
    // would slow down against the second.
    const PROBED: &str = "rotate the payments signing certificate before it expires";
    const CONTROL: &str = "restore the nightly database backup onto the staging cluster";
    for n in 0..20 {
        a_mcp
            .remember_new(
                &format!(
                    "Acme note {n}: the payments signing certificate is rotated by the ops team."
                ),
                "certs",
                "fact",
            )
            .await;
        a_mcp
            .remember_new(
                &format!(
                    "Acme note {n}: the nightly database backup is restored onto staging weekly."
                ),
                "backups",
                "fact",
            )
            .await;
    }
    let settled = |tenant: Uuid| {
        let stack = &stack;
        async move {
            eventually("embeddings", Duration::from_secs(20), || {
                let pending = stack.db.count_in_tenant(tenant, "embedding IS NULL");
                async move { pending.await == 0 }
            })
            .await;
        }
    };
    settled(a.tenant_id).await;
    median_recalls(&a_mcp, [PROBED, CONTROL], 5).await; // warm caches and connections
    let [probed_before, control_before] = median_recalls(&a_mcp, [PROBED, CONTROL], 30).await;

    for batch in 0..4 {
        let fragments: Vec<Value> = (0..50)
            .map(|n| json!({"content": format!("Rotate the payments signing certificate before it expires ({batch}-{n})."),
                            "topic": "certs", "type": "procedure", "keywords": ["payments", "signing", "certificate"]}))
            .collect();
        b_mcp
            .ok("batch_remember", json!({"fragments": fragments}))
            .await;
    }
    settled(b.tenant_id).await;
    assert_eq!(stack.db.count_in_tenant(b.tenant_id, "true").await, 200);
    median_recalls(&a_mcp, [PROBED, CONTROL], 5).await;
    let [probed, control] = median_recalls(&a_mcp, [PROBED, CONTROL], 30).await;

    eprintln!(
        "recall medians: before B's near-duplicates {probed_before:?} (control {control_before:?}), \
         after {probed:?} (control {control:?})"
    );
    let difference = probed.abs_diff(control);
    let bound = Duration::from_millis(15).max(control / 2);
    assert!(
        difference < bound,
        "with B's near-duplicates stored, A's recall of them took {probed:?} against {control:?} \
         for a query B holds nothing like (before: {probed_before:?} against {control_before:?})"
    );
    stack.shutdown().await.unwrap();
}
