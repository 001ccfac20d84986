//! Regression tests named after the defects of the reference implementation
//! that mneme must not repeat (`ltm-reference.md` §12.1, items 1–15).
//!
//! Every defect maps to the test that covers it: an existing test elsewhere
//! in the workspace (path given), a test in this file, or — where mneme
//! does not have the subsystem yet — the issue that will bring it, and
//! with it the regression test.
//!
//! | § 12.1 | Defect | Covered by |
//! |---|---|---|
//! | 1 | hybrid RRF drops hits found by keyword and vector search | `services/recall/tests/recall.rs` `filters_and_pages::fragments_found_by_both_keyword_and_vector_search_are_returned_not_dropped` |
//! | 2 | results re-sorted after ranking, discarding the final order | [`recall_returns_results_in_the_order_of_their_final_score`]; with the optional external reranker, `services/recall/tests/rerank.rs` `the_reranker_order_is_final_and_not_re_sorted_afterwards` |
//! | 3 | background linking crosses tenants (and keys) | [`automatic_links_and_duplicate_checks_never_reach_another_tenant_or_key`] |
//! | 3 | consolidation dedup/compression group by topic only | not in mneme yet (consolidation maintenance stages, issue 4/5/6); the consolidator only embeds, per tenant: `services/consolidator/tests/embedding_worker.rs` |
//! | 3 | link previews not scoped to the key | `services/recall/tests/recall.rs` `filters_and_pages::link_previews_never_show_what_the_caller_cannot_read` |
//! | 3 | key filter casts TEXT ids to `int[]` | not applicable: key ids are `uuid` columns bound as `uuid[]` parameters; exercised by every test here |
//! | 4 | reflect stores master-owned fragments | [`reflect_stores_under_the_callers_key_visible_to_it_and_to_no_other_key_or_tenant`] |
//! | 5 | `memory_stats` is global | `services/recall/tests/session_and_history.rs` `stats_count_only_the_callers_memories`; over MCP also in [`reflect_stores_under_the_callers_key_visible_to_it_and_to_no_other_key_or_tenant`] |
//! | 6 | streaming batch path bypasses RBAC | `services/e2e-tests/tests/batch.rs` `a_read_only_key_cannot_write_through_the_streaming_batch_path` |
//! | 7 | modes shape `tools/list` only, not `tools/call` | [`modes_block_excluded_tools_on_tools_call_not_just_in_tools_list`] |
//! | 7 | legacy SSE (`/sse` + `/message`) without rate limit or mode | not in mneme yet (legacy HTTP+SSE transport, issue 4/5/6) |
//! | 8 | `/session/rotate` does not check ownership | no rotation endpoint in mneme yet (issue 4); a session's working memory and seen ids belong to the key that wrote them: `a_session_id_of_another_key_does_not_open_its_working_memory` |
//! | 9 | no authentication when unconfigured; open CORS | [`requests_without_valid_credentials_are_refused_and_foreign_origins_too`] |
//! | 10 | `daily_limit` counts authentications | not in mneme yet (daily call limits: the `daily_call_limit` column is unused, issue 4/5/6) |
//! | 11 | new keys have no quota; reflect and import bypass it | [`new_keys_get_a_fragment_quota_that_every_write_path_respects`]; `services/remember/tests/remember.rs` `write_path::the_quota_is_exact_near_the_limit_and_counts_batches`; `services/recall/tests/session_and_history.rs` `reflect_rejects_nothing_reports_bad_items_and_respects_the_quota` (mneme has no `/import`) |
//! | 12 | pagination dropped over MCP | [`a_cursor_over_mcp_walks_every_result_exactly_once`]; service level: `services/recall/tests/recall.rs` `filters_and_pages::a_cursor_walks_every_result_once_and_pages_do_not_shift` |
//! | 12 | `asOf` is not a validity filter | `services/recall/tests/recall.rs` `filters_and_pages::as_of_is_a_real_validity_filter`; over MCP in [`amend_with_supersede_and_remember_with_supersedes_really_supersede`] |
//! | 12 | `amend.supersedes` does nothing | [`amend_with_supersede_and_remember_with_supersedes_really_supersede`] |
//! | 12 | sparse `fields` leak fields and mark everything stale | [`sparse_fields_return_only_the_requested_fields_and_no_false_staleness`] |
//! | 13 | unknown past protocol versions echoed | [`an_unknown_past_protocol_version_is_negotiated_to_a_supported_one`] |
//! | 13 | `ping` not implemented | [`ping_is_answered`] |
//! | 13 | RBAC denials masked as "Internal error" | [`a_denied_call_is_a_clear_permission_error_not_an_internal_error`] |
//! | 14 | dedup `UPDATE … ON CONFLICT`, pattern abstraction, morpheme fallback, tier policies | not in mneme yet (consolidation maintenance stages, issue 4/5/6) |
//! | 14 | `supersedes` relation outside the CHECK constraint | [`amend_with_supersede_and_remember_with_supersedes_really_supersede`] (the `superseded_by` link is written and read back) |
//! | 14 | `decayEmaActivation` never called | `services/recall/tests/session_and_history.rs` `tool_feedback_moves_activation_and_link_weights_and_rate_limits_decay` |
//! | 14 | `FRAGMENT_DEFAULT_LIMIT` unused | [`new_keys_get_a_fragment_quota_that_every_write_path_respects`] (`MNEME_DEFAULT_FRAGMENT_LIMIT`) |
//! | 14 | auto-linking stops when its first candidate is the fragment itself | [`automatic_linking_goes_on_when_the_first_candidate_is_the_new_fragment_itself`] |
//! | 15 | `remember` amplifies writes (access counts, activation, search events) | [`remember_leaves_other_memories_usage_and_the_search_log_untouched`] |

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use mneme_config::Config;
use mneme_core::Permission;
use mneme_e2e_tests::{Mcp, Stack, eventually, fragment_ids as ids};
use mneme_test_support::{ALL_PERMISSIONS, TestTenant, create_tenant};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::{ClientRequest, PingRequest};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use uuid::Uuid;

