//! The `fragments` table: writes, the search layers of recall, forgetting,
//! and the embedding queue.
//!
//! Every function takes a [`TenantTx`] and names its tenant in the query;
//! reads are further limited to the keys the caller may read.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use mneme_core::fragment::PreparedFragment;
use mneme_core::text::{FieldWeights, SEARCH_DOCUMENT_VERSION};
use pgvector::Vector;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, StoreError, TenantTx};

/// How a write ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// A new fragment was stored.
    Created,
    /// The same content already existed for this key; its importance was
    /// raised to the larger of the two and its id is returned.
    Duplicate,
    /// The idempotency key was used before for the same content; the
    /// original fragment is returned unchanged.
    Replayed,
    /// The idempotency key was used before for other content, which the
    /// fragment never held (an amended fragment still replays its earlier
    /// contents): nothing was written, and `id` is that fragment's.
    KeyTaken,
}

/// The stored state after a write.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub id: Uuid,
    pub outcome: WriteOutcome,
    pub importance: f32,
    pub ttl_tier: String,
    pub keywords: Vec<String>,
}

fn written(row: &Row, outcome: WriteOutcome) -> Written {
    Written {
        id: row.get("id"),
        outcome,
        importance: row.get("importance"),
        ttl_tier: row.get("ttl_tier"),
        keywords: row.get("keywords"),
    }
}

/// Who writes a fragment, besides the tenant of the transaction.
#[derive(Debug, Clone, Copy)]
pub struct Author<'a> {
    pub key_id: Uuid,
    pub agent_id: &'a str,
    pub session_id: Option<&'a str>,
}

/// Inserts a prepared fragment, deduplicating by idempotency key and by
/// content hash within the author's key.
pub async fn insert(
    tx: &TenantTx<'_>,
    author: Author<'_>,
    fragment: &PreparedFragment,
) -> Result<Written> {
    let inserted = tx
        .query_opt(
            "INSERT INTO mneme.fragments
                 (tenant_id, id, key_id, agent_id, session_id, workspace, content, content_hash,
                  topic, keywords, type, importance, ttl_tier, is_anchor, source, idempotency_key,
                  context_summary, estimated_tokens, search_tsv, case_id, goal, outcome, phase,
                  resolution_status, assertion_status, affect, occurred_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
                     $18, $19::text::tsvector, $20, $21, $22, $23, $24, $25, $26, $27)
             ON CONFLICT DO NOTHING
             RETURNING id, importance, ttl_tier, keywords",
            &[
                &tx.tenant_id(),
                &Uuid::now_v7(),
                &author.key_id,
                &author.agent_id,
                &author.session_id,
                &fragment.workspace,
                &fragment.content,
                &fragment.content_hash,
                &fragment.topic,
                &fragment.keywords,
                &fragment.fragment_type.as_str(),
                &fragment.importance,
                &fragment.ttl_tier.as_str(),
                &fragment.is_anchor,
                &fragment.source,
                &fragment.idempotency_key,
                &fragment.context_summary,
                &(fragment.estimated_tokens as i32),
                &fragment.search_lexemes,
                &fragment.case.case_id,
                &fragment.case.goal,
                &fragment.case.outcome,
                &fragment.case.phase,
                &fragment.case.resolution_status.map(|s| s.as_str()),
                &fragment.assertion_status.as_str(),
                &fragment.affect.as_str(),
                &fragment.occurred_at,
            ],
        )
        .await?;
    if let Some(row) = inserted {
        return Ok(written(&row, WriteOutcome::Created));
    }

    // A unique constraint fired: the idempotency key wins over the hash, so a
    // retried request returns exactly what the first attempt stored, and a
    // key reused for another memory is told apart from a retry.
    if let Some(key) = &fragment.idempotency_key {
        let replay = tx
            .query_opt(
                "SELECT id, importance, ttl_tier, keywords,
                        content_hash = $4 OR EXISTS (
                            SELECT 1 FROM mneme.fragment_versions v
                             WHERE v.tenant_id = f.tenant_id AND v.fragment_id = f.id
                               AND v.content = $5) AS same_content
                   FROM mneme.fragments f
                  WHERE tenant_id = $1 AND key_id = $2 AND idempotency_key = $3",
                &[
                    &tx.tenant_id(),
                    &author.key_id,
                    key,
                    &fragment.content_hash,
                    &fragment.content,
                ],
            )
            .await?;
        if let Some(row) = replay {
            let outcome = if row.get("same_content") {
                WriteOutcome::Replayed
            } else {
                WriteOutcome::KeyTaken
            };
            return Ok(written(&row, outcome));
        }
    }
    let duplicate = tx
        .query_opt(
            "UPDATE mneme.fragments
                SET importance = GREATEST(importance, $4), is_anchor = is_anchor OR $5
              WHERE tenant_id = $1 AND key_id = $2 AND content_hash = $3
             RETURNING id, importance, ttl_tier, keywords",
            &[
                &tx.tenant_id(),
                &author.key_id,
                &fragment.content_hash,
                &fragment.importance,
                &fragment.is_anchor,
            ],
        )
        .await?;
    duplicate
        .map(|row| written(&row, WriteOutcome::Duplicate))
        // The conflicting row was deleted between the two statements.
        .ok_or_else(|| StoreError::Invalid("fragment changed concurrently; retry".into()))
}

/// Inserts many prepared fragments with one `INSERT … SELECT FROM unnest`,
/// in order. Returns, per row, what was created, or `None` where a unique
/// constraint fired (an idempotency key or content seen before, in the
/// table or earlier in `rows`): the caller settles repeated contents with
/// [`settle_duplicates`] and idempotency-key replays with [`insert`].
///
/// Used by `batch_remember`: a round trip per fragment dominated its time.
/// The rows travel as one array per column rather than through a `COPY`
/// into a temporary table: creating and dropping that table for every
/// insert wrote and deleted some forty catalog rows each time, which
/// bloats the catalogs between vacuums and makes every backend reload its
/// caches.
pub async fn insert_many(
    tx: &TenantTx<'_>,
    rows: &[(Author<'_>, &PreparedFragment)],
) -> Result<Vec<Option<Written>>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    fn column<'r, T>(
        rows: &'r [(Author<'_>, &PreparedFragment)],
        value: impl Fn(&'r Author<'_>, &'r PreparedFragment) -> T,
    ) -> Vec<T> {
        rows.iter()
            .map(|(author, fragment)| value(author, fragment))
            .collect()
    }
    let ids: Vec<Uuid> = rows.iter().map(|_| Uuid::now_v7()).collect();
    let key_ids = column(rows, |a, _| a.key_id);
    let agent_ids = column(rows, |a, _| a.agent_id);
    let session_ids = column(rows, |a, _| a.session_id);
    let workspaces = column(rows, |_, f| f.workspace.as_deref());
    let contents = column(rows, |_, f| f.content.as_str());
    let hashes = column(rows, |_, f| f.content_hash.as_str());
    let topics = column(rows, |_, f| f.topic.as_str());
    // Arrays of arrays must be rectangular in PostgreSQL; each row's
    // keywords travel as one JSON array.
    let keywords = column(rows, |_, f| serde_json::Value::from(f.keywords.clone()));
    let types = column(rows, |_, f| f.fragment_type.as_str());
    let importances = column(rows, |_, f| f.importance);
    let tiers = column(rows, |_, f| f.ttl_tier.as_str());
    let anchors = column(rows, |_, f| f.is_anchor);
    let sources = column(rows, |_, f| f.source.as_deref());
    let idempotency_keys = column(rows, |_, f| f.idempotency_key.as_deref());
    let summaries = column(rows, |_, f| f.context_summary.as_deref());
    let tokens = column(rows, |_, f| f.estimated_tokens as i32);
    let lexemes = column(rows, |_, f| f.search_lexemes.as_str());
    let case_ids = column(rows, |_, f| f.case.case_id.as_deref());
    let goals = column(rows, |_, f| f.case.goal.as_deref());
    let outcomes = column(rows, |_, f| f.case.outcome.as_deref());
    let phases = column(rows, |_, f| f.case.phase.as_deref());
    let statuses = column(rows, |_, f| f.case.resolution_status.map(|s| s.as_str()));
    let assertions = column(rows, |_, f| f.assertion_status.as_str());
    let affects = column(rows, |_, f| f.affect.as_str());
    let occurred = column(rows, |_, f| f.occurred_at);

    let inserted = tx
        .query(
            "INSERT INTO mneme.fragments
                 (tenant_id, id, key_id, agent_id, session_id, workspace, content, content_hash,
                  topic, keywords, type, importance, ttl_tier, is_anchor, source, idempotency_key,
                  context_summary, estimated_tokens, search_tsv, case_id, goal, outcome, phase,
                  resolution_status, assertion_status, affect, occurred_at)
             SELECT $1, id, key_id, agent_id, session_id, workspace, content, content_hash,
                    topic, ARRAY(SELECT jsonb_array_elements_text(keywords)), type, importance,
                    ttl_tier, is_anchor, source, idempotency_key, context_summary,
                    estimated_tokens, search_tsv::tsvector, case_id, goal, outcome, phase,
                    resolution_status, assertion_status, affect, occurred_at
               FROM unnest($2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[],
                           $7::text[], $8::text[], $9::text[], $10::jsonb[], $11::text[],
                           $12::real[], $13::text[], $14::bool[], $15::text[], $16::text[],
                           $17::text[], $18::int4[], $19::text[], $20::text[], $21::text[],
                           $22::text[], $23::text[], $24::text[], $25::text[], $26::text[],
                           $27::timestamptz[]) WITH ORDINALITY
                    AS t(id, key_id, agent_id, session_id, workspace, content, content_hash,
                         topic, keywords, type, importance, ttl_tier, is_anchor, source,
                         idempotency_key, context_summary, estimated_tokens, search_tsv,
                         case_id, goal, outcome, phase, resolution_status, assertion_status,
                         affect, occurred_at, ord)
              ORDER BY ord
             ON CONFLICT DO NOTHING
             RETURNING id, importance, ttl_tier, keywords",
            &[
                &tx.tenant_id(),
                &ids,
                &key_ids,
                &agent_ids,
                &session_ids,
                &workspaces,
                &contents,
                &hashes,
                &topics,
                &keywords,
                &types,
                &importances,
                &tiers,
                &anchors,
                &sources,
                &idempotency_keys,
                &summaries,
                &tokens,
                &lexemes,
                &case_ids,
                &goals,
                &outcomes,
                &phases,
                &statuses,
                &assertions,
                &affects,
                &occurred,
            ],
        )
        .await?;
    let mut created: HashMap<Uuid, Written> = inserted
        .iter()
        .map(|row| {
            let written = written(row, WriteOutcome::Created);
            (written.id, written)
        })
        .collect();
    Ok(ids.iter().map(|id| created.remove(id)).collect())
}

