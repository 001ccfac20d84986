//! `case_events`, `case_event_edges` and `fragment_evidence`: what happened
//! while working on one problem ("case"), as a DAG of typed events linked to
//! the fragments that document them.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, TenantTx};

#[derive(Debug, Clone, PartialEq)]
pub struct CaseEvent {
    pub id: Uuid,
    pub case_id: String,
    pub session_id: Option<String>,
    pub event_type: String,
    pub summary: String,
    pub entity_keys: Vec<String>,
    pub source_fragment_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<&Row> for CaseEvent {
    fn from(row: &Row) -> Self {
        Self {
            id: row.get("id"),
            case_id: row.get("case_id"),
            session_id: row.get("session_id"),
            event_type: row.get("event_type"),
            summary: row.get("summary"),
            entity_keys: row.get("entity_keys"),
            source_fragment_id: row.get("source_fragment_id"),
            created_at: row.get("created_at"),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CaseEdge {
    pub from_event: Uuid,
    pub to_event: Uuid,
    pub edge_type: String,
    pub confidence: f32,
}

/// A new event of a case.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub key_id: Uuid,
    pub case_id: &'a str,
    pub session_id: Option<&'a str>,
    pub event_type: &'a str,
    pub summary: &'a str,
    pub entity_keys: &'a [String],
    pub source_fragment_id: Option<Uuid>,
}

/// Appends an event to its case; see [`append_many`].
pub async fn append(tx: &TenantTx<'_>, event: &NewEvent<'_>) -> Result<Uuid> {
    let ids = append_many(tx, std::slice::from_ref(event)).await?;
    Ok(ids[0])
}

/// Appends events in order, each linked `preceded_by` to the previous event
/// of its case (the one before it in `events`, else the case's latest
/// stored event) so a case's history reads as a chain, and recorded as
/// produced by its source fragment. Returns the events' ids.
///
/// One statement however many events: a case-opening write is on the
/// acknowledged path, and a batch of writes opening cases paid four round
/// trips per event, then one per event. The foreign keys of the edges and
/// the evidence are checked at the end of the statement, when the events
/// they name exist.
pub async fn append_many(tx: &TenantTx<'_>, events: &[NewEvent<'_>]) -> Result<Vec<Uuid>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = events.iter().map(|_| Uuid::now_v7()).collect();
    let key_ids: Vec<Uuid> = events.iter().map(|e| e.key_id).collect();
    let case_ids: Vec<&str> = events.iter().map(|e| e.case_id).collect();
    let session_ids: Vec<Option<&str>> = events.iter().map(|e| e.session_id).collect();
    let event_types: Vec<&str> = events.iter().map(|e| e.event_type).collect();
    let summaries: Vec<&str> = events.iter().map(|e| e.summary).collect();
    // Arrays of arrays must be rectangular in PostgreSQL; each event's
    // keys travel as one JSON array.
    let entity_keys: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::Value::from(e.entity_keys.to_vec()))
        .collect();
    let sources: Vec<Option<Uuid>> = events.iter().map(|e| e.source_fragment_id).collect();
    // Every event and its evidence reference a fragment: a foreign-key
    // check per row (`query_with_generic_plans` says why generic).
    tx.query_with_generic_plans(
        "WITH input AS (
              SELECT t.*, lag(t.id) OVER (PARTITION BY t.case_id ORDER BY t.ord) AS earlier
                FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                            $7::text[], $8::jsonb[], $9::uuid[]) WITH ORDINALITY
                     AS t(id, key_id, case_id, session_id, event_type, summary, entity_keys,
                          source_fragment_id, ord)),
          event AS (
              INSERT INTO mneme.case_events (tenant_id, id, key_id, case_id, session_id,
                                             event_type, summary, entity_keys, source_fragment_id)
              SELECT $1, id, key_id, case_id, session_id, event_type, summary,
                     ARRAY(SELECT jsonb_array_elements_text(entity_keys)), source_fragment_id
                FROM input ORDER BY ord),
          edge AS (
              INSERT INTO mneme.case_event_edges (tenant_id, from_event, to_event, edge_type)
              SELECT $1, i.id, COALESCE(i.earlier, stored.id), 'preceded_by'
                FROM input i
                LEFT JOIN LATERAL (
                     SELECT id FROM mneme.case_events
                      WHERE tenant_id = $1 AND case_id = i.case_id
                      ORDER BY created_at DESC, id DESC LIMIT 1) stored ON i.earlier IS NULL
               WHERE COALESCE(i.earlier, stored.id) IS NOT NULL
              ON CONFLICT DO NOTHING)
         INSERT INTO mneme.fragment_evidence (tenant_id, fragment_id, event_id, kind)
         SELECT $1, source_fragment_id, id, 'produced_by' FROM input
          WHERE source_fragment_id IS NOT NULL
         ON CONFLICT DO NOTHING",
        &[
            &tx.tenant_id(),
            &ids,
            &key_ids,
            &case_ids,
            &session_ids,
            &event_types,
            &summaries,
            &entity_keys,
            &sources,
        ],
    )
    .await?;
    Ok(ids)
}

