//! The `fragment_links` table: typed, weighted edges between fragments of
//! one tenant. Links are created only between fragments the caller can
//! read, so they never cross a key or tenant boundary the caller could not
//! cross itself.

use tokio_postgres::Row;
use uuid::Uuid;

use crate::{Result, TenantTx};

/// Creates `from → to` if both fragments are readable with `key_ids`;
/// returns whether the link exists afterwards. An existing link keeps the
/// larger weight.
pub async fn upsert(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    from_id: Uuid,
    to_id: Uuid,
    relation_type: &str,
    weight: f32,
) -> Result<bool> {
    let rows = tx
        .execute(
            "INSERT INTO mneme.fragment_links (tenant_id, from_id, to_id, relation_type, weight)
             SELECT $1, a.id, b.id, $5, $6
               FROM mneme.fragments a, mneme.fragments b
              WHERE a.tenant_id = $1 AND a.id = $2 AND a.key_id = ANY($4)
                AND b.tenant_id = $1 AND b.id = $3 AND b.key_id = ANY($4)
             ON CONFLICT (tenant_id, from_id, to_id, relation_type) DO UPDATE
                SET weight = GREATEST(mneme.fragment_links.weight, EXCLUDED.weight),
                    automatic = false, deleted_at = NULL",
            &[
                &tx.tenant_id(),
                &from_id,
                &to_id,
                &key_ids,
                &relation_type,
                &weight,
            ],
        )
        .await?;
    Ok(rows == 1)
}

/// Creates `from → target` for every (target, relation, weight) whose
/// target is readable with `key_ids`, in one statement; existing links keep
/// the larger weight. Returns the (target, relation) pairs that exist
/// afterwards.
pub async fn upsert_many(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    from_id: Uuid,
    targets: &[(Uuid, &str, f32)],
) -> Result<Vec<(Uuid, String)>> {
    let edges: Vec<Edge> = targets
        .iter()
        .map(|&(to_id, relation, weight)| Edge {
            from_id,
            to_id,
            relation_type: relation.to_owned(),
            weight,
        })
        .collect();
    Ok(upsert_edges(tx, key_ids, &edges)
        .await?
        .into_iter()
        .map(|(_, to, relation)| (to, relation))
        .collect())
}