/// [`insert`]'s answer for contents the key already holds, for many
/// fragments at once: each stored fragment's importance is raised to the
/// largest asked for (and it becomes an anchor if any asked), and it is
/// returned as a duplicate. `None` where the content is not stored. One
/// statement; fragments that would not change are read, not rewritten, so
/// an import run twice leaves no dead rows behind.
pub async fn settle_duplicates(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    fragments: &[&PreparedFragment],
) -> Result<Vec<Option<Written>>> {
    if fragments.is_empty() {
        return Ok(Vec::new());
    }
    let hashes: Vec<&str> = fragments.iter().map(|f| f.content_hash.as_str()).collect();
    let importances: Vec<f32> = fragments.iter().map(|f| f.importance).collect();
    let anchors: Vec<bool> = fragments.iter().map(|f| f.is_anchor).collect();
    let rows = tx
        .query(
            "WITH asked AS (
                  SELECT content_hash, max(importance) AS importance, bool_or(is_anchor) AS is_anchor
                    FROM unnest($3::text[], $4::real[], $5::bool[]) AS t(content_hash, importance, is_anchor)
                   GROUP BY content_hash),
              -- Locked in content-hash order, as batches insert, so two
              -- imports raising the same memories wait for each other
              -- instead of in a cycle.
              locked AS (
                  SELECT f.id, a.importance, a.is_anchor
                    FROM mneme.fragments f JOIN asked a ON a.content_hash = f.content_hash
                   WHERE f.tenant_id = $1 AND f.key_id = $2
                     AND (f.importance < a.importance OR (a.is_anchor AND NOT f.is_anchor))
                   ORDER BY f.content_hash
                     FOR NO KEY UPDATE OF f),
              raised AS (
                  UPDATE mneme.fragments f
                     SET importance = GREATEST(f.importance, l.importance),
                         is_anchor = f.is_anchor OR l.is_anchor
                    FROM locked l
                   WHERE f.tenant_id = $1 AND f.id = l.id
                  RETURNING f.content_hash, f.id, f.importance, f.ttl_tier, f.keywords)
             SELECT content_hash, id, importance, ttl_tier, keywords FROM raised
             UNION ALL
             SELECT f.content_hash, f.id, f.importance, f.ttl_tier, f.keywords
               FROM mneme.fragments f JOIN asked a ON a.content_hash = f.content_hash
              WHERE f.tenant_id = $1 AND f.key_id = $2
                AND NOT (f.importance < a.importance OR (a.is_anchor AND NOT f.is_anchor))",
            &[&tx.tenant_id(), &key_id, &hashes, &importances, &anchors],
        )
        .await?;
    let stored: HashMap<String, Written> = rows
        .iter()
        .map(|row| {
            (
                row.get("content_hash"),
                written(row, WriteOutcome::Duplicate),
            )
        })
        .collect();
    Ok(hashes
        .iter()
        .map(|hash| stored.get(*hash).cloned())
        .collect())
}

/// Which fragments `forget` targets.
#[derive(Debug, Clone, Copy)]
pub enum ForgetTarget<'a> {
    Id(Uuid),
    /// The oldest fragments of a topic, at most `limit`.
    Topic {
        topic: &'a str,
        limit: i64,
    },
}

/// What `forget` did (or, on a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Forgotten {
    pub deleted: Vec<Uuid>,
    /// Permanent or anchored fragments kept because `force` was not set.
    pub protected: u32,
    /// Whether anything matched the target at all.
    pub matched: bool,
    /// The fragment named by id is readable but belongs to another key of
    /// the caller's key groups, so it was left alone.
    pub held_by_group_peer: bool,
}

/// Deletes fragments of `key_id` (its agent or the shared `default` agent).
/// Key groups share reading, not writing: an id of a group peer's fragment
/// (readable with `readable_keys`) is reported in `held_by_group_peer` and
/// kept, and a topic covers only the caller's own fragments. Links,
/// versions and evidence go with the deleted ones (cascade).
pub async fn forget(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    readable_keys: &[Uuid],
    agent_id: &str,
    target: ForgetTarget<'_>,
    force: bool,
    dry_run: bool,
) -> Result<Forgotten> {
    let (id, topic, limit) = match target {
        ForgetTarget::Id(id) => (Some(id), None, 1),
        ForgetTarget::Topic { topic, limit } => (None, Some(topic), limit),
    };
    let rows = tx
        .query(
            "WITH targets AS (
                 SELECT id, key_id = $9 AS own, (ttl_tier = 'permanent' OR is_anchor) AS protected
                   FROM mneme.fragments
                  WHERE tenant_id = $1 AND key_id = ANY($2) AND agent_id IN ($3, 'default')
                    AND ($4::uuid IS NULL OR id = $4)
                    AND ($5::text IS NULL OR (topic = $5 AND key_id = $9))
                  ORDER BY created_at
                  LIMIT $6
                    FOR UPDATE),
             deleted AS (
                 DELETE FROM mneme.fragments f USING targets t
                  WHERE NOT $8 AND f.tenant_id = $1 AND f.id = t.id AND t.own
                    AND (NOT t.protected OR $7)
                 RETURNING f.id)
             SELECT id, protected, own FROM targets",
            &[
                &tx.tenant_id(),
                &readable_keys,
                &agent_id,
                &id,
                &topic,
                &limit,
                &force,
                &dry_run,
                &key_id,
            ],
        )
        .await?;
    let mut forgotten = Forgotten {
        matched: !rows.is_empty(),
        ..Forgotten::default()
    };
    for row in rows {
        let protected: bool = row.get(1);
        let own: bool = row.get(2);
        if !own {
            forgotten.held_by_group_peer = true;
        } else if protected && !force {
            forgotten.protected += 1;
        } else {
            forgotten.deleted.push(row.get(0));
        }
    }
    Ok(forgotten)
}

/// Which fragments a search may return. Every layer of recall applies the
/// same scope, so no layer can surface a fragment another would filter out.
#[derive(Debug, Clone, Default)]
pub struct SearchScope<'a> {
    /// Keys whose fragments are readable (own key and key groups).
    pub key_ids: &'a [Uuid],
    /// The caller's agent; fragments of agent `default` are shared by all.
    pub agent_id: &'a str,
    /// When set: fragments of this workspace and global ones (NULL).
    pub workspace: Option<&'a str>,
    pub topic: Option<&'a str>,
    /// Any of these types.
    pub types: Option<&'a [String]>,
    /// Validity: only fragments valid at this instant (and created by then).
    pub as_of: Option<DateTime<Utc>>,
    /// Also fragments no longer valid (superseded), when `as_of` is unset.
    pub include_superseded: bool,
    /// Event time (`occurred_at`, else `created_at`) window.
    pub time_from: Option<DateTime<Utc>>,
    pub time_to: Option<DateTime<Utc>>,
    pub case_id: Option<&'a str>,
    pub phase: Option<&'a str>,
    pub resolution_status: Option<&'a str>,
    pub min_importance: Option<f32>,
    pub is_anchor: Option<bool>,
    /// Any of these affects.
    pub affects: Option<&'a [String]>,
    /// Ignore fragments created after this instant (stable pagination).
    pub created_before: Option<DateTime<Utc>>,
    /// Never return these (already shown to the session).
    pub exclude: &'a [Uuid],
}

