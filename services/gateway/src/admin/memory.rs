//! The tenant's memory, seen by a person: overview, browser, one memory
//! with its links and versions, amend and forget (through the remember
//! service, exactly as the `amend` and `forget` tools: versioned, audited),
//! NDJSON export and import (through `batch_remember`: validation, the
//! key's quota, idempotency) and the knowledge graph.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::IntoResponse;
use mneme_core::cursor::KeysetCursor;
use mneme_core::json::shortest;
use mneme_core::{Error, Permission, Principal};
use mneme_proto::v1;
use mneme_store::fragments::{self, BrowseFilter, Fragment};
use mneme_store::{TenantTx, api_keys, links, versions};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{InTenant, JsonBody, Reply, json, not_found, parse_id};
use crate::App;
use crate::tools::remember::{RememberArgs, remember_request};

/// Names of the tenant's keys, by id.
async fn key_names(tx: &TenantTx<'_>) -> Result<HashMap<Uuid, String>, Error> {
    Ok(api_keys::list(tx)
        .await?
        .into_iter()
        .map(|k| (k.id, k.name))
        .collect())
}

fn summary(fragment: &Fragment, names: &HashMap<Uuid, String>) -> Value {
    json!({
        "id": fragment.id,
        "keyId": fragment.key_id,
        "keyName": names.get(&fragment.key_id),
        "content": fragment.content,
        "topic": fragment.topic,
        "type": fragment.fragment_type,
        "keywords": fragment.keywords,
        "importance": shortest(fragment.importance),
        "isAnchor": fragment.is_anchor,
        "workspace": fragment.workspace,
        "agentId": fragment.agent_id,
        "createdAt": fragment.created_at,
        "validTo": fragment.valid_to,
        "embedded": fragment.embedded,
    })
}

/// Everything `remember` takes, so an exported line imports as it was.
fn export_line(fragment: &Fragment) -> Value {
    json!({
        "id": fragment.id,
        "keyId": fragment.key_id,
        "createdAt": fragment.created_at,
        "content": fragment.content,
        "topic": fragment.topic,
        "type": fragment.fragment_type,
        "keywords": fragment.keywords,
        "importance": shortest(fragment.importance),
        "isAnchor": fragment.is_anchor,
        "source": fragment.source,
        "workspace": fragment.workspace,
        "agentId": fragment.agent_id,
        "contextSummary": fragment.context_summary,
        "caseId": fragment.case_id,
        "goal": fragment.goal,
        "outcome": fragment.outcome,
        "phase": fragment.phase,
        "resolutionStatus": fragment.resolution_status,
        "assertionStatus": fragment.assertion_status,
        "affect": fragment.affect,
        "occurredAt": fragment.occurred_at,
    })
}