/// Creates every edge whose target is readable with `key_ids` (the caller
/// vouches for the sources), in one statement whatever their number;
/// existing links keep the larger weight. Returns the (from, to, relation)
/// triples that exist afterwards.
pub async fn upsert_edges(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    edges: &[Edge],
) -> Result<Vec<(Uuid, Uuid, String)>> {
    if edges.is_empty() {
        return Ok(Vec::new());
    }
    let rows = upsert_rows(
        tx,
        key_ids,
        edges,
        "INSERT INTO mneme.fragment_links (tenant_id, from_id, to_id, relation_type, weight)
             SELECT $1, t.from_id, t.to_id, t.relation, max(t.weight)
               FROM unnest($3::uuid[], $4::uuid[], $5::text[], $6::real[])
                    AS t(from_id, to_id, relation, weight)
               JOIN mneme.fragments b ON b.tenant_id = $1 AND b.id = t.to_id AND b.key_id = ANY($2)
              WHERE t.to_id <> t.from_id
              GROUP BY t.from_id, t.to_id, t.relation
             ON CONFLICT (tenant_id, from_id, to_id, relation_type) DO UPDATE
                SET weight = GREATEST(mneme.fragment_links.weight, EXCLUDED.weight),
                    automatic = false, deleted_at = NULL
             RETURNING from_id, to_id, relation_type",
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Creates links without a direction (`related`, `temporal`: mneme's
/// automatic links, marked `automatic`) between fragments of `key_ids`,
/// each pair once whichever way it is given: an edge is stored from the
/// smaller id to the larger (as `co_retrieved` links are), an edge given both ways is one
/// link with the larger weight, and an edge whose reverse is already an
/// active link (one made before this rule, or with `link`) is left out.
/// Without this, fragments written together linked to each other both ways,
/// doubling their automatic links. Existing links keep the larger weight.
pub async fn upsert_undirected_edges(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    edges: &[Edge],
) -> Result<u64> {
    if edges.is_empty() {
        return Ok(0);
    }
    let rows = upsert_rows(
        tx,
        key_ids,
        edges,
        "INSERT INTO mneme.fragment_links
                    (tenant_id, from_id, to_id, relation_type, weight, automatic)
             SELECT $1, t.from_id, t.to_id, t.relation, max(t.weight), true
               FROM (SELECT least(e.a, e.b) AS from_id, greatest(e.a, e.b) AS to_id,
                            e.relation, e.weight
                       FROM unnest($3::uuid[], $4::uuid[], $5::text[], $6::real[])
                            AS e(a, b, relation, weight)) t
               JOIN mneme.fragments a ON a.tenant_id = $1 AND a.id = t.from_id AND a.key_id = ANY($2)
               JOIN mneme.fragments b ON b.tenant_id = $1 AND b.id = t.to_id AND b.key_id = ANY($2)
              WHERE t.to_id <> t.from_id
                AND NOT EXISTS (
                        SELECT FROM mneme.fragment_links r
                         WHERE r.tenant_id = $1 AND r.from_id = t.to_id AND r.to_id = t.from_id
                           AND r.relation_type = t.relation AND r.deleted_at IS NULL)
              GROUP BY t.from_id, t.to_id, t.relation
             ON CONFLICT (tenant_id, from_id, to_id, relation_type) DO UPDATE
                -- A link an agent also made stays theirs.
                SET weight = GREATEST(mneme.fragment_links.weight, EXCLUDED.weight),
                    deleted_at = NULL
             RETURNING from_id",
    )
    .await?;
    Ok(rows.len() as u64)
}

/// Runs an upsert statement of `edges`: `$1` the tenant, `$2` `key_ids`,
/// `$3`–`$6` the edges' sources, targets, relations and weights.
async fn upsert_rows(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    edges: &[Edge],
    statement: &str,
) -> Result<Vec<Row>> {
    let froms: Vec<Uuid> = edges.iter().map(|e| e.from_id).collect();
    let tos: Vec<Uuid> = edges.iter().map(|e| e.to_id).collect();
    let relations: Vec<&str> = edges.iter().map(|e| e.relation_type.as_str()).collect();
    let weights: Vec<f32> = edges.iter().map(|e| e.weight).collect();
    // Both ends' foreign keys are checked row by row: see
    // `query_with_generic_plans` for why they must not be custom-planned.
    Ok(tx
        .query_with_generic_plans(
            statement,
            &[
                &tx.tenant_id(),
                &key_ids,
                &froms,
                &tos,
                &relations,
                &weights,
            ],
        )
        .await?)
}

/// Whether `to` can already reach `from` through active links of
/// `relation_type` (so adding `from → to` would close a cycle). Bounded by
/// `max_depth` hops.
pub async fn would_cycle(
    tx: &TenantTx<'_>,
    from_id: Uuid,
    to_id: Uuid,
    relation_type: &str,
    max_depth: i32,
) -> Result<bool> {
    let row = tx
        .query_one(
            "WITH RECURSIVE reach(id, depth) AS (
                 SELECT $3::uuid, 0
                 UNION
                 SELECT l.to_id, r.depth + 1
                   FROM reach r
                   JOIN mneme.fragment_links l
                     ON l.tenant_id = $1 AND l.from_id = r.id
                    AND l.relation_type = $4 AND l.deleted_at IS NULL
                  WHERE r.depth < $5)
             SELECT EXISTS (SELECT FROM reach WHERE id = $2)",
            &[
                &tx.tenant_id(),
                &from_id,
                &to_id,
                &relation_type,
                &max_depth,
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// A link seen from one of the fragments it touches.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkEnd {
    /// The fragment asked about.
    pub anchor: Uuid,
    /// The fragment at the other end.
    pub other: Uuid,
    pub relation_type: String,
    pub weight: f32,
    /// Whether the link points from `anchor` to `other`.
    pub outgoing: bool,
}

/// The strongest active links of each of `ids` (at most `per_id` each),
/// seen from that fragment, whose other end is readable with `key_ids`. A
/// link between two of `ids` appears once for each end.
pub async fn around(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    ids: &[Uuid],
    relation_types: Option<&[String]>,
    per_id: i64,
) -> Result<Vec<LinkEnd>> {
    let rows = tx
        .query(
            // The links are read first (materialised) and then joined to
            // their readable ends by primary key: without this fence the
            // planner, misled by a young tenant's missing statistics, may
            // scan the tenant's links once per fragment of the key.
            "WITH ends AS MATERIALIZED (
                 SELECT l.from_id AS anchor, l.to_id AS other, l.relation_type, l.weight,
                        l.created_at, true AS outgoing
                   FROM mneme.fragment_links l
                  WHERE l.tenant_id = $1 AND l.from_id = ANY($3) AND l.deleted_at IS NULL
                    AND ($4::text[] IS NULL OR l.relation_type = ANY($4))
                 UNION ALL
                 SELECT l.to_id, l.from_id, l.relation_type, l.weight, l.created_at, false
                   FROM mneme.fragment_links l
                  WHERE l.tenant_id = $1 AND l.to_id = ANY($3) AND l.deleted_at IS NULL
                    AND ($4::text[] IS NULL OR l.relation_type = ANY($4)))
             SELECT anchor, other, relation_type, weight, outgoing FROM (
                 SELECT e.*, row_number() OVER (PARTITION BY e.anchor
                                                ORDER BY e.weight DESC, e.created_at DESC,
                                                         e.other) AS rank
                   FROM ends e
                   JOIN mneme.fragments other ON other.tenant_id = $1 AND other.id = e.other
                  WHERE other.key_id = ANY($2)) ranked
             WHERE rank <= $5",
            &[&tx.tenant_id(), &key_ids, &ids, &relation_types, &per_id],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| LinkEnd {
            anchor: row.get(0),
            other: row.get(1),
            relation_type: row.get(2),
            weight: row.get(3),
            outgoing: row.get(4),
        })
        .collect())
}

/// Soft-deletes a link (kept for audit and restore).
pub async fn soft_delete(
    tx: &TenantTx<'_>,
    from_id: Uuid,
    to_id: Uuid,
    relation_type: &str,
) -> Result<bool> {
    let updated = tx
        .execute(
            "UPDATE mneme.fragment_links SET deleted_at = now()
              WHERE tenant_id = $1 AND from_id = $2 AND to_id = $3 AND relation_type = $4
                AND deleted_at IS NULL",
            &[&tx.tenant_id(), &from_id, &to_id, &relation_type],
        )
        .await?;
    Ok(updated == 1)
}

/// Strengthens `co_retrieved` links among fragments recalled together
/// (each pair once, from the smaller id to the larger), capped at 2.
pub async fn strengthen_co_retrieval(tx: &TenantTx<'_>, ids: &[Uuid], step: f32) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.fragment_links (tenant_id, from_id, to_id, relation_type, weight, automatic)
         SELECT $1, a, b, 'co_retrieved', $3, true
           FROM unnest($2::uuid[]) a, unnest($2::uuid[]) b
          WHERE a < b
            AND EXISTS (SELECT FROM mneme.fragments f WHERE f.tenant_id = $1 AND f.id = a)
            AND EXISTS (SELECT FROM mneme.fragments f WHERE f.tenant_id = $1 AND f.id = b)
         ON CONFLICT (tenant_id, from_id, to_id, relation_type) DO UPDATE
            SET weight = LEAST(2.0, mneme.fragment_links.weight + EXCLUDED.weight)",
        &[&tx.tenant_id(), &ids, &step],
    )
    .await?;
    Ok(())
}

/// An edge between two fragments.
#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from_id: Uuid,
    pub to_id: Uuid,
    pub relation_type: String,
    pub weight: f32,
}

/// Active links with both ends among `ids` (optionally of some relations).
pub async fn among(
    tx: &TenantTx<'_>,
    ids: &[Uuid],
    relation_types: Option<&[String]>,
) -> Result<Vec<Edge>> {
    let rows = tx
        .query(
            "SELECT from_id, to_id, relation_type, weight FROM mneme.fragment_links
              WHERE tenant_id = $1 AND from_id = ANY($2) AND to_id = ANY($2) AND deleted_at IS NULL
                AND ($3::text[] IS NULL OR relation_type = ANY($3))",
            &[&tx.tenant_id(), &ids, &relation_types],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Edge {
            from_id: r.get(0),
            to_id: r.get(1),
            relation_type: r.get(2),
            weight: r.get(3),
        })
        .collect())
}