/// The predicate shared by all search layers, on `mneme.fragments f`;
/// parameters $1–$18.
const SCOPE: &str = "f.tenant_id = $1 AND f.key_id = ANY($2) AND f.agent_id IN ($3, 'default')
    AND ($4::text IS NULL OR f.workspace = $4 OR f.workspace IS NULL)
    AND ($5::text IS NULL OR f.topic = $5)
    AND ($6::text[] IS NULL OR f.type = ANY($6))
    AND (CASE WHEN $7::timestamptz IS NOT NULL
              THEN f.valid_from <= $7 AND (f.valid_to IS NULL OR f.valid_to > $7) AND f.created_at <= $7
              WHEN $8::bool THEN true
              ELSE f.valid_to IS NULL END)
    AND ($9::timestamptz IS NULL OR COALESCE(f.occurred_at, f.created_at) >= $9)
    AND ($10::timestamptz IS NULL OR COALESCE(f.occurred_at, f.created_at) < $10)
    AND ($11::text IS NULL OR f.case_id = $11)
    AND ($12::text IS NULL OR f.phase = $12)
    AND ($13::text IS NULL OR f.resolution_status = $13)
    AND ($14::real IS NULL OR f.importance >= $14)
    AND ($15::bool IS NULL OR f.is_anchor = $15)
    AND ($16::text[] IS NULL OR f.affect = ANY($16))
    AND ($17::timestamptz IS NULL OR f.created_at <= $17)
    AND NOT (f.id = ANY($18))";

type Param<'a> = &'a (dyn tokio_postgres::types::ToSql + Sync);

impl SearchScope<'_> {
    /// The parameters of [`SCOPE`], followed by `extra` ($19 onwards).
    fn params<'a>(&'a self, tenant_id: &'a Uuid, extra: &[Param<'a>]) -> Vec<Param<'a>> {
        let mut params: Vec<Param<'a>> = vec![
            tenant_id,
            &self.key_ids,
            &self.agent_id,
            &self.workspace,
            &self.topic,
            &self.types,
            &self.as_of,
            &self.include_superseded,
            &self.time_from,
            &self.time_to,
            &self.case_id,
            &self.phase,
            &self.resolution_status,
            &self.min_importance,
            &self.is_anchor,
            &self.affects,
            &self.created_before,
            &self.exclude,
        ];
        params.extend_from_slice(extra);
        params
    }
}

/// A search hit: id and the layer's own score (higher is better).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub id: Uuid,
    pub score: f32,
}

fn hits(rows: Vec<Row>) -> Vec<Hit> {
    rows.iter()
        .map(|row| Hit {
            id: row.get(0),
            score: row.get(1),
        })
        .collect()
}

/// Nearest neighbours by cosine similarity among fragments embedded with
/// `model` (vectors of different models are not comparable).
///
/// Iterative index scans keep reading the HNSW graph until `limit` rows pass
/// the tenant, key and scope filters, so small tenants in a shared partition
/// still get full results; `relaxed_order` trades exact ordering inside the
/// scan for speed and the caller re-sorts by score. The graph orders by the
/// half-precision vectors it holds (migrations/V28); the similarity
/// returned is the full-precision one.
pub async fn vector_search(
    tx: &TenantTx<'_>,
    scope: &SearchScope<'_>,
    embedding: &Vector,
    model: &str,
    ef_search: usize,
    limit: i64,
) -> Result<Vec<Hit>> {
    tx.execute(
        "SELECT set_config('hnsw.ef_search', $1, true),
                set_config('hnsw.iterative_scan', 'relaxed_order', true)",
        &[&ef_search.to_string()],
    )
    .await?;
    let rows = tx
        .query(
            &format!(
                "SELECT id, (1 - (embedding <=> $19))::real AS similarity
                   FROM mneme.fragments f
                  WHERE {SCOPE} AND embedding IS NOT NULL AND embedding_model = $20
                  ORDER BY embedding::halfvec(384) <=> $19::vector(384)::halfvec(384)
                  LIMIT $21"
            ),
            &scope.params(&tx.tenant_id(), &[embedding, &model, &limit]),
        )
        .await?;
    let mut hits = hits(rows);
    // Ties broken by id: the order rows come back in changes as rows are
    // rewritten, and equal scores must not reorder pages between calls.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    Ok(hits)
}