/// `GET /memory/overview`.
pub(crate) async fn overview(State(app): State<App>, scope: InTenant) -> Reply {
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let census = fragments::census(&tx).await?;
    let names = key_names(&tx).await?;
    let by_type: serde_json::Map<String, Value> = census
        .by_type
        .iter()
        .map(|(t, n)| (t.clone(), json!(n)))
        .collect();
    json(json!({
        "total": census.total,
        "pendingEmbedding": census.pending_embedding,
        "byType": by_type,
        "byKey": census.by_key.iter().map(|(id, n)| json!({
            "keyId": id, "keyName": names.get(id), "count": n,
        })).collect::<Vec<_>>(),
        "byTopic": census.by_topic.iter().map(|(topic, n)| json!({
            "topic": topic, "count": n,
        })).collect::<Vec<_>>(),
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BrowseQuery {
    q: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    topic: Option<String>,
    key: Option<String>,
    workspace: Option<String>,
    #[serde(default)]
    include_invalid: bool,
    limit: Option<i64>,
    cursor: Option<String>,
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn optional_key(raw: Option<&str>) -> Result<Option<Uuid>, Error> {
    raw.map(|k| k.parse().map_err(|_| not_found("key")))
        .transpose()
}

/// `GET /memory`: newest first, filtered, a page at a time.
pub(crate) async fn browse(
    State(app): State<App>,
    scope: InTenant,
    Query(query): Query<BrowseQuery>,
) -> Reply {
    let limit = query.limit.unwrap_or(25).clamp(1, 100);
    let filter = BrowseFilter {
        text: non_empty(&query.q),
        fragment_type: non_empty(&query.kind),
        topic: non_empty(&query.topic),
        key_id: optional_key(non_empty(&query.key))?,
        workspace: non_empty(&query.workspace),
        include_invalid: query.include_invalid,
        after: non_empty(&query.cursor)
            .map(KeysetCursor::decode)
            .transpose()?
            .map(|cursor| (cursor.created_at, cursor.id)),
    };
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let mut page = fragments::browse(&tx, &filter, limit + 1).await?;
    let more = page.len() as i64 > limit;
    page.truncate(limit as usize);
    let names = key_names(&tx).await?;
    let next = more.then(|| page.last()).flatten().map(|last| {
        KeysetCursor {
            created_at: last.created_at,
            id: last.id,
        }
        .encode()
    });
    json(json!({
        "items": page.iter().map(|f| summary(f, &names)).collect::<Vec<_>>(),
        "nextCursor": next,
    }))
}

/// The fragment with this id in the tenant, whichever of the tenant's
/// keys (`names`, from [`key_names`]) holds it.
async fn find(
    tx: &TenantTx<'_>,
    names: &HashMap<Uuid, String>,
    id: Uuid,
) -> Result<Fragment, Error> {
    let keys: Vec<Uuid> = names.keys().copied().collect();
    fragments::fetch(tx, &keys, &[id])
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| not_found("memory"))
}

/// `GET /memory/{id}`: the fragment, its links and its earlier versions.
pub(crate) async fn show(State(app): State<App>, scope: InTenant, Path(id): Path<String>) -> Reply {
    let id = parse_id(&id, "memory")?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let names = key_names(&tx).await?;
    let fragment = find(&tx, &names, id).await?;
    let keys: Vec<Uuid> = names.keys().copied().collect();
    let ends = links::around(&tx, &keys, &[id], None, 50).await?;
    let others: Vec<Uuid> = ends.iter().map(|e| e.other).collect();
    let contents: HashMap<Uuid, String> = fragments::fetch(&tx, &keys, &others)
        .await?
        .into_iter()
        .map(|f| (f.id, f.content))
        .collect();
    let history = versions::list(&tx, id).await?;
    let mut detail = summary(&fragment, &names);
    if let Value::Object(map) = &mut detail {
        for (name, value) in export_line(&fragment).as_object().into_iter().flatten() {
            map.entry(name.clone()).or_insert_with(|| value.clone());
        }
        map.insert("accessCount".into(), json!(fragment.access_count));
        map.insert("ttlTier".into(), json!(fragment.ttl_tier));
    }
    json(json!({
        "fragment": detail,
        "links": ends.iter().map(|e| json!({
            "id": e.other,
            "relation": e.relation_type,
            "weight": shortest(e.weight),
            "direction": if e.outgoing { "outgoing" } else { "incoming" },
            "content": contents.get(&e.other),
        })).collect::<Vec<_>>(),
        "versions": history.iter().map(|v| json!({
            "content": v.content,
            "topic": v.topic,
            "keywords": v.keywords,
            "type": v.fragment_type,
            "importance": shortest(v.importance),
            "isAnchor": v.is_anchor,
            "amendedBy": v.amended_by,
            "amendedAt": v.amended_at,
        })).collect::<Vec<_>>(),
    }))
}

/// Amend and forget act as the memory's key with read and write.
fn acting_for(scope: &InTenant, fragment: &Fragment) -> Principal {
    scope.acting_as(
        fragment.key_id,
        vec![Permission::Read, Permission::Write],
        None,
    )
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Amendment {
    content: Option<String>,
    topic: Option<String>,
    keywords: Option<Vec<String>>,
    #[serde(rename = "type")]
    kind: Option<String>,
    importance: Option<f32>,
    is_anchor: Option<bool>,
    /// Why: kept in the audit log.
    reason: Option<String>,
}

/// `PATCH /memory/{id}`.
pub(crate) async fn amend(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Amendment>,
) -> Reply {
    scope.actor.require_manage()?;
    let id = parse_id(&id, "memory")?;
    let mut db = app.store.client().await?;
    let fragment = {
        let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
        find(&tx, &key_names(&tx).await?, id).await?
    };
    let request = v1::AmendRequest {
        id: id.to_string(),
        content: body.content.clone(),
        topic: body.topic.clone(),
        keywords: body
            .keywords
            .clone()
            .map(|values| v1::KeywordList { values }),
        r#type: body.kind.clone(),
        importance: body.importance,
        is_anchor: body.is_anchor,
        agent_id: Some(fragment.agent_id.clone()),
        ..Default::default()
    };
    let response = app
        .backends
        .amend(&acting_for(&scope, &fragment), request)
        .await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    scope
        .actor
        .audit(
            &tx,
            "memory.amend",
            id,
            json!({
                "reason": body.reason,
                "fields": {
                    "content": body.content.is_some(),
                    "topic": body.topic,
                    "type": body.kind,
                    "importance": body.importance.map(shortest),
                    "isAnchor": body.is_anchor,
                    "keywords": body.keywords.is_some(),
                },
            }),
        )
        .await?;
    let names = key_names(&tx).await?;
    let amended = find(&tx, &names, response.id.parse().unwrap_or(id)).await?;
    tx.commit().await?;
    json(json!({ "fragment": summary(&amended, &names), "updated": response.updated }))
}

/// `DELETE /memory/{id}`: forgets it, even when anchored or permanent
/// (the person asked for exactly this memory).
pub(crate) async fn forget(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
) -> Reply {
    scope.actor.require_manage()?;
    let id = parse_id(&id, "memory")?;
    let mut db = app.store.client().await?;
    let fragment = {
        let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
        find(&tx, &key_names(&tx).await?, id).await?
    };
    let response = app
        .backends
        .forget(
            &acting_for(&scope, &fragment),
            v1::ForgetRequest {
                id: id.to_string(),
                force: true,
                agent_id: Some(fragment.agent_id.clone()),
                ..Default::default()
            },
        )
        .await?;
    scope
        .audit_done(
            &app,
            "memory.forget",
            id,
            json!({ "topic": fragment.topic, "keyId": fragment.key_id }),
        )
        .await?;
    json(json!({ "forgotten": response.deleted }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct KeyParam {
    key: Option<String>,
}

/// Rows per page while exporting.
const EXPORT_PAGE: i64 = 500;

/// `GET /memory/export`: every valid memory (of one key with `?key=`), one
/// JSON object per line, streamed page by page.
pub(crate) async fn export(
    State(app): State<App>,
    scope: InTenant,
    Query(param): Query<KeyParam>,
) -> Reply {
    scope.actor.require_manage()?;
    let key_id = optional_key(non_empty(&param.key))?;
    {
        let mut db = app.store.client().await?;
        let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
        if let Some(key_id) = key_id
            && api_keys::find(&tx, key_id).await?.is_none()
        {
            return Err(not_found("key").into());
        }
        scope
            .actor
            .audit(
                &tx,
                "memory.export",
                key_id.map(|k| k.to_string()).unwrap_or_default(),
                json!({}),
            )
            .await?;
        tx.commit().await?;
    }
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let store = app.store.clone();
    let tenant_id = scope.tenant_id;
    tokio::spawn(async move {
        let mut after = None;
        loop {
            let page = async {
                let mut db = store.client().await?;
                let tx = TenantTx::begin(&mut db, tenant_id).await?;
                let filter = BrowseFilter {
                    key_id,
                    after,
                    ..Default::default()
                };
                fragments::browse(&tx, &filter, EXPORT_PAGE).await
            }
            .await;
            let page = match page {
                Ok(page) => page,
                Err(error) => {
                    tracing::error!(%error, "memory export failed midway");
                    let _ = sender
                        .send(Err(std::io::Error::other("export failed")))
                        .await;
                    return;
                }
            };
            let mut chunk = Vec::new();
            for fragment in &page {
                serde_json::to_writer(&mut chunk, &export_line(fragment)).expect("JSON serializes");
                chunk.push(b'\n');
            }
            if !chunk.is_empty() && sender.send(Ok(Bytes::from(chunk))).await.is_err() {
                return;
            }
            if (page.len() as i64) < EXPORT_PAGE {
                return;
            }
            after = page.last().map(|f| (f.created_at, f.id));
        }
    });
    let stream = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|item| (item, receiver))
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"mneme-memories.ndjson\""),
    );
    Ok(response)
}

/// Items per `batch_remember` call (its maximum).
const IMPORT_BATCH: usize = 200;

/// Fields of an export line that are no `remember` argument: the import
/// reads `id` for idempotency and sets the key and creation time itself.
const EXPORT_ONLY_FIELDS: [&str; 3] = ["id", "keyId", "createdAt"];

/// One import line as `remember` arguments, or why it cannot be. A line
/// with the `id` of an export imports idempotently (`import:<id>`); any
/// other field that is no `remember` argument is refused, as `remember`
/// refuses it.
fn import_item(line: &str) -> Result<v1::RememberRequest, String> {
    let mut value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let original = value.get("id").and_then(Value::as_str).map(str::to_owned);
    if let Some(fields) = value.as_object_mut() {
        for field in EXPORT_ONLY_FIELDS {
            fields.remove(field);
        }
    }
    let args: RememberArgs = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if matches!(args.scope, Some(crate::tools::kinds::Scope::Session)) {
        return Err("session-scoped memories cannot be imported".into());
    }
    let mut request = remember_request(args);
    if request.idempotency_key.is_none() {
        request.idempotency_key = original.map(|id| format!("import:{id}"));
    }
    Ok(request)
}

/// `POST /memory/import?key=<key id>`: NDJSON lines stored as that key,
/// through the normal write path (validation, the key's fragment quota,
/// idempotency). Bad lines are reported, good ones stored.
pub(crate) async fn import(
    State(app): State<App>,
    scope: InTenant,
    Query(param): Query<KeyParam>,
    body: Bytes,
) -> Reply {
    scope.actor.require_manage()?;
    let key_id = optional_key(non_empty(&param.key))?
        .ok_or_else(|| Error::invalid_argument("name the key to import as with ?key=<key id>"))?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| Error::invalid_argument("the body must be UTF-8 NDJSON"))?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    if lines.len() > app.admin.import_max_lines {
        return Err(Error::invalid_argument(format!(
            "an import has at most {} lines (MNEME_ADMIN_IMPORT_MAX_LINES); split the file",
            app.admin.import_max_lines
        ))
        .into());
    }
    let mut db = app.store.client().await?;
    let key = {
        let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
        api_keys::find(&tx, key_id)
            .await?
            .filter(|k| k.status == "active")
            .ok_or_else(|| not_found("active key"))?
    };
    let principal = Principal {
        workspace: key.default_workspace.clone(),
        ..scope.acting_as(key_id, key.permissions.clone(), None)
    };
    let mut results = Vec::with_capacity(lines.len());
    let (mut imported, mut duplicates, mut failed) = (0u32, 0u32, 0u32);
    let mut valid = Vec::new();
    for (line, text) in &lines {
        match import_item(text) {
            Ok(item) => valid.push((*line, item)),
            Err(error) => {
                failed += 1;
                results.push(json!({ "line": line, "status": "rejected", "error": error }));
            }
        }
    }
    for batch in valid.chunks(IMPORT_BATCH) {
        let request = v1::BatchRememberRequest {
            items: batch.iter().map(|(_, item)| item.clone()).collect(),
            workspace: None,
            agent_id: None,
        };
        let outcome = app
            .backends
            .batch_remember(&principal, request, |_| Box::pin(async {}))
            .await;
        let result = match outcome {
            Ok(result) => result,
            Err(error) => {
                // The batch is one transaction: none of it was stored.
                for (line, _) in batch {
                    failed += 1;
                    results.push(json!({
                        "line": line, "status": "rejected", "error": error.message,
                    }));
                }
                continue;
            }
        };
        for item in result.results {
            let line = batch.get(item.index as usize).map(|(l, _)| *l).unwrap_or(0);
            let status = crate::tools::remember::outcome_name(item.outcome);
            match status {
                "created" => imported += 1,
                "duplicate" | "replayed" => duplicates += 1,
                _ => failed += 1,
            }
            results.push(json!({
                "line": line,
                "status": status,
                "id": item.id,
                "error": item.error.map(|e| e.message),
            }));
        }
    }
    results.sort_by_key(|r| r["line"].as_u64());
    scope
        .audit_done(
            &app,
            "memory.import",
            &key.name,
            json!({ "keyId": key_id, "imported": imported, "duplicates": duplicates, "failed": failed }),
        )
        .await?;
    json(json!({
        "imported": imported,
        "duplicates": duplicates,
        "failed": failed,
        "results": results,
    }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct GraphQuery {
    topic: Option<String>,
    key: Option<String>,
    limit: Option<i64>,
}

/// `GET /graph`: the most important memories and the links among them.
pub(crate) async fn graph(
    State(app): State<App>,
    scope: InTenant,
    Query(query): Query<GraphQuery>,
) -> Reply {
    let limit = query.limit.unwrap_or(150).clamp(1, 500);
    let key_id = optional_key(non_empty(&query.key))?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let nodes = fragments::graph_nodes(&tx, non_empty(&query.topic), key_id, limit).await?;
    let ids: Vec<Uuid> = nodes.iter().map(|f| f.id).collect();
    let edges = links::among(&tx, &ids, None).await?;
    json(json!({
        "nodes": nodes.iter().map(|f| json!({
            "id": f.id,
            "label": f.content.chars().take(80).collect::<String>(),
            "type": f.fragment_type,
            "importance": shortest(f.importance),
            "topic": f.topic,
        })).collect::<Vec<_>>(),
        "edges": edges.iter().map(|e| json!({
            "source": e.from_id,
            "target": e.to_id,
            "relation": e.relation_type,
            "weight": shortest(e.weight),
        })).collect::<Vec<_>>(),
    }))
}