/// CaseRewardBackprop: moves the importance of the live fragments of
/// `owner` that are evidence of the case's events (written by
/// `reader_keys`) by `delta`, clamped to 0–1, in one statement (no
/// read-modify-write race). `verifier` — the fragment whose verification
/// triggered this — is left alone. Returns how many fragments moved.
pub async fn reward_evidence(
    tx: &TenantTx<'_>,
    owner: Uuid,
    reader_keys: &[Uuid],
    case_id: &str,
    verifier: Uuid,
    delta: f32,
) -> Result<u64> {
    let moved = tx
        .execute(
            "UPDATE mneme.fragments f
                SET importance = LEAST(1.0, GREATEST(0.0, f.importance + $6))
               FROM (SELECT DISTINCT e.fragment_id
                       FROM mneme.fragment_evidence e
                       JOIN mneme.case_events c ON c.tenant_id = e.tenant_id AND c.id = e.event_id
                      WHERE c.tenant_id = $1 AND c.case_id = $3 AND c.key_id = ANY($4)) evidence
              WHERE f.tenant_id = $1 AND f.id = evidence.fragment_id AND f.key_id = $2
                AND f.id <> $5 AND f.valid_to IS NULL",
            &[
                &tx.tenant_id(),
                &owner,
                &case_id,
                &reader_keys,
                &verifier,
                &delta,
            ],
        )
        .await?;
    Ok(moved)
}

const EVENT_COLUMNS: &str =
    "id, case_id, session_id, event_type, summary, entity_keys, source_fragment_id, created_at";

/// Events of a case or of a session, oldest first, written by `key_ids`.
pub async fn events(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    case_id: Option<&str>,
    session_id: Option<&str>,
    limit: i64,
) -> Result<Vec<CaseEvent>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM mneme.case_events
                  WHERE tenant_id = $1 AND key_id = ANY($2)
                    AND ($3::text IS NULL OR case_id = $3)
                    AND ($4::text IS NULL OR session_id = $4)
                  ORDER BY created_at, id LIMIT $5"
            ),
            &[&tx.tenant_id(), &key_ids, &case_id, &session_id, &limit],
        )
        .await?;
    Ok(rows.iter().map(CaseEvent::from).collect())
}

/// Edges among `event_ids`.
pub async fn edges(tx: &TenantTx<'_>, event_ids: &[Uuid]) -> Result<Vec<CaseEdge>> {
    let rows = tx
        .query(
            "SELECT from_event, to_event, edge_type, confidence FROM mneme.case_event_edges
              WHERE tenant_id = $1 AND from_event = ANY($2) AND to_event = ANY($2)",
            &[&tx.tenant_id(), &event_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CaseEdge {
            from_event: row.get(0),
            to_event: row.get(1),
            edge_type: row.get(2),
            confidence: row.get(3),
        })
        .collect())
}

/// The case of each (session, topic) pair that has one: the case of the
/// latest fragment of the key, session and topic that carries one. One
/// statement for all pairs.
pub async fn cases_of_session_topics(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    pairs: &[(&str, &str)],
) -> Result<HashMap<(String, String), String>> {
    if pairs.is_empty() {
        return Ok(HashMap::new());
    }
    let (sessions, topics): (Vec<&str>, Vec<&str>) = pairs.iter().copied().unzip();
    let rows = tx
        .query(
            "SELECT p.session_id, p.topic, latest.case_id
               FROM unnest($3::text[], $4::text[]) AS p(session_id, topic)
               CROSS JOIN LATERAL (
                    SELECT case_id FROM mneme.fragments
                     WHERE tenant_id = $1 AND key_id = $2 AND session_id = p.session_id
                       AND topic = p.topic AND case_id IS NOT NULL
                     ORDER BY created_at DESC LIMIT 1) latest",
            &[&tx.tenant_id(), &key_id, &sessions, &topics],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| ((row.get(0), row.get(1)), row.get(2)))
        .collect())
}

/// Puts each session's earlier errors on a topic that have no case into
/// the case given for that (session, topic); returns the pairs where any
/// error moved. One statement for all pairs.
pub async fn adopt_session_errors(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    adoptions: &[(&str, &str, &str)],
) -> Result<HashSet<(String, String)>> {
    if adoptions.is_empty() {
        return Ok(HashSet::new());
    }
    let sessions: Vec<&str> = adoptions.iter().map(|a| a.0).collect();
    let topics: Vec<&str> = adoptions.iter().map(|a| a.1).collect();
    let case_ids: Vec<&str> = adoptions.iter().map(|a| a.2).collect();
    let rows = tx
        .query(
            "UPDATE mneme.fragments f SET case_id = p.case_id
               FROM unnest($3::text[], $4::text[], $5::text[]) AS p(session_id, topic, case_id)
              WHERE f.tenant_id = $1 AND f.key_id = $2 AND f.session_id = p.session_id
                AND f.topic = p.topic AND f.type = 'error' AND f.case_id IS NULL
                AND f.valid_to IS NULL
             RETURNING p.session_id, p.topic",
            &[&tx.tenant_id(), &key_id, &sessions, &topics, &case_ids],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Case ids the given fragments carry, with their metadata, for case mode.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseSummary {
    pub case_id: String,
    pub goal: Option<String>,
    pub outcome: Option<String>,
    pub resolution_status: Option<String>,
    pub fragment_count: i64,
}

pub async fn summaries(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    case_ids: &[String],
) -> Result<Vec<CaseSummary>> {
    let rows = tx
        .query(
            "SELECT case_id,
                    (array_agg(goal ORDER BY created_at DESC) FILTER (WHERE goal IS NOT NULL))[1],
                    (array_agg(outcome ORDER BY created_at DESC) FILTER (WHERE outcome IS NOT NULL))[1],
                    (array_agg(resolution_status ORDER BY created_at DESC)
                        FILTER (WHERE resolution_status IS NOT NULL))[1],
                    count(*)
               FROM mneme.fragments
              WHERE tenant_id = $1 AND key_id = ANY($2) AND case_id = ANY($3) AND valid_to IS NULL
              GROUP BY case_id",
            &[&tx.tenant_id(), &key_ids, &case_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| CaseSummary {
            case_id: row.get(0),
            goal: row.get(1),
            outcome: row.get(2),
            resolution_status: row.get(3),
            fragment_count: row.get(4),
        })
        .collect())
}