/// The stored embeddings of `ids` that were computed by `model`, readable
/// by `key_ids` (for query expansion from the best vector hits).
pub async fn embeddings(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    ids: &[Uuid],
    model: &str,
) -> Result<Vec<Vector>> {
    let rows = tx
        .query(
            "SELECT embedding FROM mneme.fragments
              WHERE tenant_id = $1 AND id = ANY($2) AND key_id = ANY($3)
                AND embedding IS NOT NULL AND embedding_model = $4",
            &[&tx.tenant_id(), &ids, &key_ids, &model],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// Cosine similarity of `embedding` to each of `ids` that has an embedding
/// of `model` and is readable by `key_ids`.
pub async fn similarities(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    ids: &[Uuid],
    embedding: &Vector,
    model: &str,
) -> Result<HashMap<Uuid, f32>> {
    let rows = tx
        .query(
            "SELECT id, (1 - (embedding <=> $5))::real FROM mneme.fragments
              WHERE tenant_id = $1 AND id = ANY($2) AND key_id = ANY($3)
                AND embedding IS NOT NULL AND embedding_model = $4",
            &[&tx.tenant_id(), &ids, &key_ids, &model, embedding],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

/// Relations the graph layer follows: the ones that say two memories are
/// about the same thing. `temporal` (written around the same time) and
/// `co_retrieved` (returned together) say nothing about relevance; following
/// them pulled unrelated neighbours into the results (see
/// docs/BENCHMARKS.md).
const GRAPH_RELATIONS: &str = "'caused_by', 'resolved_by', 'related', 'part_of'";

/// Fragments one link away from `seeds` that are themselves in scope, each
/// scored by its activation: the largest, over the seeds it is linked to, of
/// the seed's relevance (in `seed_relevance`, in the order of `seeds`) times
/// the link's strength (its weight times how telling the relation is,
/// capped at 1). Ties are broken by how many seeds a fragment touches, then
/// by id (so a ranking is reproducible). Quarantined and deleted links do
/// not count, nor links made after the scope's `created_before` snapshot
/// (later pages of a cursor see the graph as the first page did).
pub async fn graph_neighbors(
    tx: &TenantTx<'_>,
    scope: &SearchScope<'_>,
    seeds: &[Uuid],
    seed_relevance: &[f32],
    limit: i64,
) -> Result<Vec<Hit>> {
    let rows = tx
        .query(
            &format!(
                // Links first (materialised), then their other ends by
                // primary key; see `links::around` for why.
                "WITH edges AS MATERIALIZED (
                     SELECT l.from_id AS seed, l.to_id AS id, l.relation_type, l.weight
                       FROM mneme.fragment_links l
                      WHERE l.tenant_id = $1 AND l.from_id = ANY($19)
                        AND l.deleted_at IS NULL AND l.quarantine_state IS DISTINCT FROM 'soft'
                        AND l.relation_type IN ({GRAPH_RELATIONS})
                        AND ($17::timestamptz IS NULL OR l.created_at <= $17)
                     UNION ALL
                     SELECT l.to_id, l.from_id, l.relation_type, l.weight
                       FROM mneme.fragment_links l
                      WHERE l.tenant_id = $1 AND l.to_id = ANY($19)
                        AND l.deleted_at IS NULL AND l.quarantine_state IS DISTINCT FROM 'soft'
                        AND l.relation_type IN ({GRAPH_RELATIONS})
                        AND ($17::timestamptz IS NULL OR l.created_at <= $17)),
                 seeds AS (
                     SELECT * FROM unnest($19::uuid[], $21::real[]) AS s(id, relevance)),
                 scored AS (
                     SELECT e.id,
                            max(s.relevance * least(1.0, e.weight * CASE e.relation_type
                                WHEN 'caused_by' THEN 1.5 WHEN 'resolved_by' THEN 1.5
                                ELSE 1.0 END))::real AS score,
                            count(*) AS links
                       FROM edges e
                       JOIN seeds s ON s.id = e.seed
                      WHERE NOT (e.id = ANY($19))
                      GROUP BY e.id)
                 SELECT f.id, s.score
                   FROM scored s
                   JOIN mneme.fragments f ON f.tenant_id = $1 AND f.id = s.id
                  WHERE {SCOPE}
                  ORDER BY s.score DESC, s.links DESC, f.id
                  LIMIT $20"
            ),
            &scope.params(&tx.tenant_id(), &[&seeds, &limit, &seed_relevance]),
        )
        .await?;
    Ok(hits(rows))
}

/// The terms that rank full-text matches: `tsquery` literals, each with
/// the weight its `ts_rank` counts with.
#[derive(Debug, Clone, PartialEq)]
pub struct RankTerms {
    pub literals: Vec<String>,
    pub weights: Vec<f32>,
}

impl RankTerms {
    /// One literal ranking on its own (as `ts_rank` ranks it).
    pub fn whole(literal: &str) -> Self {
        Self {
            literals: vec![literal.to_owned()],
            weights: vec![1.0],
        }
    }
}

/// Full-text matches of the `filter` tsquery literal, ranked by how well
/// they match the `rank` terms: the weighted sum of each term's `ts_rank`
/// (normalised by document length, a match in each field counted by
/// `fields`). The filter leaves out terms so common that matching them
/// would read much of the tenant, and the weights count rarer terms more
/// (see `recall::term_stats`).
pub async fn fulltext_search(
    tx: &TenantTx<'_>,
    scope: &SearchScope<'_>,
    filter: &str,
    rank: &RankTerms,
    fields: FieldWeights,
    limit: i64,
) -> Result<Vec<Hit>> {
    let field_weights = fields.ts_rank_weights();
    let rows = tx
        .query(
            &format!(
                // One `ts_rank` per term: its weights have no place in a
                // single tsquery. The casts in FROM parse once per query.
                "SELECT id, (SELECT sum(ts_rank($22::real[], f.search_tsv, t.term, 1) * t.weight)
                               FROM unnest(terms, $23::real[]) AS t(term, weight)) AS rank
                   FROM mneme.fragments f, CAST($19::text AS tsquery) AS q,
                        CAST($21::text[] AS tsquery[]) AS terms
                  WHERE {SCOPE} AND search_tsv @@ q
                  ORDER BY rank DESC, importance DESC, created_at DESC, id
                  LIMIT $20"
            ),
            &scope.params(
                &tx.tenant_id(),
                &[
                    &filter,
                    &limit,
                    &rank.literals,
                    &field_weights,
                    &rank.weights,
                ],
            ),
        )
        .await?;
    Ok(hits(rows))
}

/// A fragment whose search document predates the current rules.
#[derive(Debug, Clone, PartialEq)]
pub struct StaleDocument {
    pub id: Uuid,
    pub topic: String,
    pub keywords: Vec<String>,
    pub content: String,
}

/// Up to `limit` of the tenant's fragments (any state: superseded and
/// expired ones are searchable too) whose search documents were written
/// before [`SEARCH_DOCUMENT_VERSION`], locked until the transaction ends.
pub async fn lock_stale_search_documents(
    tx: &TenantTx<'_>,
    limit: i64,
) -> Result<Vec<StaleDocument>> {
    // The version is spelled out, not a parameter, so that the planner can
    // match the partial index of stale documents.
    let rows = tx
        .query(
            &format!(
                "SELECT id, topic, keywords, content FROM mneme.fragments
                  WHERE tenant_id = $1 AND search_version < {SEARCH_DOCUMENT_VERSION}
                  LIMIT $2
                    FOR NO KEY UPDATE SKIP LOCKED"
            ),
            &[&tx.tenant_id(), &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| StaleDocument {
            id: row.get(0),
            topic: row.get(1),
            keywords: row.get(2),
            content: row.get(3),
        })
        .collect())
}

/// Replaces the search documents of `ids` with `documents` (`tsvector`
/// literals written by the current rules).
pub async fn store_search_documents(
    tx: &TenantTx<'_>,
    ids: &[Uuid],
    documents: &[String],
) -> Result<u64> {
    Ok(tx
        .execute(
            &format!(
                "UPDATE mneme.fragments f
                    SET search_tsv = d.document::tsvector,
                        search_version = {SEARCH_DOCUMENT_VERSION}
                   FROM unnest($2::uuid[], $3::text[]) AS d(id, document)
                  WHERE f.tenant_id = $1 AND f.id = d.id"
            ),
            &[&tx.tenant_id(), &ids, &documents],
        )
        .await?)
}

/// How often lexemes occur in the newest fragments of `key_ids`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermSample {
    /// Fragments stored under the keys (every row the index may return).
    pub total: i64,
    /// Fragments sampled (the newest, at most the requested size).
    pub sampled: i64,
    /// Sampled fragments containing each lexeme, for lexemes in at least
    /// two of them.
    pub counts: HashMap<String, i64>,
}

/// Samples the newest `size` fragments of `key_ids` for lexeme frequencies.
pub async fn term_sample(tx: &TenantTx<'_>, key_ids: &[Uuid], size: i64) -> Result<TermSample> {
    let total: i64 = tx
        .query_one(
            "SELECT count(*) FROM mneme.fragments WHERE tenant_id = $1 AND key_id = ANY($2)",
            &[&tx.tenant_id(), &key_ids],
        )
        .await?
        .get(0);
    // A tsvector holds each lexeme once, so a row per (fragment, lexeme)
    // counts documents, not occurrences.
    let rows = tx
        .query(
            "WITH sample AS MATERIALIZED (
                 SELECT search_tsv FROM mneme.fragments
                  WHERE tenant_id = $1 AND key_id = ANY($2)
                  ORDER BY created_at DESC
                  LIMIT $3)
             SELECT lexeme, count(*)
               FROM sample, unnest(tsvector_to_array(search_tsv)) AS lexeme
              GROUP BY lexeme
             HAVING count(*) >= 2",
            &[&tx.tenant_id(), &key_ids, &size],
        )
        .await?;
    Ok(TermSample {
        total,
        // The sample is the newest `size` rows (give or take a concurrent write).
        sampled: total.min(size),
        counts: rows.iter().map(|row| (row.get(0), row.get(1))).collect(),
    })
}

/// Fragments sharing keywords with `keywords`, most shared first.
pub async fn keyword_search(
    tx: &TenantTx<'_>,
    scope: &SearchScope<'_>,
    keywords: &[String],
    limit: i64,
) -> Result<Vec<Hit>> {
    let rows = tx
        .query(
            &format!(
                "SELECT id,
                        cardinality(ARRAY(SELECT unnest(keywords) INTERSECT
                                          SELECT unnest($19::text[])))::real AS overlap
                   FROM mneme.fragments f
                  -- The hashes find the tenant's candidates through their
                  -- index (migrations/V30); the keywords rule out a
                  -- collision.
                  WHERE {SCOPE} AND keyword_hashes && mneme.keyword_hashes($1, $19)
                    AND keywords && $19
                  ORDER BY overlap DESC, importance DESC, created_at DESC, id
                  LIMIT $20"
            ),
            &scope.params(&tx.tenant_id(), &[&keywords, &limit]),
        )
        .await?;
    Ok(hits(rows))
}

/// The most important recent fragments, for a recall without any query.
pub async fn recent(tx: &TenantTx<'_>, scope: &SearchScope<'_>, limit: i64) -> Result<Vec<Hit>> {
    let rows = tx
        .query(
            &format!(
                "SELECT id, importance FROM mneme.fragments f
                  WHERE {SCOPE}
                  ORDER BY importance DESC, created_at DESC, id
                  LIMIT $19"
            ),
            &scope.params(&tx.tenant_id(), &[&limit]),
        )
        .await?;
    Ok(hits(rows))
}

/// A fragment as returned to clients.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    pub id: Uuid,
    pub key_id: Uuid,
    pub agent_id: String,
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub content: String,
    pub topic: String,
    pub keywords: Vec<String>,
    pub fragment_type: String,
    pub importance: f32,
    pub ttl_tier: String,
    pub is_anchor: bool,
    pub source: Option<String>,
    pub context_summary: Option<String>,
    pub case_id: Option<String>,
    pub goal: Option<String>,
    pub outcome: Option<String>,
    pub phase: Option<String>,
    pub resolution_status: Option<String>,
    pub assertion_status: String,
    pub affect: String,
    pub access_count: i32,
    pub accessed_at: Option<DateTime<Utc>>,
    pub ema_activation: f32,
    pub estimated_tokens: i32,
    pub occurred_at: Option<DateTime<Utc>>,
    pub valid_to: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub embedded: bool,
}

impl From<Row> for Fragment {
    fn from(row: Row) -> Self {
        Self {
            id: row.get("id"),
            key_id: row.get("key_id"),
            agent_id: row.get("agent_id"),
            session_id: row.get("session_id"),
            workspace: row.get("workspace"),
            content: row.get("content"),
            topic: row.get("topic"),
            keywords: row.get("keywords"),
            fragment_type: row.get("type"),
            importance: row.get("importance"),
            ttl_tier: row.get("ttl_tier"),
            is_anchor: row.get("is_anchor"),
            source: row.get("source"),
            context_summary: row.get("context_summary"),
            case_id: row.get("case_id"),
            goal: row.get("goal"),
            outcome: row.get("outcome"),
            phase: row.get("phase"),
            resolution_status: row.get("resolution_status"),
            assertion_status: row.get("assertion_status"),
            affect: row.get("affect"),
            access_count: row.get("access_count"),
            accessed_at: row.get("accessed_at"),
            ema_activation: row.get("ema_activation"),
            estimated_tokens: row.get("estimated_tokens"),
            occurred_at: row.get("occurred_at"),
            valid_to: row.get("valid_to"),
            created_at: row.get("created_at"),
            embedded: row.get("embedded"),
        }
    }
}