// ---------------------------------------------------------------- helpers

/// An MCP client sending extra headers (a session mode, say) on every request.
async fn mcp_with_headers(stack: &Stack, api_key: &str, headers: &[(&'static str, &str)]) -> Mcp {
    let headers: HashMap<HeaderName, HeaderValue> = headers
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            )
        })
        .collect();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(stack.mcp_url())
            .auth_header(api_key)
            .custom_headers(headers),
    );
    Mcp {
        client: ().serve(transport).await.expect("MCP initialize succeeds"),
    }
}

/// Runs `sql` as the owner role inside `tenant` (row-level security is
/// forced on the owner too); returns the rows changed.
async fn execute_in_tenant(stack: &Stack, tenant: Uuid, sql: &str) -> u64 {
    stack
        .db
        .owner_in_tenant(tenant)
        .await
        .execute(sql, &[])
        .await
        .unwrap()
}

/// One `bigint`/`int` scalar of `sql`, read as the owner inside `tenant`.
async fn scalar_in_tenant(stack: &Stack, tenant: Uuid, sql: &str) -> i64 {
    stack
        .db
        .owner_in_tenant(tenant)
        .await
        .query_one(sql, &[])
        .await
        .unwrap()
        .get(0)
}

/// A second API key of an existing tenant, in no group with the first.
async fn add_key(stack: &Stack, tenant: Uuid, name: &str, permissions: &[&str]) -> (Uuid, String) {
    let generated = mneme_core::api_key::generate();
    let id = Uuid::now_v7();
    let permissions: Vec<&str> = permissions.to_vec();
    let mut client = stack.db.owner_client().await;
    let tx = client.transaction().await.unwrap();
    tx.execute(
        "SELECT set_config('mneme.tenant_id', $1, true)",
        &[&tenant.to_string()],
    )
    .await
    .unwrap();
    tx.execute(
        "INSERT INTO mneme.api_keys (id, tenant_id, name, key_prefix, secret_hash, permissions)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &id,
            &tenant,
            &name,
            &generated.prefix,
            &generated.hash.as_slice(),
            &permissions,
        ],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    (id, generated.raw)
}

async fn remember(mcp: &Mcp, content: &str, topic: &str) -> String {
    mcp.remember_new(content, topic, "fact").await
}

/// The `{"error": {...}}` body of a tool error.
fn error_body(text: &str) -> Value {
    serde_json::from_str::<Value>(text).unwrap_or_else(|e| panic!("{e}: {text}"))["error"].clone()
}

/// The tools `tools/list` shows to a client.
async fn tool_names(mcp: &Mcp) -> Vec<String> {
    mcp.client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// A raw HTTP answer from `/mcp`.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    /// The JSON-RPC message, from a JSON body or the SSE event carrying it.
    message: Option<Value>,
}

/// POSTs one JSON-RPC message to `/mcp` without an MCP client library.
async fn post_mcp(
    stack: &Stack,
    api_key: Option<&str>,
    headers: &[(&str, &str)],
    message: &Value,
) -> Reply {
    let mut request = reqwest::Client::new()
        .post(stack.mcp_url())
        .header("accept", "application/json, text/event-stream")
        .json(message);
    if let Some(key) = api_key {
        request = request.bearer_auth(key);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let message = serde_json::from_str::<Value>(&text).ok().or_else(|| {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
    });
    Reply {
        status,
        headers,
        message,
    }
}

fn initialize(version: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw-http", "version": "0"}
        }
    })
}

// ------------------------------------------------------------------ tests

/// §12.1 item 2: the order of the answer is the order of the final score.
#[tokio::test]
async fn recall_returns_results_in_the_order_of_their_final_score() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    // Importance and relevance disagree, so a re-sort by importance (or by
    // anything but the final score) would show.
    for (content, importance) in [
        (
            "The nightly backup job copies the orders database to S3.",
            0.2,
        ),
        (
            "Backup restores of the orders database are tested monthly.",
            0.9,
        ),
        (
            "The orders database backup job runs nightly at 02:00 UTC.",
            0.1,
        ),
        ("The S3 bucket for backups keeps 30 days of versions.", 0.95),
        ("Orders are archived after two years.", 0.6),
    ] {
        mcp.ok(
            "remember",
            json!({"content": content, "topic": "backups", "type": "fact",
                   "importance": importance}),
        )
        .await;
    }
    stack.wait_until_embedded(acme.tenant_id).await;
    let recalled = mcp
        .ok(
            "recall",
            json!({"text": "nightly orders database backup job", "keywords": ["nightly"],
                   "limit": 10}),
        )
        .await;
    let scores: Vec<f64> = recalled["fragments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["score"].as_f64().unwrap())
        .collect();
    assert!(scores.len() >= 3, "{recalled}");
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "results must come in score order: {scores:?}"
    );
    let importances: Vec<f64> = recalled["fragments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["importance"].as_f64().unwrap())
        .collect();
    assert!(
        importances.windows(2).any(|w| w[0] < w[1]),
        "relevance, not importance alone, decides the order: {importances:?}"
    );
    stack.shutdown().await.unwrap();
}

