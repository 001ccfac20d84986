//! What is happening in a tenant: the overview, MCP sessions, recall
//! analytics, surfacing, upstreams, consolidation runs, usage, this pod's
//! request metrics and the audit log.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use chrono::Utc;
use mneme_core::json::shortest;
use mneme_core::{Error, Permission};
use mneme_proto::v1;
use mneme_store::{
    TenantTx, admin_audit, api_keys, consolidation, key_groups, search_events, upstreams, usage,
    users,
};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{InTenant, Reply, Standing, json, not_found};
use crate::App;

/// Pending embeddings above which the overview warns.
const EMBEDDING_BACKLOG_WARNING: i64 = 1000;

/// `GET /overview`: counts, health, today's calls, recent changes, alerts.
pub(crate) async fn overview(State(app): State<App>, scope: InTenant) -> Reply {
    let postgres = tokio::time::timeout(crate::READY_TIMEOUT, app.store.ping())
        .await
        .is_ok_and(|r| r.is_ok());
    let redis = app.cache.ping().await;
    let down = app.backends.unhealthy().await;
    let mut db = app.store.client().await?;
    let tenant = mneme_store::tenants::find(&db, scope.tenant_id)
        .await?
        .ok_or_else(|| not_found("tenant"))?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let (fragments, pending_embedding) = mneme_store::fragments::totals(&tx).await?;
    let keys = api_keys::list(&tx).await?;
    let people = users::list(&tx).await?.len();
    let groups = key_groups::list(&tx).await?.len();
    let upstream_count = upstreams::count(&tx).await?;
    let calls_today: i64 = usage::per_key(&tx, Utc::now().date_naive())
        .await?
        .iter()
        .map(|(_, n)| n)
        .sum();
    let recent = if scope.actor.standing.manages() {
        admin_audit::recent(&tx, None, 8).await?
    } else {
        Vec::new()
    };
    let last_run = consolidation::recent_runs(&tx, 1).await?;
    drop(tx);
    let sessions = app
        .cache
        .tenant_sessions(&scope.tenant_id.to_string(), 1000)
        .await
        .map(|s| s.len())
        .ok();
    let now = Utc::now();
    let active_keys: Vec<_> = keys
        .iter()
        .filter(|k| k.status_at(now) == "active")
        .collect();
    let mut alerts = Vec::new();
    let mut alert = |level: &str, message: String| {
        alerts.push(json!({ "level": level, "message": message }));
    };
    if !postgres {
        alert("error", "PostgreSQL does not answer.".into());
    }
    for backend in &down {
        alert(
            "error",
            format!("The {backend} service does not answer its health check."),
        );
    }
    if !redis {
        alert(
            "warning",
            "Redis is unreachable: rate limits are per pod and sessions recover on each request."
                .into(),
        );
    }
    if pending_embedding > EMBEDDING_BACKLOG_WARNING {
        alert(
            "warning",
            format!(
                "{pending_embedding} memories wait for their embedding; vector search misses them until then."
            ),
        );
    }
    for key in &active_keys {
        if let Some(at) = key.expires_at
            && at - now < chrono::Duration::days(7)
        {
            alert(
                "warning",
                format!("Key “{}” expires on {}.", key.name, at.date_naive()),
            );
        }
    }
    if let Some(run) = last_run.first()
        && run.status == "failed"
    {
        alert(
            "warning",
            "The last consolidation run had a failing stage; see Consolidation.".into(),
        );
    }
    if keys.is_empty() {
        alert(
            "info",
            "No API keys yet: create one under Keys to connect an agent.".into(),
        );
    }
    let status = |ok: bool| if ok { "ok" } else { "down" };
    json(json!({
        "tenant": { "id": tenant.id, "name": tenant.name, "status": tenant.status },
        "counts": {
            "fragments": fragments,
            "fragmentsPendingEmbedding": pending_embedding,
            "keys": keys.len(),
            "activeKeys": active_keys.len(),
            "users": people,
            "groups": groups,
            "sessions": sessions,
            "upstreams": upstream_count,
        },
        "health": {
            "postgres": status(postgres),
            "redis": status(redis),
            "recall": status(!down.contains(&"recall")),
            "remember": status(!down.contains(&"remember")),
        },
        "toolCallsToday": calls_today,
        "recent": recent.iter().map(audit_view).collect::<Vec<_>>(),
        "alerts": alerts,
    }))
}