/// The columns of [`Fragment`], on `mneme.fragments f`.
const FRAGMENT_COLUMNS: &str = "f.id, f.key_id, f.agent_id, f.session_id, f.workspace, f.content,
    f.topic, f.keywords, f.type, f.importance, f.ttl_tier, f.is_anchor, f.source, f.context_summary,
    f.case_id, f.goal, f.outcome, f.phase, f.resolution_status, f.assertion_status, f.affect,
    f.access_count, f.accessed_at, f.ema_activation, f.estimated_tokens, f.occurred_at, f.valid_to,
    f.created_at, f.embedding IS NOT NULL AS embedded";

/// Loads fragments by id, limited to the readable keys (order unspecified).
pub async fn fetch(tx: &TenantTx<'_>, key_ids: &[Uuid], ids: &[Uuid]) -> Result<Vec<Fragment>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {FRAGMENT_COLUMNS} FROM mneme.fragments f
                  WHERE f.tenant_id = $1 AND f.key_id = ANY($2) AND f.id = ANY($3)"
            ),
            &[&tx.tenant_id(), &key_ids, &ids],
        )
        .await?;
    Ok(rows.into_iter().map(Fragment::from).collect())
}

/// Filters of [`traces`] (all optional).
#[derive(Debug, Clone, Default)]
pub struct TraceFilter<'a> {
    pub fragment_type: Option<&'a str>,
    /// Case-insensitive substring of the topic.
    pub topic_contains: Option<&'a str>,
    /// Case-insensitive substring of the content.
    pub content_contains: Option<&'a str>,
    pub case_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
    /// The topic exactly, or a keyword the fragment carries.
    pub entity: Option<&'a str>,
    /// Full-text match.
    pub tsquery: Option<&'a str>,
    pub time_from: Option<DateTime<Utc>>,
    pub time_to: Option<DateTime<Utc>>,
    pub workspace: Option<&'a str>,
}

/// Escapes `%`, `_` and `\` for a LIKE pattern.
fn like_pattern(text: &str) -> String {
    let escaped = text
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

/// Readable fragments (valid or not) matching structured filters, in event
/// order (oldest first).
pub async fn traces(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    agent_id: &str,
    filter: &TraceFilter<'_>,
    limit: i64,
) -> Result<Vec<Fragment>> {
    let topic = filter.topic_contains.map(like_pattern);
    let content = filter.content_contains.map(like_pattern);
    let rows = tx
        .query(
            &format!(
                "SELECT {FRAGMENT_COLUMNS} FROM mneme.fragments f
                  WHERE f.tenant_id = $1 AND f.key_id = ANY($2) AND f.agent_id IN ($3, 'default')
                    AND ($4::text IS NULL OR f.type = $4)
                    AND ($5::text IS NULL OR f.topic ILIKE $5)
                    AND ($6::text IS NULL OR f.content ILIKE $6)
                    AND ($7::text IS NULL OR f.case_id = $7)
                    AND ($8::text IS NULL OR f.session_id = $8)
                    AND ($9::text IS NULL OR f.topic = $9 OR $9 = ANY(f.keywords))
                    AND ($10::text IS NULL OR f.search_tsv @@ CAST($10 AS tsquery))
                    AND ($11::timestamptz IS NULL OR COALESCE(f.occurred_at, f.created_at) >= $11)
                    AND ($12::timestamptz IS NULL OR COALESCE(f.occurred_at, f.created_at) < $12)
                    AND ($13::text IS NULL OR f.workspace = $13 OR f.workspace IS NULL)
                  ORDER BY COALESCE(f.occurred_at, f.created_at), f.id
                  LIMIT $14"
            ),
            &[
                &tx.tenant_id(),
                &key_ids,
                &agent_id,
                &filter.fragment_type,
                &topic,
                &content,
                &filter.case_id,
                &filter.session_id,
                &filter.entity,
                &filter.tsquery,
                &filter.time_from,
                &filter.time_to,
                &filter.workspace,
                &limit,
            ],
        )
        .await?;
    Ok(rows.into_iter().map(Fragment::from).collect())
}

/// The supersession chain around `id` among readable fragments: (older
/// fragments it replaced, newest first; newer fragments that replaced it,
/// oldest first). Bounded at 50 steps each way.
pub async fn supersession(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    id: Uuid,
) -> Result<(Vec<Uuid>, Vec<Uuid>)> {
    let walk = |forward: bool| {
        let (from, to) = if forward {
            ("from_id", "to_id")
        } else {
            ("to_id", "from_id")
        };
        format!(
            "WITH RECURSIVE chain(id, step) AS (
                 SELECT $2::uuid, 0
                 UNION
                 SELECT l.{to}, c.step + 1
                   FROM chain c
                   JOIN mneme.fragment_links l
                     ON l.tenant_id = $1 AND l.{from} = c.id AND l.relation_type = 'superseded_by'
                  WHERE c.step < 50)
             SELECT c.id FROM chain c
               JOIN mneme.fragments f ON f.tenant_id = $1 AND f.id = c.id AND f.key_id = ANY($3)
              WHERE c.step > 0 ORDER BY c.step"
        )
    };
    let newer = tx
        .query(&walk(true), &[&tx.tenant_id(), &id, &key_ids])
        .await?;
    let older = tx
        .query(&walk(false), &[&tx.tenant_id(), &id, &key_ids])
        .await?;
    Ok((
        older.iter().map(|r| r.get(0)).collect(),
        newer.iter().map(|r| r.get(0)).collect(),
    ))
}