/// §12.1 item 3: automatic links, duplicate detection and supersession stay
/// inside the writer's key (and so inside its tenant).
#[tokio::test]
async fn automatic_links_and_duplicate_checks_never_reach_another_tenant_or_key() {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;
    let (_colleague_id, colleague_key) =
        add_key(&stack, acme.tenant_id, "colleague", &["read", "write"]).await;
    let first = "The deploy pipeline signs release images with cosign.";
    let second = "The deploy pipeline pushes signed release images to the registry.";
    let remember_both = |mcp: Mcp| async move {
        let mut stored = Vec::new();
        for content in [first, second] {
            let result = mcp
                .ok(
                    "remember",
                    json!({"content": content, "topic": "deploy", "type": "fact",
                           "keywords": ["deploy", "pipeline", "release", "images"]}),
                )
                .await;
            // Identical content of another key or tenant is not a duplicate.
            assert_eq!(result["outcome"], "created", "{result}");
            stored.push(result["id"].as_str().unwrap().to_owned());
        }
        (mcp, stored)
    };
    let (acme_mcp, acme_ids) = remember_both(stack.mcp(&acme.api_key).await).await;
    let (colleague_mcp, colleague_ids) = remember_both(stack.mcp(&colleague_key).await).await;
    let (rival_mcp, rival_ids) = remember_both(stack.mcp(&rival.api_key).await).await;

    // Each writer's second fragment gets its automatic links (temporal and
    // related) to its own first one…
    for (tenant, ids) in [
        (acme.tenant_id, &acme_ids),
        (acme.tenant_id, &colleague_ids),
        (rival.tenant_id, &rival_ids),
    ] {
        let own = format!(
            "ARRAY[from_id, to_id] <@ ARRAY['{}', '{}']::uuid[]
             AND relation_type IN ('temporal', 'related')",
            ids[1], ids[0]
        );
        eventually(
            "automatic links to the writer's own fragment",
            Duration::from_secs(10),
            || {
                let own = own.clone();
                let stack = &stack;
                async move { stack.db.count_rows(tenant, "fragment_links", &own).await == 2 }
            },
        )
        .await;
    }
    // …and to nothing of another key: every link joins two fragments of one key.
    let across_keys = "(SELECT key_id FROM mneme.fragments f
                         WHERE f.tenant_id = fragment_links.tenant_id AND f.id = from_id)
                    <> (SELECT key_id FROM mneme.fragments f
                         WHERE f.tenant_id = fragment_links.tenant_id AND f.id = to_id)";
    assert_eq!(
        stack
            .db
            .count_rows(acme.tenant_id, "fragment_links", across_keys)
            .await,
        0
    );
    for (tenant, ids) in [
        (
            acme.tenant_id,
            [acme_ids.clone(), colleague_ids.clone()].concat(),
        ),
        (rival.tenant_id, rival_ids.clone()),
    ] {
        let linked = stack.db.count_rows(tenant, "fragment_links", "true").await;
        let internal = stack
            .db
            .count_rows(
                tenant,
                "fragment_links",
                &format!(
                    "from_id::text IN ({0}) AND to_id::text IN ({0})",
                    ids.iter()
                        .map(|id| format!("'{id}'"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            )
            .await;
        assert_eq!(
            linked, internal,
            "links only among the tenant's own fragments"
        );
    }
    // Nobody's memory was deduplicated away or superseded by another's.
    assert_eq!(
        stack
            .db
            .count_in_tenant(acme.tenant_id, "valid_to IS NULL")
            .await,
        4
    );
    assert_eq!(
        stack
            .db
            .count_in_tenant(rival.tenant_id, "valid_to IS NULL")
            .await,
        2
    );
    // What each caller recalls, and every link it is shown, is its own.
    for (mcp, own) in [
        (&acme_mcp, &acme_ids),
        (&colleague_mcp, &colleague_ids),
        (&rival_mcp, &rival_ids),
    ] {
        let recalled = mcp
            .ok(
                "recall",
                json!({"text": "deploy pipeline release images",
                       "linkRelationType": ["temporal", "related"]}),
            )
            .await;
        let mut found = ids(&recalled);
        found.sort();
        let mut expected = own.clone();
        expected.sort();
        assert_eq!(found, expected, "{recalled}");
        for fragment in recalled["fragments"].as_array().unwrap() {
            for link in fragment["linked"].as_array().unwrap() {
                assert!(
                    own.contains(&link["id"].as_str().unwrap().to_owned()),
                    "{link}"
                );
            }
        }
    }
    stack.shutdown().await.unwrap();
}

/// §12.1 item 4 (and 5 over MCP): reflected knowledge belongs to the caller.
#[tokio::test]
async fn reflect_stores_under_the_callers_key_visible_to_it_and_to_no_other_key_or_tenant() {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let rival = create_tenant(&store, "rival", ALL_PERMISSIONS).await;
    let (_, colleague_key) = add_key(&stack, acme.tenant_id, "colleague", &["read", "write"]).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let reflected = mcp
        .ok(
            "reflect",
            json!({
                "summary": "The invoice exporter now writes UTF-8 with a byte order mark.",
                "decisions": ["Invoice exports use semicolons as the CSV separator."],
                "topic": "invoices"
            }),
        )
        .await;
    let count = reflected["count"].as_i64().unwrap();
    assert_eq!(count, 3, "a fact, a decision and the episode: {reflected}");
    assert_eq!(
        stack
            .db
            .count_in_tenant(acme.tenant_id, &format!("key_id = '{}'", acme.key_id))
            .await,
        count,
        "every reflected fragment is owned by the caller's key"
    );
    assert_eq!(
        stack.db.count_in_tenant(acme.tenant_id, "true").await,
        count
    );

    let query = json!({"text": "invoice exports CSV separator semicolons"});
    let own = mcp.ok("recall", query.clone()).await;
    assert!(
        own["fragments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["content"] == "Invoice exports use semicolons as the CSV separator."),
        "{own}"
    );
    assert_eq!(mcp.ok("memory_stats", json!({})).await["total"], count);
    for key in [colleague_key.as_str(), rival.api_key.as_str()] {
        let other = stack.mcp(key).await;
        assert_eq!(other.ok("recall", query.clone()).await["count"], 0);
        assert_eq!(other.ok("memory_stats", json!({})).await["total"], 0);
    }
    stack.shutdown().await.unwrap();
}

/// §12.1 item 7: a mode removes tools from `tools/call`, not just from the list.
#[tokio::test]
async fn modes_block_excluded_tools_on_tools_call_not_just_in_tools_list() {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let admin = create_tenant(&store, "operators", &[Permission::Admin]).await;
    // The key's default mode.
    execute_in_tenant(
        &stack,
        acme.tenant_id,
        &format!(
            "UPDATE mneme.api_keys SET default_mode = 'recall-only' WHERE id = '{}'",
            acme.key_id
        ),
    )
    .await;
    let denied_by_mode = |text: String| {
        let error = error_body(&text);
        assert_eq!(error["code"], "permission_denied", "{text}");
        assert!(
            error["message"].as_str().unwrap().contains("mode"),
            "{text}"
        );
    };

    let recall_only = stack.mcp(&acme.api_key).await;
    let listed = tool_names(&recall_only).await;
    assert!(listed.contains(&"recall".to_owned()), "{listed:?}");
    for write in [
        "remember",
        "batch_remember",
        "amend",
        "forget",
        "link",
        "reflect",
    ] {
        assert!(!listed.contains(&write.to_owned()), "{write} in {listed:?}");
    }
    let fact = json!({"content": "The VPN gateway moved to vpn2.example.com.",
                      "topic": "network", "type": "fact"});
    denied_by_mode(recall_only.tool_error("remember", fact.clone()).await);
    denied_by_mode(
        recall_only
            .tool_error("batch_remember", json!({"fragments": [fact.clone()]}))
            .await,
    );
    denied_by_mode(
        recall_only
            .tool_error(
                "reflect",
                json!({"summary": "The VPN moved to a new host."}),
            )
            .await,
    );
    assert_eq!(stack.db.count_in_tenant(acme.tenant_id, "true").await, 0);
    recall_only
        .ok("recall", json!({"text": "VPN gateway"}))
        .await;

    // The REST facade applies the same mode.
    let rest = reqwest::Client::new()
        .post(format!("http://{}/v1/tools/remember", stack.http_addr))
        .bearer_auth(&acme.api_key)
        .json(&fact)
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 403);
    let body: Value = rest.json().await.unwrap();
    assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    assert_eq!(stack.db.count_in_tenant(acme.tenant_id, "true").await, 0);

    // The X-Mneme-Mode header overrides the key's default.
    let write_only =
        mcp_with_headers(&stack, &acme.api_key, &[("x-mneme-mode", "write-only")]).await;
    let listed = tool_names(&write_only).await;
    assert!(!listed.contains(&"recall".to_owned()), "{listed:?}");
    write_only.ok("remember", fact.clone()).await;
    assert_eq!(stack.db.count_in_tenant(acme.tenant_id, "true").await, 1);
    denied_by_mode(
        write_only
            .tool_error("recall", json!({"text": "VPN gateway"}))
            .await,
    );
    denied_by_mode(write_only.tool_error("memory_stats", json!({})).await);

    let onboarding =
        mcp_with_headers(&stack, &acme.api_key, &[("x-mneme-mode", "onboarding")]).await;
    assert_eq!(
        onboarding
            .ok("recall", json!({"text": "VPN gateway"}))
            .await["count"],
        1
    );
    onboarding
        .ok(
            "remember",
            json!({"content": "The VPN needs the new client profile since May.",
                   "topic": "network", "type": "fact"}),
        )
        .await;

    // Audit is read-only for administrators.
    let audit = mcp_with_headers(&stack, &admin.api_key, &[("x-mneme-mode", "audit")]).await;
    denied_by_mode(audit.tool_error("remember", fact.clone()).await);
    assert_eq!(stack.db.count_in_tenant(admin.tenant_id, "true").await, 0);
    audit.ok("recall", json!({"text": "VPN gateway"})).await;
    stack.shutdown().await.unwrap();
}

/// §12.1 item 9: no credentials, no access; foreign browser origins neither.
#[tokio::test]
async fn requests_without_valid_credentials_are_refused_and_foreign_origins_too() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let http = reqwest::Client::new();
    let tools_list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    for key in [None, Some("mn_notakey_000000"), Some("")] {
        let reply = post_mcp(&stack, key, &[], &initialize("2025-11-25")).await;
        assert_eq!(reply.status, 401, "{key:?}: {reply:?}");
        assert!(reply.headers.contains_key("www-authenticate"), "{reply:?}");
        let reply = post_mcp(&stack, key, &[], &tools_list).await;
        assert_eq!(reply.status, 401, "{key:?}: {reply:?}");
        let rest = http
            .post(format!("http://{}/v1/tools/recall", stack.http_addr))
            .header("authorization", format!("Bearer {}", key.unwrap_or("")))
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(rest.status(), 401, "{key:?}");
    }
    // A revoked key is refused too (the gateway caches only successes).
    let (_, revoked) = add_key(&stack, acme.tenant_id, "retired", &["read"]).await;
    execute_in_tenant(
        &stack,
        acme.tenant_id,
        "UPDATE mneme.api_keys SET status = 'revoked' WHERE name = 'retired'",
    )
    .await;
    assert_eq!(
        post_mcp(&stack, Some(&revoked), &[], &initialize("2025-11-25"))
            .await
            .status,
        401
    );

    // The real key works, from no origin or mneme's own…
    let ok = post_mcp(&stack, Some(&acme.api_key), &[], &initialize("2025-11-25")).await;
    assert_eq!(ok.status, 200, "{ok:?}");
    // …but a page of another site cannot use it from a browser.
    let foreign = post_mcp(
        &stack,
        Some(&acme.api_key),
        &[("origin", "https://evil.example.net")],
        &initialize("2025-11-25"),
    )
    .await;
    assert_eq!(foreign.status, 403, "{foreign:?}");
    assert!(!foreign.headers.contains_key("access-control-allow-origin"));
    let preflight = http
        .request(reqwest::Method::OPTIONS, stack.mcp_url())
        .header("origin", "https://evil.example.net")
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization, content-type",
        )
        .send()
        .await
        .unwrap();
    assert!(
        !preflight
            .headers()
            .contains_key("access-control-allow-origin"),
        "CORS is not open: {:?}",
        preflight.headers()
    );
    stack.shutdown().await.unwrap();
}