/// `GET /sessions`: the tenant's live MCP sessions.
pub(crate) async fn sessions(State(app): State<App>, scope: InTenant) -> Reply {
    let live = app
        .cache
        .tenant_sessions(&scope.tenant_id.to_string(), 500)
        .await
        .map_err(|_| Error::unavailable("sessions live in Redis, which is unreachable"))?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let names: BTreeMap<String, String> = api_keys::list(&tx)
        .await?
        .into_iter()
        .map(|k| (k.id.to_string(), k.name))
        .collect();
    let lifetime = app.sessions.lifetime();
    let now = Utc::now();
    let sessions: Vec<Value> = live
        .iter()
        .map(|(id, record, left)| {
            let last_use =
                lifetime.last_use_ms(record.created_at_ms, now.timestamp_millis(), *left);
            json!({
                "id": id,
                "keyId": record.key_id,
                "keyName": names.get(&record.key_id),
                "protocolVersion": record.protocol_version,
                "mode": record.mode,
                "createdAt": chrono::DateTime::from_timestamp_millis(record.created_at_ms),
                "lastSeenAt": chrono::DateTime::from_timestamp_millis(last_use),
            })
        })
        .collect();
    json(json!({ "sessions": sessions }))
}

/// `DELETE /sessions/{id}`: ends the session everywhere; its next request
/// gets 404 and the client starts a new one.
pub(crate) async fn terminate_session(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
) -> Reply {
    scope.actor.require_manage()?;
    let record = tenant_session(&app, &scope, &id).await?;
    app.sessions.terminate(&id, record.clone()).await;
    scope
        .audit_done(
            &app,
            "session.terminate",
            &id,
            json!({ "keyId": record.key_id }),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The live session `id` of the request's tenant.
async fn tenant_session(
    app: &App,
    scope: &InTenant,
    id: &str,
) -> Result<mneme_cache::SessionRecord, Error> {
    app.cache
        .session_record(id)
        .await
        .map_err(|_| Error::unavailable("sessions live in Redis, which is unreachable"))?
        .filter(|r| r.tenant_id == scope.tenant_id.to_string() && !r.closed)
        .ok_or_else(|| not_found("session"))
}

async fn working_memory(
    app: &App,
    scope: &InTenant,
    id: &str,
    record: &mneme_cache::SessionRecord,
) -> Result<Vec<mneme_cache::WorkingMemoryItem>, Error> {
    let owner = mneme_cache::session_owner(scope.tenant_id, &record.key_id);
    app.cache
        .working_memory(&owner, id)
        .await
        .map_err(|_| Error::unavailable("working memory lives in Redis, which is unreachable"))
}

/// `GET /sessions/{id}`: the session and its working memory.
pub(crate) async fn session(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
) -> Reply {
    let record = tenant_session(&app, &scope, &id).await?;
    let items = working_memory(&app, &scope, &id, &record).await?;
    json(json!({
        "session": {
            "id": id,
            "keyId": record.key_id,
            "protocolVersion": record.protocol_version,
            "mode": record.mode,
            "createdAt": chrono::DateTime::from_timestamp_millis(record.created_at_ms),
        },
        "workingMemory": items.iter().map(|i| json!({
            "id": i.id,
            "content": i.content,
            "topic": i.topic,
            "type": i.fragment_type,
            "importance": shortest(i.importance),
            "createdAt": chrono::DateTime::from_timestamp_millis(i.created_at_unix_ms),
        })).collect::<Vec<_>>(),
    }))
}

/// `POST /sessions/{id}/reflect`: keeps the session's working memory for
/// good, as `reflect` would at the session's end (facts and an episode,
/// written as the session's key).
pub(crate) async fn reflect_session(
    State(app): State<App>,
    scope: InTenant,
    Path(id): Path<String>,
) -> Reply {
    scope.actor.require_manage()?;
    let record = tenant_session(&app, &scope, &id).await?;
    let items = working_memory(&app, &scope, &id, &record).await?;
    if items.is_empty() {
        return Err(
            Error::invalid_argument("the session holds no working memory to reflect").into(),
        );
    }
    let key_id: Uuid = record.key_id.parse().map_err(|_| Error::internal())?;
    let principal = scope.acting_as(
        key_id,
        vec![Permission::Read, Permission::Write],
        Some(id.clone()),
    );
    let response = app
        .backends
        .reflect(
            &principal,
            v1::ReflectRequest {
                summary: items.iter().map(|i| i.content.clone()).collect(),
                session_id: Some(id.clone()),
                ..Default::default()
            },
        )
        .await?;
    scope
        .audit_done(
            &app,
            "session.reflect",
            &id,
            json!({ "keyId": key_id, "fragments": response.fragments.len() }),
        )
        .await?;
    json(json!({
        "fragments": response.fragments.iter().map(|f| json!({
            "id": f.id, "content": f.content, "type": f.r#type,
        })).collect::<Vec<_>>(),
        "episodeId": response.episode_id,
    }))
}

/// `GET /session-reflections`: what automatic reflection made of the
/// tenant's sessions (the last 50).
pub(crate) async fn session_reflections(State(app): State<App>, scope: InTenant) -> Reply {
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let reflections = mneme_store::session_reflections::recent(&tx, 50).await?;
    json(json!({
        "reflections": reflections.iter().map(|r| json!({
            "sessionId": r.session_id,
            "keyId": r.key_id,
            "activityUntil": chrono::DateTime::from_timestamp_millis(r.activity_until_ms),
            "state": r.state,
            "reason": r.reason,
            "calls": r.calls,
            "fragments": r.fragments,
            "episodeId": r.episode_id,
            "attempts": r.attempts,
            "claimedAt": r.claimed_at,
            "finishedAt": r.finished_at,
        })).collect::<Vec<_>>(),
    }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct DaysParam {
    days: Option<i64>,
}

fn since(days: Option<i64>, default: i64) -> chrono::DateTime<Utc> {
    let days = days.unwrap_or(default).clamp(1, 90);
    // Whole UTC days, today included.
    let start = Utc::now().date_naive() - chrono::Days::new((days - 1) as u64);
    start
        .and_hms_opt(0, 0, 0)
        .expect("midnight exists")
        .and_utc()
}

/// `GET /search-analytics?days=7`.
pub(crate) async fn search_analytics(
    State(app): State<App>,
    scope: InTenant,
    Query(param): Query<DaysParam>,
) -> Reply {
    let from = since(param.days, 7);
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let days = search_events::daily(&tx, from).await?;
    let by_type = search_events::by_type(&tx, from).await?;
    json(json!({
        "days": days.iter().map(|d| json!({
            "day": d.day,
            "searches": d.searches,
            "zeroResults": d.zero_results,
            "p50Ms": d.p50_ms,
            "p95Ms": d.p95_ms,
        })).collect::<Vec<_>>(),
        "byType": by_type.iter().map(|(t, n)| json!({ "queryType": t, "count": n }))
            .collect::<Vec<_>>(),
    }))
}

/// `GET /surfacing?days=7`: what active surfacing injected and how agents
/// rated it.
pub(crate) async fn surfacing(
    State(app): State<App>,
    scope: InTenant,
    Query(param): Query<DaysParam>,
) -> Reply {
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let stats = mneme_store::surfacing::stats(
        &tx,
        mneme_store::surfacing::StatsFilter {
            key_id: None,
            tool: None,
            since: Some(since(param.days, 7)),
            recent: 20,
        },
    )
    .await?;
    let ratings = |c: &mneme_store::surfacing::Counts| {
        json!({
            "helpful": c.helpful,
            "partiallyHelpful": c.partially_helpful,
            "notRelevant": c.not_relevant,
            "alreadyKnown": c.already_known,
        })
    };
    json(json!({
        "totals": { "events": stats.events, "ratings": ratings(&stats.ratings) },
        "tools": stats.tools.iter().map(|t| json!({
            "server": t.server,
            "tool": t.tool,
            "events": t.events,
            "avgMemories": t.avg_memories,
            "ratings": ratings(&t.ratings),
            "minScore": t.min_score,
            "adjustments": t.adjustments,
        })).collect::<Vec<_>>(),
        "recent": stats.recent.iter().map(|e| json!({
            "id": e.id,
            "server": e.server,
            "tool": e.tool,
            "query": e.query,
            "memories": e.memories,
            "maxRelevance": e.max_relevance,
            "createdAt": e.created_at,
        })).collect::<Vec<_>>(),
    }))
}

/// `GET /upstreams`: the tenant's upstream MCP servers (headers never
/// shown), with this pod's view of their health.
pub(crate) async fn upstreams(State(app): State<App>, scope: InTenant) -> Reply {
    scope.actor.require_manage()?;
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let rows = upstreams::list(&tx).await?;
    let views: Vec<Value> = rows
        .into_iter()
        .map(|u| crate::proxy::admin::view_json(&app, scope.tenant_id, u))
        .collect();
    json(json!({ "upstreams": views }))
}

/// `GET /consolidation/runs`.
pub(crate) async fn consolidation_runs(State(app): State<App>, scope: InTenant) -> Reply {
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let runs = consolidation::recent_runs(&tx, 50).await?;
    json(json!({
        "runs": runs.iter().map(|r| json!({
            "id": r.id,
            "trigger": r.trigger,
            "status": r.status,
            "dryRun": r.dry_run,
            "startedAt": r.started_at,
            "finishedAt": r.finished_at,
            "stages": r.stages,
        })).collect::<Vec<_>>(),
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct RunRequest {
    #[serde(default)]
    dry_run: bool,
}

/// `POST /consolidation/run`: runs every stage for the tenant now (or
/// reports what they would change).
pub(crate) async fn run_consolidation(
    State(app): State<App>,
    scope: InTenant,
    body: axum::body::Bytes,
) -> Reply {
    scope.actor.require_manage()?;
    let request: RunRequest = if body.is_empty() {
        RunRequest::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| Error::invalid_argument(format!("send {{\"dryRun\": true|false}}: {e}")))?
    };
    let dry_run = request.dry_run;
    // The run is the tenant's; no key's quota or identity is involved.
    let principal = scope.acting_as(Uuid::nil(), vec![Permission::Admin], None);
    let result = app
        .backends
        .consolidate(&principal, v1::ConsolidateRequest { dry_run }, |_| {
            Box::pin(async {})
        })
        .await?;
    let action = if dry_run {
        "consolidation.dry_run"
    } else {
        "consolidation.run"
    };
    scope
        .audit_done(
            &app,
            action,
            &result.run_id,
            json!({ "failed": result.failed }),
        )
        .await?;
    json(json!({
        "run": {
            "id": result.run_id,
            "dryRun": result.dry_run,
            "status": if result.failed { "failed" } else { "finished" },
            "stages": result.stages.iter().map(|s| json!({
                "stage": s.stage, "affected": s.affected, "millis": s.millis, "error": s.error,
            })).collect::<Vec<_>>(),
        }
    }))
}

/// `GET /usage?days=14`: tool calls per day, and each key today.
pub(crate) async fn usage(
    State(app): State<App>,
    scope: InTenant,
    Query(param): Query<DaysParam>,
) -> Reply {
    let from = since(param.days, 14).date_naive();
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let days = usage::daily_totals(&tx, from).await?;
    let today = usage::per_key(&tx, Utc::now().date_naive()).await?;
    let keys = api_keys::list(&tx).await?;
    json(json!({
        "days": days.iter().map(|(day, n)| json!({ "day": day, "toolCalls": n }))
            .collect::<Vec<_>>(),
        "keys": keys.iter().map(|k| json!({
            "keyId": k.id,
            "keyName": k.name,
            "status": k.status,
            "toolCallsToday": today.iter().find(|(id, _)| *id == k.id).map_or(0, |(_, n)| *n),
            "dailyCallLimit": k.daily_call_limit,
        })).collect::<Vec<_>>(),
    }))
}

#[derive(Debug, Deserialize)]
pub(crate) struct AuditQuery {
    limit: Option<i64>,
    before: Option<i64>,
}

fn audit_view(entry: &admin_audit::Entry) -> Value {
    json!({
        "id": entry.id,
        "at": entry.at,
        "actor": entry.actor,
        "actorKind": entry.actor_kind,
        "action": entry.action,
        "target": entry.target,
        "detail": entry.detail,
        "ip": entry.ip.map(|ip| ip.to_string()),
    })
}

/// `GET /audit?limit=&before=`: newest first.
pub(crate) async fn audit(
    State(app): State<App>,
    scope: InTenant,
    Query(query): Query<AuditQuery>,
) -> Reply {
    scope.actor.require_manage()?;
    let limit = query.limit.unwrap_or(50).clamp(1, 200);
    let mut db = app.store.client().await?;
    let tx = TenantTx::begin(&mut db, scope.tenant_id).await?;
    let entries = admin_audit::recent(&tx, query.before, limit).await?;
    let next = (entries.len() as i64 == limit)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    json(json!({
        "entries": entries.iter().map(audit_view).collect::<Vec<_>>(),
        "nextBefore": next,
    }))
}

/// How often this pod samples its request counters for the charts.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Samples kept: one hour.
const SAMPLES: usize = 360;

/// A histogram summed over its label sets: count and cumulative buckets.
#[derive(Debug, Clone, Default, PartialEq)]
struct Summed {
    count: u64,
    /// (upper bound in seconds, cumulative count)
    buckets: Vec<(f64, u64)>,
}

impl Summed {
    fn add(&mut self, histogram: &prometheus::proto::Histogram) {
        self.count += histogram.get_sample_count();
        for (i, bucket) in histogram.get_bucket().iter().enumerate() {
            match self.buckets.get_mut(i) {
                Some(slot) => slot.1 += bucket.cumulative_count(),
                None => self
                    .buckets
                    .push((bucket.upper_bound(), bucket.cumulative_count())),
            }
        }
    }

    fn minus(&self, earlier: &Summed) -> Summed {
        Summed {
            count: self.count.saturating_sub(earlier.count),
            buckets: self
                .buckets
                .iter()
                .enumerate()
                .map(|(i, (le, n))| {
                    let before = earlier.buckets.get(i).map_or(0, |b| b.1);
                    (*le, n.saturating_sub(before))
                })
                .collect(),
        }
    }

    /// The bucket bound under which `q` of the observations fall, in ms.
    fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let wanted = (q * self.count as f64).ceil() as u64;
        let bound = self
            .buckets
            .iter()
            .find(|(_, n)| *n >= wanted)
            .map_or(f64::INFINITY, |(le, _)| *le);
        bound.is_finite().then_some(bound * 1000.0)
    }
}

/// This pod's MCP requests (all and failed) and tool calls per tool.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    requests: Summed,
    errors: u64,
    tools: BTreeMap<String, (Summed, u64)>,
}

fn snapshot() -> Snapshot {
    let mut snapshot = Snapshot::default();
    for family in mneme_telemetry::metrics::registry().gather() {
        match family.name() {
            "mneme_mcp_request_seconds" => {
                for metric in family.get_metric() {
                    let histogram = metric.get_histogram();
                    snapshot.requests.add(histogram);
                    let failed = metric
                        .get_label()
                        .iter()
                        .any(|l| l.name() == "status" && !l.value().starts_with('2'));
                    if failed {
                        snapshot.errors += histogram.get_sample_count();
                    }
                }
            }
            "mneme_tool_call_seconds" => {
                for metric in family.get_metric() {
                    let label =
                        |name: &str| mneme_telemetry::metrics::label(metric, name).to_owned();
                    let histogram = metric.get_histogram();
                    let entry = snapshot.tools.entry(label("tool")).or_default();
                    entry.0.add(histogram);
                    if label("outcome") != "ok" {
                        entry.1 += histogram.get_sample_count();
                    }
                }
            }
            _ => {}
        }
    }
    snapshot
}

/// One point of the charts: what happened in the `SAMPLE_EVERY` before `at`.
#[derive(Debug, Clone)]
struct Point {
    at: chrono::DateTime<Utc>,
    requests: u64,
    errors: u64,
    p95_ms: Option<f64>,
}

/// The last hour of this pod's request counters, sampled in the background.
#[derive(Debug, Default)]
pub(crate) struct History {
    last: Mutex<Option<Snapshot>>,
    points: Mutex<VecDeque<Point>>,
}

impl History {
    pub(crate) fn sample(&self) {
        let now = snapshot();
        let mut last = self.last.lock().expect("not poisoned");
        if let Some(before) = last.as_ref() {
            let window = now.requests.minus(&before.requests);
            let mut points = self.points.lock().expect("not poisoned");
            if points.len() == SAMPLES {
                points.pop_front();
            }
            points.push_back(Point {
                at: Utc::now(),
                requests: window.count,
                errors: now.errors.saturating_sub(before.errors),
                p95_ms: window.quantile_ms(0.95),
            });
        }
        *last = Some(now);
    }
}

/// `GET /metrics`: this pod's request figures since it started, per tool,
/// and the last hour in 10-second points. Fleet-wide figures are in
/// Prometheus; this is the quick look.
///
/// The pod serves every tenant and its counters carry no tenant, so they
/// cannot be narrowed to the caller's. A tenant's people get the pod's
/// health (requests, errors, latency and their course: how the service
/// they use is doing, naming no tenant, key or tool); the per-tool table,
/// which shows what the pod's tenants do, is for platform admins only.
/// The tenant's own calls are in `GET /usage` and `GET /search-analytics`.
pub(crate) async fn metrics(State(app): State<App>, scope: InTenant) -> Reply {
    let now = snapshot();
    let series: Vec<Value> = app
        .admin_history
        .points
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|p| json!({ "at": p.at, "requests": p.requests, "errors": p.errors, "p95Ms": p.p95_ms }))
        .collect();
    json(metrics_view(
        &now,
        series,
        scope.actor.standing == Standing::Platform,
    ))
}

fn metrics_view(now: &Snapshot, series: Vec<Value>, per_tool: bool) -> Value {
    let mut view = json!({
        "scope": "this gateway pod, all tenants, since it started",
        "requests": now.requests.count,
        "errors": now.errors,
        "latency": {
            "p50Ms": now.requests.quantile_ms(0.5),
            "p95Ms": now.requests.quantile_ms(0.95),
            "p99Ms": now.requests.quantile_ms(0.99),
        },
        "series": series,
    });
    if per_tool {
        view["tools"] = now
            .tools
            .iter()
            .map(|(tool, (summed, errors))| {
                json!({
                    "tool": tool,
                    "calls": summed.count,
                    "errors": errors,
                    "p50Ms": summed.quantile_ms(0.5),
                    "p95Ms": summed.quantile_ms(0.95),
                })
            })
            .collect();
    }
    view
}

#[cfg(test)]
mod tests {
    use super::{Snapshot, Summed, metrics_view};

    #[test]
    fn quantiles_come_from_bucket_bounds() {
        let summed = Summed {
            count: 100,
            buckets: vec![(0.001, 10), (0.01, 90), (0.1, 99), (1.0, 100)],
        };
        assert_eq!(summed.quantile_ms(0.5), Some(10.0));
        assert_eq!(summed.quantile_ms(0.95), Some(100.0));
        assert_eq!(summed.quantile_ms(1.0), Some(1000.0));
        assert_eq!(Summed::default().quantile_ms(0.5), None);
        let earlier = Summed {
            count: 90,
            buckets: vec![(0.001, 10), (0.01, 90), (0.1, 90), (1.0, 90)],
        };
        // The last ten observations all took 10–100 ms.
        assert_eq!(summed.minus(&earlier).quantile_ms(0.5), Some(100.0));
    }

    #[test]
    fn per_tool_figures_are_only_in_the_platform_view() {
        let mut snapshot = Snapshot::default();
        snapshot
            .tools
            .insert("recall".to_owned(), (Summed::default(), 2));
        let platform = metrics_view(&snapshot, Vec::new(), true);
        assert_eq!(platform["tools"][0]["tool"], "recall");
        assert_eq!(platform["tools"][0]["errors"], 2);
        let tenant = metrics_view(&snapshot, Vec::new(), false);
        assert!(tenant.get("tools").is_none(), "{tenant}");
        assert!(!tenant.to_string().contains("recall"), "{tenant}");
        assert!(tenant["latency"].is_object() && tenant["series"].is_array());
    }
}