/// Up to `per_fragment` readable fragments of the same session written
/// within `minutes` of each of `ids`: (fragment id, neighbour id, content).
pub async fn nearby(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    ids: &[Uuid],
    minutes: f64,
    per_fragment: i64,
) -> Result<Vec<(Uuid, Uuid, String)>> {
    let rows = tx
        .query(
            "SELECT f.id, n.id, n.content
               FROM mneme.fragments f
               CROSS JOIN LATERAL (
                   SELECT n.id, n.content FROM mneme.fragments n
                    WHERE n.tenant_id = f.tenant_id AND n.session_id = f.session_id
                      AND n.id <> f.id AND n.key_id = ANY($2) AND n.valid_to IS NULL
                      AND n.created_at BETWEEN f.created_at - make_interval(mins => $4::float8::int)
                                           AND f.created_at + make_interval(mins => $4::float8::int)
                    ORDER BY abs(extract(epoch FROM n.created_at - f.created_at))
                    LIMIT $5) n
              WHERE f.tenant_id = $1 AND f.id = ANY($3) AND f.session_id IS NOT NULL",
            &[&tx.tenant_id(), &key_ids, &ids, &minutes, &per_fragment],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Records that fragments were recalled, `times[i]` times each for
/// `ids[i]`: access count, last access, and the activation estimate
/// (recent, repeated use raises it towards 1). Several accesses in one call
/// move the estimate as that many accesses in a row would: the first by how
/// long the fragment had rested, each further one as an access just now.
pub async fn record_access(tx: &TenantTx<'_>, ids: &[Uuid], times: &[i32]) -> Result<()> {
    tx.execute(
        "UPDATE mneme.fragments f
            SET access_count = f.access_count + a.times,
                accessed_at = now(),
                ema_activation = 1.0 - power(0.7, a.times - 1) * (1.0 - (
                    0.7 * f.ema_activation + 0.3 * LEAST(1.0, 1.0 / sqrt(GREATEST(1.0,
                        extract(epoch FROM now() - COALESCE(f.accessed_at, f.created_at))::float8
                        / 60.0)))))
           FROM unnest($2::uuid[], $3::int[]) AS a(id, times)
          WHERE f.tenant_id = $1 AND f.id = a.id",
        &[&tx.tenant_id(), &ids, &times],
    )
    .await?;
    Ok(())
}

/// A fragment waiting for its embedding.
#[derive(Debug, Clone)]
pub struct PendingEmbedding {
    pub id: Uuid,
    pub topic: String,
    pub content: String,
}

fn pending(rows: Vec<Row>) -> Vec<PendingEmbedding> {
    rows.into_iter()
        .map(|row| PendingEmbedding {
            id: row.get(0),
            topic: row.get(1),
            content: row.get(2),
        })
        .collect()
}

/// Locks up to `limit` fragments of the tenant that have no embedding yet.
/// `SKIP LOCKED` lets any number of workers share the queue; if a worker
/// dies, its transaction rolls back and the rows become visible again.
pub async fn lock_pending_embeddings(
    tx: &TenantTx<'_>,
    limit: i64,
) -> Result<Vec<PendingEmbedding>> {
    let rows = tx
        .query(
            "SELECT id, topic, content FROM mneme.fragments
              WHERE tenant_id = $1 AND embedding IS NULL AND embedding_parked_at IS NULL
                AND (embedding_retry_at IS NULL OR embedding_retry_at <= now())
              ORDER BY created_at
              LIMIT $2
              FOR NO KEY UPDATE SKIP LOCKED",
            &[&tx.tenant_id(), &limit],
        )
        .await?;
    Ok(pending(rows))
}

/// The condition of a stale vector: computed by another model or from
/// another recipe's text than `$2` / `$3`.
const STALE_EMBEDDING: &str = "embedding IS NOT NULL AND embedding_parked_at IS NULL
    AND (embedding_model IS DISTINCT FROM $2 OR embedding_recipe <> $3)";

/// Locks up to `limit` fragments of the tenant whose vector is stale. Such
/// a vector keeps serving searches of its model until it is replaced, so
/// there is no order to keep and no index to need: the scan stops at
/// `limit`, and once it finds nothing the worker stops asking (see
/// `mneme-consolidator`).
pub async fn lock_stale_embeddings(
    tx: &TenantTx<'_>,
    model: &str,
    recipe: i16,
    limit: i64,
) -> Result<Vec<PendingEmbedding>> {
    let rows = tx
        .query(
            &format!(
                "SELECT id, topic, content FROM mneme.fragments
                  WHERE tenant_id = $1 AND {STALE_EMBEDDING}
                    AND (embedding_retry_at IS NULL OR embedding_retry_at <= now())
                  LIMIT $4
                  FOR NO KEY UPDATE SKIP LOCKED"
            ),
            &[&tx.tenant_id(), &model, &recipe, &limit],
        )
        .await?;
    Ok(pending(rows))
}

/// How many of the tenant's vectors are stale (see [`lock_stale_embeddings`]).
pub async fn count_stale_embeddings(tx: &TenantTx<'_>, model: &str, recipe: i16) -> Result<i64> {
    Ok(tx
        .query_one(
            &format!(
                "SELECT count(*) FROM mneme.fragments WHERE tenant_id = $1 AND {STALE_EMBEDDING}"
            ),
            &[&tx.tenant_id(), &model, &recipe],
        )
        .await?
        .get(0))
}

/// Stores embeddings computed for locked fragments, with the model and the
/// passage recipe they were computed by.
pub async fn store_embeddings(
    tx: &TenantTx<'_>,
    model: &str,
    recipe: i16,
    ids: &[Uuid],
    embeddings: &[Vector],
) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments f
                SET embedding = v.embedding, embedding_model = $2, embedding_recipe = $3,
                    embedding_attempts = 0, embedding_retry_at = NULL, embedding_error = NULL
               FROM unnest($4::uuid[], $5::vector[]) AS v(id, embedding)
              WHERE f.tenant_id = $1 AND f.id = v.id",
            &[&tx.tenant_id(), &model, &recipe, &ids, &embeddings],
        )
        .await?)
}