/// §12.1 items 11 and 14 (`FRAGMENT_DEFAULT_LIMIT` unused): keys created
/// by `mneme keys create` get `MNEME_DEFAULT_FRAGMENT_LIMIT`, and neither
/// remember, batch_remember nor reflect can exceed it.
#[tokio::test]
async fn new_keys_get_a_fragment_quota_that_every_write_path_respects() {
    use mneme::{Command, KeysCommand, TenantsCommand};

    let stack = Stack::start("hash", &[]).await;
    let config = |extra: &[(&str, &str)]| {
        let mut env: HashMap<String, String> =
            HashMap::from([("MNEME_DATABASE_URL".into(), stack.db.app_url.clone())]);
        for (key, value) in extra {
            env.insert((*key).into(), (*value).into());
        }
        Config::from_env(&env).expect("valid configuration")
    };
    // Boxed: the command's future holds a whole `Config`.
    let create_key = |name: &str, config: Config| {
        Box::pin(mneme::execute(
            Command::Keys(KeysCommand::Create {
                tenant: "cli-tenant".into(),
                name: name.into(),
                permissions: "read,write".into(),
                workspace: None,
                fragment_limit: None,
            }),
            config,
        ))
    };
    Box::pin(mneme::execute(
        Command::Tenants(TenantsCommand::Create {
            name: "cli-tenant".into(),
        }),
        config(&[]),
    ))
    .await
    .unwrap();
    create_key("default-agent", config(&[])).await.unwrap();
    create_key(
        "small-agent",
        config(&[("MNEME_DEFAULT_FRAGMENT_LIMIT", "2")]),
    )
    .await
    .unwrap();
    let tenant: Uuid = stack
        .db
        .owner_client()
        .await
        .query_one(
            "SELECT id FROM mneme.tenants WHERE name = 'cli-tenant'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let limit_of = |name: &'static str| {
        let stack = &stack;
        async move {
            scalar_in_tenant(
                stack,
                tenant,
                &format!(
                    "SELECT coalesce(fragment_limit, -1)::int8 FROM mneme.api_keys WHERE name = '{name}'"
                ),
            )
            .await
        }
    };
    assert_eq!(limit_of("default-agent").await, 10_000);
    assert_eq!(limit_of("small-agent").await, 2);

    // Use the CLI-made key: give it a secret this test knows.
    let known = mneme_core::api_key::generate();
    {
        let mut client = stack.db.owner_client().await;
        let tx = client.transaction().await.unwrap();
        tx.execute(
            "SELECT set_config('mneme.tenant_id', $1, true)",
            &[&tenant.to_string()],
        )
        .await
        .unwrap();
        tx.execute(
            "UPDATE mneme.api_keys SET key_prefix = $1, secret_hash = $2 WHERE name = 'small-agent'",
            &[&known.prefix, &known.hash.as_slice()],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    let mcp = stack.mcp(&known.raw).await;
    remember(&mcp, "The staging cluster runs Kubernetes 1.29.", "staging").await;
    remember(
        &mcp,
        "Staging certificates renew every sixty days.",
        "staging",
    )
    .await;
    let over_quota = |text: String| {
        assert_eq!(error_body(&text)["code"], "quota_exceeded", "{text}");
    };
    over_quota(
        mcp.tool_error(
            "remember",
            json!({"content": "Staging has three worker nodes.", "topic": "staging",
                   "type": "fact"}),
        )
        .await,
    );
    over_quota(
        mcp.tool_error(
            "batch_remember",
            json!({"fragments": [{"content": "Staging logs are kept for a week.",
                                  "topic": "staging", "type": "fact"}]}),
        )
        .await,
    );
    over_quota(
        mcp.tool_error(
            "reflect",
            json!({"decisions": ["Staging upgrades happen on Mondays."]}),
        )
        .await,
    );
    assert_eq!(stack.db.count_in_tenant(tenant, "true").await, 2);
    stack.shutdown().await.unwrap();
}

/// §12.1 item 12 (pagination): `nextCursor` and `hasMore` reach MCP clients
/// and walk every result once.
#[tokio::test]
async fn a_cursor_over_mcp_walks_every_result_exactly_once() {
    // No maintenance: a consolidation pass that happened to start mid-walk
    // (a new tenant is due at the next poll) could merge two of these
    // look-alike fragments between pages, and an offset cursor then shifts.
    let stack = Stack::start("hash", &[("MNEME_CONSOLIDATION", "false")]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    for i in 0..12 {
        remember(
            &mcp,
            &format!("Inventory item {i:02} is stored in warehouse aisle {i}."),
            "inventory",
        )
        .await;
    }
    // Pages are stable for a fixed index; an embedding landing between two
    // pages would add the vector layer mid-walk and reorder the results.
    stack.wait_until_embedded(acme.tenant_id).await;
    let mut cursor: Option<String> = None;
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let mut arguments = json!({"text": "inventory item warehouse aisle", "limit": 5});
        if let Some(cursor) = &cursor {
            arguments["cursor"] = json!(cursor);
        }
        let page = mcp.ok("recall", arguments).await;
        pages += 1;
        seen.extend(ids(&page));
        let has_more = page["hasMore"].as_bool().expect("hasMore is always sent");
        assert_eq!(has_more, page.get("nextCursor").is_some(), "{page}");
        if !has_more {
            break;
        }
        cursor = Some(page["nextCursor"].as_str().unwrap().to_owned());
        assert!(pages < 10, "the cursor does not end");
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 12);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 12, "{seen:?}");
    stack.shutdown().await.unwrap();
}

/// §12.1 item 12 (`amend.supersedes`, `asOf`) and 14 (the supersession
/// relation is storable).
#[tokio::test]
async fn amend_with_supersede_and_remember_with_supersedes_really_supersede() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let old = remember(
        &mcp,
        "The on-call phone number is extension 4411.",
        "on-call",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before_amend = database_now(&stack).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let amended = mcp
        .ok(
            "amend",
            json!({"id": old, "content": "The on-call phone number is extension 5522.",
                   "supersede": true}),
        )
        .await;
    assert_eq!(amended["updated"], true, "{amended}");
    let new = amended["id"].as_str().unwrap().to_owned();
    assert_ne!(new, old, "supersede stores a new memory");

    let query = json!({"text": "on-call phone number extension"});
    assert_eq!(
        ids(&mcp.ok("recall", query.clone()).await),
        vec![new.clone()]
    );
    let mut everything = ids(&mcp
        .ok(
            "recall",
            json!({"text": "on-call phone number extension", "includeSuperseded": true}),
        )
        .await);
    everything.sort();
    let mut both = vec![old.clone(), new.clone()];
    both.sort();
    assert_eq!(everything, both);
    assert_eq!(
        ids(&mcp
            .ok(
                "recall",
                json!({"text": "on-call phone number extension", "asOf": before_amend}),
            )
            .await),
        vec![old.clone()],
        "asOf shows what was valid then"
    );
    let history = mcp.ok("fragment_history", json!({"id": old})).await;
    assert!(history["current"]["validTo"].is_string(), "{history}");
    assert_eq!(history["supersededBy"][0]["id"], new.as_str(), "{history}");
    assert_eq!(
        stack
            .db
            .count_rows(
                acme.tenant_id,
                "fragment_links",
                &format!(
                    "from_id = '{old}' AND to_id = '{new}' AND relation_type = 'superseded_by'"
                ),
            )
            .await,
        1
    );

    // remember's `supersedes` does the same.
    let newest = mcp
        .ok(
            "remember",
            json!({"content": "The on-call phone number is extension 6633.",
                   "topic": "on-call", "type": "fact", "supersedes": [new]}),
        )
        .await;
    assert_eq!(newest["superseded"], json!([new]), "{newest}");
    assert_eq!(
        ids(&mcp.ok("recall", query).await),
        vec![newest["id"].as_str().unwrap().to_owned()]
    );
    stack.shutdown().await.unwrap();
}

/// The database's current time as RFC 3339 (the services use its clock too).
async fn database_now(stack: &Stack) -> String {
    stack
        .db
        .owner_client()
        .await
        .query_one(
            "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC',
                            'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// §12.1 item 12 (sparse `fields`): exactly the requested fields come back,
/// and fresh memories are not reported stale.
#[tokio::test]
async fn sparse_fields_return_only_the_requested_fields_and_no_false_staleness() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let a = remember(
        &mcp,
        "The design review happens every Thursday at 3 pm.",
        "meetings",
    )
    .await;
    let b = remember(
        &mcp,
        "The design review notes live in the team wiki.",
        "meetings",
    )
    .await;
    mcp.ok(
        "link",
        json!({"fromId": a, "toId": b, "relationType": "related"}),
    )
    .await;
    for (fields, expected) in [
        (json!(["content"]), vec!["content", "id"]),
        (
            json!(["content", "accessCount"]),
            vec!["accessCount", "content", "id"],
        ),
        (json!(["topic", "linked"]), vec!["id", "linked", "topic"]),
        // Naming the id, which always comes, is no error.
        (json!(["id", "content"]), vec!["content", "id"]),
    ] {
        let recalled = mcp
            .ok("recall", json!({"text": "design review", "fields": fields}))
            .await;
        assert_eq!(recalled["count"], 2, "{recalled}");
        for fragment in recalled["fragments"].as_array().unwrap() {
            let keys: Vec<&str> = fragment
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(keys, expected, "fields {fields}: {fragment}");
        }
        let signals: Vec<&str> = recalled["hints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["signal"].as_str().unwrap())
            .collect();
        assert!(!signals.contains(&"stale_results"), "{signals:?}");
    }
    stack.shutdown().await.unwrap();
}

/// §12.1 item 13 (protocol negotiation): an unknown version date in the
/// past gets a version mneme speaks, and the session works with it.
#[tokio::test]
async fn an_unknown_past_protocol_version_is_negotiated_to_a_supported_one() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let reply = post_mcp(&stack, Some(&acme.api_key), &[], &initialize("2024-01-01")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let message = reply.message.expect("an initialize result");
    let negotiated = message["result"]["protocolVersion"]
        .as_str()
        .unwrap_or_else(|| panic!("{message}"))
        .to_owned();
    assert_ne!(negotiated, "2024-01-01", "an unknown version is not echoed");
    assert!(
        ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"].contains(&negotiated.as_str()),
        "{negotiated}"
    );
    let session = reply
        .headers
        .get("mcp-session-id")
        .expect("a session")
        .to_str()
        .unwrap()
        .to_owned();
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", negotiated.as_str()),
    ];
    let initialized = post_mcp(
        &stack,
        Some(&acme.api_key),
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(initialized.status, 202, "{initialized:?}");
    let listed = post_mcp(
        &stack,
        Some(&acme.api_key),
        &headers,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let tools = listed.message.expect("a tools/list result");
    assert!(
        tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "recall")),
        "{tools}"
    );
    stack.shutdown().await.unwrap();
}

/// §12.1 item 13 (`ping`).
#[tokio::test]
async fn ping_is_answered() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let pong = mcp
        .client
        .send_request(ClientRequest::PingRequest(PingRequest::default()))
        .await;
    assert!(pong.is_ok(), "ping is answered: {pong:?}");
    // The session still works after it.
    mcp.ok("memory_stats", json!({})).await;
    stack.shutdown().await.unwrap();
}

/// §12.1 item 13 (RBAC errors): a denied call says which permission is
/// missing, as a tool error the agent can read, over MCP and REST alike.
#[tokio::test]
async fn a_denied_call_is_a_clear_permission_error_not_an_internal_error() {
    let stack = Stack::start("hash", &[]).await;
    let store = stack.db.store();
    let reader: TestTenant = create_tenant(&store, "reader", &[Permission::Read]).await;
    let writer: TestTenant = create_tenant(&store, "writer", &[Permission::Write]).await;
    let fact = json!({"content": "The release freeze starts on December 15.",
                      "topic": "release", "type": "fact"});

    let mcp = stack.mcp(&reader.api_key).await;
    let result = mcp.call("remember", fact.clone()).await;
    assert_eq!(
        result.is_error,
        Some(true),
        "a tool error, not a protocol error"
    );
    let text = &result.content[0].as_text().unwrap().text;
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        json!({"error": {"code": "permission_denied",
                         "message": "this API key lacks the `write` permission"}})
    );
    assert!(!text.to_lowercase().contains("internal"), "{text}");
    let writer_mcp = stack.mcp(&writer.api_key).await;
    let denied = writer_mcp
        .tool_error("recall", json!({"text": "release freeze"}))
        .await;
    assert_eq!(
        error_body(&denied)["message"],
        "this API key lacks the `read` permission"
    );

    let rest = reqwest::Client::new()
        .post(format!("http://{}/v1/tools/remember", stack.http_addr))
        .bearer_auth(&reader.api_key)
        .json(&fact)
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 403);
    let body: Value = rest.json().await.unwrap();
    assert_eq!(body["error"]["code"], "permission_denied", "{body}");
    assert_eq!(stack.db.count_in_tenant(reader.tenant_id, "true").await, 0);
    stack.shutdown().await.unwrap();
}