/// Records that embedding the locked fragment `id` failed with `error`:
/// it is retried after `backoff`, or parked out of the queue once it has
/// failed `max_attempts` times. Returns true when it was parked.
pub async fn embedding_failed(
    tx: &TenantTx<'_>,
    id: Uuid,
    error: &str,
    backoff: std::time::Duration,
    max_attempts: i16,
) -> Result<bool> {
    let row = tx
        .query_one(
            "UPDATE mneme.fragments
                SET embedding_attempts = embedding_attempts + 1,
                    embedding_error = left($3, 500),
                    embedding_retry_at = CASE WHEN embedding_attempts + 1 >= $5::int2 THEN NULL
                        ELSE now() + make_interval(secs => $4 * power(2, embedding_attempts)) END,
                    embedding_parked_at = CASE WHEN embedding_attempts + 1 >= $5::int2 THEN now() END
              WHERE tenant_id = $1 AND id = $2
             RETURNING embedding_parked_at IS NOT NULL",
            &[
                &tx.tenant_id(),
                &id,
                &error,
                &backoff.as_secs_f64(),
                &max_attempts,
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// Puts the tenant's parked fragments back into the embedding queue (after
/// the provider or the model changed): those without a vector, and those
/// whose stale vector could not be replaced. Returns how many.
pub async fn requeue_parked_embeddings(tx: &TenantTx<'_>) -> Result<u64> {
    Ok(tx
        .execute(
            "UPDATE mneme.fragments
                SET embedding_attempts = 0, embedding_retry_at = NULL,
                    embedding_parked_at = NULL, embedding_error = NULL
              WHERE tenant_id = $1 AND embedding_parked_at IS NOT NULL",
            &[&tx.tenant_id()],
        )
        .await?)
}

/// Fragments of the tenant still waiting for an embedding (parked ones
/// excluded).
pub async fn count_pending_embeddings(tx: &TenantTx<'_>) -> Result<i64> {
    Ok(tx
        .query_one(
            "SELECT count(*) FROM mneme.fragments
              WHERE tenant_id = $1 AND embedding IS NULL AND embedding_parked_at IS NULL",
            &[&tx.tenant_id()],
        )
        .await?
        .get(0))
}

/// The tenant's embedding backlog: fragments waiting (parked ones
/// excluded) and the age in seconds of the oldest (0 when none wait).
pub async fn pending_embedding_backlog(tx: &TenantTx<'_>) -> Result<(i64, f64)> {
    let row = tx
        .query_one(
            "SELECT count(*),
                    coalesce(extract(epoch FROM now() - min(created_at))::float8, 0)
               FROM mneme.fragments
              WHERE tenant_id = $1 AND embedding IS NULL AND embedding_parked_at IS NULL",
            &[&tx.tenant_id()],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Ends the validity of `old_ids` (those of `key_id` still valid: a key
/// never supersedes a group peer's fragments) because `new_id` replaces them: `valid_to` is set, importance
/// halved (never below 0.05), and a `superseded_by` link points from each old
/// fragment to the new one. Returns the ids that were superseded.
pub async fn supersede(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    old_ids: &[Uuid],
    new_id: Uuid,
) -> Result<Vec<Uuid>> {
    let rows = tx
        .query(
            "UPDATE mneme.fragments
                SET valid_to = now(), importance = GREATEST(0.05, importance * 0.5)
              WHERE tenant_id = $1 AND id = ANY($2) AND key_id = $3 AND id <> $4
                AND valid_to IS NULL
             RETURNING id",
            &[&tx.tenant_id(), &old_ids, &key_id, &new_id],
        )
        .await?;
    let superseded: Vec<Uuid> = rows.iter().map(|r| r.get(0)).collect();
    tx.execute(
        "INSERT INTO mneme.fragment_links (tenant_id, from_id, to_id, relation_type)
         SELECT $1, old_id, $3, 'superseded_by' FROM unnest($2::uuid[]) AS old_id
         ON CONFLICT DO NOTHING",
        &[&tx.tenant_id(), &superseded, &new_id],
    )
    .await?;
    Ok(superseded)
}

/// The nearest fragments in time to each of `ids` (of key `key_id`, those
/// still valid): same agent and topic, valid, at most `hours` apart, at
/// most `limit` each.
/// Returns (fragment, neighbour, hours apart). The nearest ones on each side
/// come straight from an index range; one statement serves any number of
/// fragments, so a batch's links cost one plan, not one per item.
pub async fn temporal_neighbors(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    ids: &[Uuid],
    hours: f64,
    limit: i64,
) -> Result<Vec<(Uuid, Uuid, f64)>> {
    let rows = tx
        .query(
            "SELECT f.id, near.id,
                    (abs(extract(epoch FROM near.created_at - f.created_at)) / 3600.0)::float8
               FROM mneme.fragments f
              CROSS JOIN LATERAL (
                    SELECT n.id, n.created_at FROM (
                        (SELECT n.id, n.created_at, n.agent_id, n.valid_to FROM mneme.fragments n
                          WHERE n.tenant_id = $1 AND n.key_id = $2 AND n.topic = f.topic
                            AND n.created_at <= f.created_at AND n.id <> f.id
                            AND n.created_at >= f.created_at - make_interval(secs => $4::float8 * 3600)
                          ORDER BY n.created_at DESC LIMIT $5::int8 * 2)
                        UNION ALL
                        (SELECT n.id, n.created_at, n.agent_id, n.valid_to FROM mneme.fragments n
                          WHERE n.tenant_id = $1 AND n.key_id = $2 AND n.topic = f.topic
                            AND n.created_at > f.created_at
                            AND n.created_at <= f.created_at + make_interval(secs => $4::float8 * 3600)
                          ORDER BY n.created_at LIMIT $5::int8 * 2)) n
                     WHERE n.agent_id = f.agent_id AND n.valid_to IS NULL
                     ORDER BY abs(extract(epoch FROM n.created_at - f.created_at))
                     LIMIT $5::int8) near
              WHERE f.tenant_id = $1 AND f.key_id = $2 AND f.id = ANY($3)
                -- A fragment superseded before its turn came (history now)
                -- gains no links.
                AND f.valid_to IS NULL",
            &[&tx.tenant_id(), &key_id, &ids, &hours, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get::<_, f64>(2)))
        .collect())
}

/// Two keywords a neighbour of `fragment_id` must both carry to be
/// considered (the same keyword twice when one shared keyword is enough).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeywordProbe<'a> {
    pub fragment_id: Uuid,
    pub first: &'a str,
    pub second: &'a str,
}

/// Valid fragments of key `key_id` (same agent or `default`, a compatible
/// workspace) carrying at least `min_share` of the keywords of a probed
/// fragment, for `related` links. Returns (fragment, neighbour), at most
/// `per_fragment` neighbours each, those sharing most keywords first, then
/// the newest.
///
/// The probes only find candidates, through the keyword index (at most
/// [`PROBE_CANDIDATES`] per probe); whether a candidate shares enough is
/// counted here on the stored keyword arrays. One statement serves any
/// number of fragments, so a batch's links cost one plan, not one per item.
pub async fn keyword_neighbors(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    probes: &[KeywordProbe<'_>],
    min_share: f64,
    per_fragment: i64,
) -> Result<Vec<(Uuid, Uuid)>> {
    if probes.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = probes.iter().map(|p| p.fragment_id).collect();
    let firsts: Vec<&str> = probes.iter().map(|p| p.first).collect();
    let seconds: Vec<&str> = probes.iter().map(|p| p.second).collect();
    let rows = tx
        .query(
            "WITH probe AS MATERIALIZED (
                 -- Hashed here, not in the lookup below: under row-level
                 -- security a condition that calls a function on another
                 -- row's values is not leakproof, and the index could not
                 -- serve it (migrations/V30).
                 SELECT p.fragment_id,
                        mneme.keyword_hashes($1, ARRAY[p.first]) AS first,
                        mneme.keyword_hashes($1, ARRAY[p.second]) AS second
                   FROM unnest($3::uuid[], $4::text[], $5::text[]) AS p(fragment_id, first, second)),
             candidate AS (
                 SELECT DISTINCT p.fragment_id, c.id
                   FROM probe p
                   CROSS JOIN LATERAL
                        (SELECT n.id FROM mneme.fragments n
                          -- Two overlaps, not `@>`: arrayoverlap is the
                          -- operator marked leakproof (V23), so the index
                          -- serves it under row-level security. A hash
                          -- collision only adds a candidate, whose share is
                          -- counted on the keywords below. The key is
                          -- compared as text so that no btree index can
                          -- serve it: a key new to the planner (no
                          -- statistics yet, as during an import) looks a
                          -- few rows large, and walking its rows for every
                          -- probe took 15 times as long as the keyword
                          -- index (docs/BENCHMARKS.md).
                          WHERE n.tenant_id = $1
                            AND n.keyword_hashes && p.first AND n.keyword_hashes && p.second
                            AND n.key_id::text = $2::uuid::text
                            AND n.valid_to IS NULL AND n.id <> p.fragment_id
                          LIMIT $8) c),
             scored AS (
                 SELECT f.id AS fragment_id, n.id, n.created_at,
                        (SELECT count(*) FROM unnest(n.keywords) k WHERE k = ANY(f.keywords))
                          / cardinality(f.keywords)::float8 AS share
                   FROM candidate c
                   JOIN mneme.fragments f ON f.tenant_id = $1 AND f.id = c.fragment_id
                   JOIN mneme.fragments n ON n.tenant_id = $1 AND n.id = c.id
                  -- A fragment superseded before its turn came (history
                  -- now) gains no links.
                  WHERE f.key_id = $2 AND cardinality(f.keywords) > 0 AND f.valid_to IS NULL
                    AND n.agent_id IN (f.agent_id, 'default')
                    AND (f.workspace IS NULL OR n.workspace = f.workspace OR n.workspace IS NULL))
             SELECT fragment_id, id
               FROM (SELECT fragment_id, id,
                            row_number() OVER (PARTITION BY fragment_id
                                               ORDER BY share DESC, created_at DESC, id) AS place
                       FROM scored WHERE share >= $6) ranked
              WHERE place <= $7",
            &[
                &tx.tenant_id(),
                &key_id,
                &ids,
                &firsts,
                &seconds,
                &min_share,
                &per_fragment,
                &PROBE_CANDIDATES,
            ],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Candidates [`keyword_neighbors`] reads per probe at most, so a pair of
/// common keywords costs the same however many fragments carry it.
pub const PROBE_CANDIDATES: i64 = 8;

/// A fragment that shares words with another, for conflict hints.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbor {
    pub id: Uuid,
    pub content: String,
    pub keywords: Vec<String>,
    pub rank: f32,
}

/// Valid fragments in `scope` matching `tsquery`, other than `exclude`,
/// best first. At most [`NEIGHBOR_CANDIDATES`] matches are ranked, so the
/// cost stays bounded however many fragments share the terms. Read-only: no
/// access statistics are touched.
pub async fn lexical_neighbors(
    tx: &TenantTx<'_>,
    scope: &SearchScope<'_>,
    tsquery: &str,
    exclude: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Neighbor>> {
    let rows = tx
        .query(
            &format!(
                // Every field counts alike: these neighbours feed conflict
                // hints, which compare contents, and the weights of labelled
                // fields are recall's setting.
                "SELECT id, content, keywords, ts_rank('{{1,1,1,1}}', search_tsv, q, 1) AS rank
                   FROM (SELECT f.id, f.content, f.keywords, f.search_tsv
                           FROM mneme.fragments f
                          WHERE {SCOPE} AND f.search_tsv @@ CAST($19::text AS tsquery)
                            AND ($20::uuid IS NULL OR f.id <> $20)
                          LIMIT $22) candidates,
                        CAST($19::text AS tsquery) AS q
                  ORDER BY rank DESC LIMIT $21"
            ),
            &scope.params(
                &tx.tenant_id(),
                &[&tsquery, &exclude, &limit, &NEIGHBOR_CANDIDATES],
            ),
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Neighbor {
            id: r.get(0),
            content: r.get(1),
            keywords: r.get(2),
            rank: r.get(3),
        })
        .collect())
}

/// Matches [`lexical_neighbors`] ranks at most.
pub const NEIGHBOR_CANDIDATES: i64 = 200;

/// Valid fragments the key wrote (what its quota counts).
pub async fn count_active(tx: &TenantTx<'_>, key_id: Uuid) -> Result<i64> {
    Ok(tx
        .query_one(
            "SELECT count(*) FROM mneme.fragments
              WHERE tenant_id = $1 AND key_id = $2 AND valid_to IS NULL",
            &[&tx.tenant_id(), &key_id],
        )
        .await?
        .get(0))
}

/// Every column an amendment may need.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFragment {
    pub id: Uuid,
    pub key_id: Uuid,
    pub agent_id: String,
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub content: String,
    pub content_hash: String,
    pub topic: String,
    pub keywords: Vec<String>,
    pub fragment_type: String,
    pub importance: f32,
    pub ttl_tier: String,
    pub is_anchor: bool,
    pub source: Option<String>,
    pub context_summary: Option<String>,
    pub case_id: Option<String>,
    pub goal: Option<String>,
    pub outcome: Option<String>,
    pub phase: Option<String>,
    pub resolution_status: Option<String>,
    pub assertion_status: String,
    pub affect: String,
    pub occurred_at: Option<DateTime<Utc>>,
    pub valid_to: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<&Row> for StoredFragment {
    fn from(row: &Row) -> Self {
        Self {
            id: row.get("id"),
            key_id: row.get("key_id"),
            agent_id: row.get("agent_id"),
            session_id: row.get("session_id"),
            workspace: row.get("workspace"),
            content: row.get("content"),
            content_hash: row.get("content_hash"),
            topic: row.get("topic"),
            keywords: row.get("keywords"),
            fragment_type: row.get("type"),
            importance: row.get("importance"),
            ttl_tier: row.get("ttl_tier"),
            is_anchor: row.get("is_anchor"),
            source: row.get("source"),
            context_summary: row.get("context_summary"),
            case_id: row.get("case_id"),
            goal: row.get("goal"),
            outcome: row.get("outcome"),
            phase: row.get("phase"),
            resolution_status: row.get("resolution_status"),
            assertion_status: row.get("assertion_status"),
            affect: row.get("affect"),
            occurred_at: row.get("occurred_at"),
            valid_to: row.get("valid_to"),
            created_at: row.get("created_at"),
        }
    }
}

pub(crate) const STORED_COLUMNS: &str = "id, key_id, agent_id, session_id, workspace, content, content_hash, topic,
    keywords, type, importance, ttl_tier, is_anchor, source, context_summary, case_id, goal, outcome,
    phase, resolution_status, assertion_status, affect, occurred_at, valid_to, created_at";

/// Loads fragments the caller can read (keys and agent), locking them for
/// update when `lock` is set. Order unspecified.
pub async fn load(
    tx: &TenantTx<'_>,
    readable_keys: &[Uuid],
    agent_id: &str,
    ids: &[Uuid],
    lock: bool,
) -> Result<Vec<StoredFragment>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {STORED_COLUMNS} FROM mneme.fragments
                  WHERE tenant_id = $1 AND key_id = ANY($2) AND agent_id IN ($3, 'default')
                    AND id = ANY($4) {}",
                if lock { "FOR UPDATE" } else { "" }
            ),
            &[&tx.tenant_id(), &readable_keys, &agent_id, &ids],
        )
        .await?;
    Ok(rows.iter().map(StoredFragment::from).collect())
}

/// Another fragment of the same key with this content, if any.
pub async fn find_by_hash(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    content_hash: &str,
    except: Uuid,
) -> Result<Option<Uuid>> {
    Ok(tx
        .query_opt(
            "SELECT id FROM mneme.fragments
              WHERE tenant_id = $1 AND key_id = $2 AND content_hash = $3 AND id <> $4",
            &[&tx.tenant_id(), &key_id, &content_hash, &except],
        )
        .await?
        .map(|row| row.get(0)))
}

/// Writes an amended fragment in place. With `reembed` (its content or
/// topic, the text of its vector, changed) the embedding is cleared and the
/// worker recomputes it. The caller records the previous version.
pub async fn apply_amendment(
    tx: &TenantTx<'_>,
    id: Uuid,
    amended: &PreparedFragment,
    reembed: bool,
) -> Result<()> {
    tx.execute(
        "UPDATE mneme.fragments SET
            content = $3, content_hash = $4, topic = $5, keywords = $6, type = $7, importance = $8,
            ttl_tier = $9, is_anchor = $10, search_tsv = $11::text::tsvector,
            search_version = DEFAULT, estimated_tokens = $12,
            case_id = $13, phase = $14, resolution_status = $15, assertion_status = $16, affect = $17,
            embedding = CASE WHEN $18 THEN NULL ELSE embedding END,
            embedding_model = CASE WHEN $18 THEN NULL ELSE embedding_model END
          WHERE tenant_id = $1 AND id = $2",
        &[
            &tx.tenant_id(),
            &id,
            &amended.content,
            &amended.content_hash,
            &amended.topic,
            &amended.keywords,
            &amended.fragment_type.as_str(),
            &amended.importance,
            &amended.ttl_tier.as_str(),
            &amended.is_anchor,
            &amended.search_lexemes,
            &(amended.estimated_tokens as i32),
            &amended.case.case_id,
            &amended.case.phase,
            &amended.case.resolution_status.map(|s| s.as_str()),
            &amended.assertion_status.as_str(),
            &amended.affect.as_str(),
            &reembed,
        ],
    )
    .await?;
    Ok(())
}

/// Marks an error as resolved and caps its importance, because something
/// now resolves it.
pub async fn resolve_error(tx: &TenantTx<'_>, id: Uuid) -> Result<()> {
    tx.execute(
        "UPDATE mneme.fragments
            SET importance = LEAST(importance, 0.5), resolution_status = 'resolved'
          WHERE tenant_id = $1 AND id = $2 AND type = 'error'",
        &[&tx.tenant_id(), &id],
    )
    .await?;
    Ok(())
}

/// Filters of [`browse`]: the admin dashboard's memory browser, over the
/// whole tenant (every key), newest first.
#[derive(Debug, Clone, Default)]
pub struct BrowseFilter<'a> {
    /// A substring of the content, topic or a keyword (case-insensitive).
    pub text: Option<&'a str>,
    pub fragment_type: Option<&'a str>,
    pub topic: Option<&'a str>,
    pub key_id: Option<Uuid>,
    pub workspace: Option<&'a str>,
    /// Also superseded and forgotten-by-validity fragments.
    pub include_invalid: bool,
    /// Continue after this (created_at, id), from the previous page.
    pub after: Option<(DateTime<Utc>, Uuid)>,
}

/// One page of the tenant's fragments matching `filter`.
pub async fn browse(
    tx: &TenantTx<'_>,
    filter: &BrowseFilter<'_>,
    limit: i64,
) -> Result<Vec<Fragment>> {
    let pattern = filter.text.map(|text| {
        format!(
            "%{}%",
            text.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        )
    });
    let (after_at, after_id) = filter.after.unzip();
    let rows = tx
        .query(
            &format!(
                "SELECT {FRAGMENT_COLUMNS} FROM mneme.fragments f
                  WHERE f.tenant_id = $1
                    AND ($2::text IS NULL OR f.content ILIKE $2 OR f.topic ILIKE $2
                         OR EXISTS (SELECT 1 FROM unnest(f.keywords) k WHERE k ILIKE $2))
                    AND ($3::text IS NULL OR f.type = $3)
                    AND ($4::text IS NULL OR f.topic = $4)
                    AND ($5::uuid IS NULL OR f.key_id = $5)
                    AND ($6::text IS NULL OR f.workspace = $6)
                    AND ($7 OR f.valid_to IS NULL)
                    AND ($8::timestamptz IS NULL OR (f.created_at, f.id) < ($8, $9))
                  ORDER BY f.created_at DESC, f.id DESC
                  LIMIT $10"
            ),
            &[
                &tx.tenant_id(),
                &pattern,
                &filter.fragment_type,
                &filter.topic,
                &filter.key_id,
                &filter.workspace,
                &filter.include_invalid,
                &after_at,
                &after_id,
                &limit,
            ],
        )
        .await?;
    Ok(rows.into_iter().map(Fragment::from).collect())
}

/// Counts of the tenant's valid fragments, for the dashboard.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Census {
    pub total: i64,
    pub pending_embedding: i64,
    pub by_type: Vec<(String, i64)>,
    pub by_key: Vec<(Uuid, i64)>,
    /// The largest topics (at most 20).
    pub by_topic: Vec<(String, i64)>,
}