/// §12.1 item 14 (`autoLinkOnRemember`): the new fragment matches its own
/// keywords; that must not stop it from linking to the others.
#[tokio::test]
async fn automatic_linking_goes_on_when_the_first_candidate_is_the_new_fragment_itself() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let keywords = json!(["postgres", "vacuum", "bloat", "autovacuum"]);
    let mut stored = Vec::new();
    // Different topics: no temporal links, only keyword (`related`) ones.
    for (content, topic) in [
        (
            "Autovacuum keeps Postgres table bloat under control.",
            "database",
        ),
        (
            "Postgres vacuum settings were tuned to reduce bloat.",
            "tuning",
        ),
        (
            "Bloat on the orders table came back after autovacuum was paused.",
            "incidents",
        ),
    ] {
        let result = mcp
            .ok(
                "remember",
                json!({"content": content, "topic": topic, "type": "fact",
                       "keywords": keywords}),
            )
            .await;
        stored.push(result["id"].as_str().unwrap().to_owned());
    }
    // Automatic links have no direction: either end may be the new one.
    let related_of = |from: String| {
        let stack = &stack;
        let tenant = acme.tenant_id;
        async move {
            stack
                .db
                .count_rows(
                    tenant,
                    "fragment_links",
                    &format!("'{from}' IN (from_id, to_id) AND relation_type = 'related'"),
                )
                .await
        }
    };
    eventually(
        "the third fragment links to both earlier ones",
        Duration::from_secs(10),
        || {
            let count = related_of(stored[2].clone());
            async move { count.await == 2 }
        },
    )
    .await;
    // Linking runs after each commit, in tasks that may finish in any
    // order: the second fragment's may end after the third's, and may also
    // have found the third by then; what matters is the pairs below.
    eventually(
        "the second fragment links to the first",
        Duration::from_secs(10),
        || {
            let count = related_of(stored[1].clone());
            async move { count.await >= 1 }
        },
    )
    .await;
    for (one, other) in [(2, 0), (2, 1), (1, 0)] {
        assert_eq!(
            stack
                .db
                .count_rows(
                    acme.tenant_id,
                    "fragment_links",
                    &format!(
                        "ARRAY[from_id, to_id] <@ ARRAY['{}', '{}']::uuid[]
                         AND relation_type = 'related'",
                        stored[one], stored[other]
                    ),
                )
                .await,
            1,
            "{one} and {other} are linked once"
        );
    }
    stack.shutdown().await.unwrap();
}