/// The tenant's valid fragments, and how many of them wait for their
/// embedding.
pub async fn totals(tx: &TenantTx<'_>) -> Result<(i64, i64)> {
    let row = tx
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE embedding IS NULL)
               FROM mneme.fragments WHERE tenant_id = $1 AND valid_to IS NULL",
            &[&tx.tenant_id()],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// Valid fragments per value of `column`, largest first (at most `limit`).
async fn counts_by<T>(tx: &TenantTx<'_>, column: &'static str, limit: i64) -> Result<Vec<(T, i64)>>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let rows = tx
        .query(
            &format!(
                "SELECT {column}, count(*) FROM mneme.fragments
                  WHERE tenant_id = $1 AND valid_to IS NULL
                  GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $2"
            ),
            &[&tx.tenant_id(), &limit],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// Valid fragments per key (keys without any are absent).
pub async fn counts_by_key(tx: &TenantTx<'_>) -> Result<Vec<(Uuid, i64)>> {
    counts_by(tx, "key_id", i64::MAX).await
}

pub async fn census(tx: &TenantTx<'_>) -> Result<Census> {
    let (total, pending_embedding) = totals(tx).await?;
    Ok(Census {
        total,
        pending_embedding,
        by_type: counts_by(tx, "type", 20).await?,
        by_key: counts_by_key(tx).await?,
        by_topic: counts_by(tx, "topic", 20).await?,
    })
}

/// The most important valid fragments of the tenant (optionally of one
/// topic or key): the nodes of the dashboard's knowledge graph. Linked
/// fragments come first, so the graph shows structure rather than a cloud
/// of isolated points.
pub async fn graph_nodes(
    tx: &TenantTx<'_>,
    topic: Option<&str>,
    key_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Fragment>> {
    let rows = tx
        .query(
            &format!(
                "SELECT {FRAGMENT_COLUMNS} FROM mneme.fragments f
                  WHERE f.tenant_id = $1 AND f.valid_to IS NULL
                    AND ($2::text IS NULL OR f.topic = $2)
                    AND ($3::uuid IS NULL OR f.key_id = $3)
                  ORDER BY EXISTS (SELECT 1 FROM mneme.fragment_links l
                                    WHERE l.tenant_id = $1 AND l.deleted_at IS NULL
                                      AND (l.from_id = f.id OR l.to_id = f.id)) DESC,
                           f.importance DESC, f.created_at DESC
                  LIMIT $4"
            ),
            &[&tx.tenant_id(), &topic, &key_id, &limit],
        )
        .await?;
    Ok(rows.into_iter().map(Fragment::from).collect())
}