/// §12.1 item 15: conflict detection on `remember` reads; it does not count
/// as a use of the memories it compares against, nor as a search.
#[tokio::test]
async fn remember_leaves_other_memories_usage_and_the_search_log_untouched() {
    // Accesses are flushed every 50 ms, so the wait below would see them.
    let stack = Stack::start("hash", &[("MNEME_RECALL_ACCESS_FLUSH_MS", "50")]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&acme.api_key).await;
    let signed = remember(
        &mcp,
        "Release builds are signed with the ops GPG key.",
        "release",
    )
    .await;
    remember(
        &mcp,
        "Release builds are published to the internal mirror.",
        "release",
    )
    .await;
    let similar = mcp
        .ok(
            "remember",
            json!({"content": "Release builds are signed with the ops GPG key every night.",
                   "topic": "release", "type": "fact"}),
        )
        .await;
    assert_eq!(
        similar["conflicts"][0]["id"], signed,
        "the neighbours were looked at: {similar}"
    );
    // Give any background work of remember (automatic links) time to finish.
    eventually(
        "automatic links of the last write",
        Duration::from_secs(10),
        || {
            let stack = &stack;
            let tenant = acme.tenant_id;
            let id = similar["id"].as_str().unwrap().to_owned();
            async move {
                stack
                    .db
                    .count_rows(
                        tenant,
                        "fragment_links",
                        &format!("'{id}' IN (from_id, to_id)"),
                    )
                    .await
                    > 0
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let touched = "access_count <> 0 OR accessed_at IS NOT NULL OR ema_activation <> 0";
    assert_eq!(stack.db.count_in_tenant(acme.tenant_id, touched).await, 0);
    assert_eq!(
        stack
            .db
            .count_rows(acme.tenant_id, "search_events", "true")
            .await,
        0
    );

    // Control: a real recall does count, so the checks above can see it.
    mcp.ok("recall", json!({"text": "release builds GPG key"}))
        .await;
    assert_eq!(
        stack
            .db
            .count_rows(acme.tenant_id, "search_events", "true")
            .await,
        1
    );
    eventually("recall records the access", Duration::from_secs(10), || {
        let stack = &stack;
        let tenant = acme.tenant_id;
        async move { stack.db.count_in_tenant(tenant, touched).await > 0 }
    })
    .await;
    stack.shutdown().await.unwrap();
}

/// §12.1 item 8 (session ownership): a session id taken from another key
/// opens nothing of that key's session.
#[tokio::test]
async fn a_session_id_of_another_key_does_not_open_its_working_memory() {
    let stack = Stack::start("hash", &[]).await;
    let acme = create_tenant(&stack.db.store(), "acme", ALL_PERMISSIONS).await;
    let (_, colleague_key) = add_key(&stack, acme.tenant_id, "colleague", &["read", "write"]).await;
    let opened = post_mcp(&stack, Some(&acme.api_key), &[], &initialize("2025-11-25")).await;
    assert_eq!(opened.status, 200, "{opened:?}");
    let session = opened.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    post_mcp(
        &stack,
        Some(&acme.api_key),
        &headers,
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let call = |id: u64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments}})
    };
    let stored = post_mcp(
        &stack,
        Some(&acme.api_key),
        &headers,
        &call(
            2,
            "remember",
            json!({"content": "Drafting the confidential Globex merger memo right now.",
                   "topic": "work", "type": "fact", "scope": "session"}),
        ),
    )
    .await;
    let stored = stored.message.expect("a result");
    assert_ne!(stored["result"]["isError"], true, "{stored}");
    let own = post_mcp(
        &stack,
        Some(&acme.api_key),
        &headers,
        &call(3, "context", json!({})),
    )
    .await;
    let own = own.message.expect("a result");
    assert_eq!(
        own["result"]["structuredContent"]["working"][0]["content"],
        "Drafting the confidential Globex merger memo right now.",
        "{own}"
    );

    let other = post_mcp(
        &stack,
        Some(&colleague_key),
        &headers,
        &call(4, "context", json!({})),
    )
    .await;
    if let Some(other) = other.message {
        let text = other.to_string();
        assert!(
            !text.contains("Globex"),
            "another key read the session: {text}"
        );
    }
    stack.shutdown().await.unwrap();
}
