//! The `fragment_claims` table of the symbolic layer: what fragments assert
//! (subject, predicate, object, polarity), and the lookups that compare a
//! new fragment's claims with stored ones. Also the key's opt-in to the
//! policy hard gate (`api_keys.symbolic_hard_gate`), which only this layer
//! reads.
//!
//! Every query names the transaction's tenant. Claims are written only for
//! a fragment of the writing key, and read only through fragments the
//! caller may read (its keys, its agent or `default`, its workspace or
//! none), so a claim never crosses a boundary its fragment could not.

use uuid::Uuid;

use crate::{Result, TenantTx};

/// A claim to store or compare; strings are already normalised.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClaimRow<'a> {
    pub subject: &'a str,
    pub predicate: &'a str,
    /// `""` when the claim has none.
    pub object: &'a str,
    /// `positive`, `negative` or `uncertain`.
    pub polarity: &'a str,
    pub confidence: f32,
}

/// How the claims were produced, stored with them.
#[derive(Debug, Clone, Copy)]
pub struct Provenance<'a> {
    /// `rule`, `llm` or `manual`.
    pub extractor: &'a str,
    pub rule_version: &'a str,
}

/// Stores `claims` for `fragment_id`, which must belong to `key_id`:
/// anything else is written nowhere. Claims already stored for the fragment
/// are left as they are. Returns how many were added.
pub async fn insert(
    tx: &TenantTx<'_>,
    key_id: Uuid,
    fragment_id: Uuid,
    claims: &[ClaimRow<'_>],
    provenance: Provenance<'_>,
) -> Result<u64> {
    if claims.is_empty() {
        return Ok(0);
    }
    let subjects: Vec<&str> = claims.iter().map(|c| c.subject).collect();
    let predicates: Vec<&str> = claims.iter().map(|c| c.predicate).collect();
    let objects: Vec<&str> = claims.iter().map(|c| c.object).collect();
    let polarities: Vec<&str> = claims.iter().map(|c| c.polarity).collect();
    let confidences: Vec<f32> = claims.iter().map(|c| c.confidence).collect();
    let added = tx
        .execute(
            "INSERT INTO mneme.fragment_claims
                 (tenant_id, fragment_id, key_id, subject, predicate, object, polarity,
                  confidence, extractor, rule_version)
             SELECT $1, f.id, f.key_id, c.subject, c.predicate, c.object, c.polarity,
                    c.confidence, $9, $10
               FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::real[])
                    AS c(subject, predicate, object, polarity, confidence)
               JOIN mneme.fragments f ON f.tenant_id = $1 AND f.id = $2 AND f.key_id = $3
             ON CONFLICT (tenant_id, fragment_id, subject, predicate, object) DO NOTHING",
            &[
                &tx.tenant_id(),
                &fragment_id,
                &key_id,
                &subjects,
                &predicates,
                &objects,
                &polarities,
                &confidences,
                &provenance.extractor,
                &provenance.rule_version,
            ],
        )
        .await?;
    Ok(added)
}

/// A stored claim.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredClaim {
    pub fragment_id: Uuid,
    pub subject: String,
    pub predicate: String,
    pub object: String,
    pub polarity: String,
    pub confidence: f32,
    pub extractor: String,
    pub rule_version: String,
}

/// The claims of `fragment_ids` readable with `key_ids`, by fragment and
/// insertion order.
pub async fn of_fragments(
    tx: &TenantTx<'_>,
    key_ids: &[Uuid],
    fragment_ids: &[Uuid],
) -> Result<Vec<StoredClaim>> {
    let rows = tx
        .query(
            "SELECT c.fragment_id, c.subject, c.predicate, c.object, c.polarity, c.confidence,
                    c.extractor, c.rule_version
               FROM mneme.fragment_claims c
               JOIN mneme.fragments f ON f.tenant_id = $1 AND f.id = c.fragment_id
              WHERE c.tenant_id = $1 AND c.fragment_id = ANY($3) AND f.key_id = ANY($2)
              ORDER BY c.fragment_id, c.id",
            &[&tx.tenant_id(), &key_ids, &fragment_ids],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StoredClaim {
            fragment_id: r.get(0),
            subject: r.get(1),
            predicate: r.get(2),
            object: r.get(3),
            polarity: r.get(4),
            confidence: r.get(5),
            extractor: r.get(6),
            rule_version: r.get(7),
        })
        .collect())
}

/// Whose stored claims a new fragment is compared with.
#[derive(Debug, Clone, Copy)]
pub struct ConflictScope<'a> {
    /// Keys whose fragments the writer may read.
    pub key_ids: &'a [Uuid],
    /// The writer's agent; fragments of agent `default` are shared.
    pub agent_id: &'a str,
    /// When set: fragments of this workspace and global ones.
    pub workspace: Option<&'a str>,
    /// The new fragment itself, never its own conflict.
    pub exclude: Uuid,
    /// Claims below this confidence do not count.
    pub min_confidence: f32,
    /// Most conflicts returned.
    pub limit: i64,
}

/// A stored claim that says the opposite of one of the new claims.
#[derive(Debug, Clone, PartialEq)]
pub struct PolarityConflict {
    pub fragment_id: Uuid,
    /// The conflicting fragment's content.
    pub content: String,
    pub subject: String,
    pub predicate: String,
    pub object: String,
    /// The stored claim's polarity.
    pub polarity: String,
    pub confidence: f32,
}

/// Stored claims of currently valid, readable fragments with the same
/// subject, predicate and object as one of `claims` and the opposite
/// polarity (positive against negative; uncertain claims contradict
/// nothing), most confident first.
pub async fn polarity_conflicts(
    tx: &TenantTx<'_>,
    scope: &ConflictScope<'_>,
    claims: &[ClaimRow<'_>],
) -> Result<Vec<PolarityConflict>> {
    let claims: Vec<&ClaimRow<'_>> = claims
        .iter()
        .filter(|c| matches!(c.polarity, "positive" | "negative"))
        .filter(|c| c.confidence >= scope.min_confidence)
        .collect();
    if claims.is_empty() {
        return Ok(Vec::new());
    }
    let subjects: Vec<&str> = claims.iter().map(|c| c.subject).collect();
    let predicates: Vec<&str> = claims.iter().map(|c| c.predicate).collect();
    let objects: Vec<&str> = claims.iter().map(|c| c.object).collect();
    let opposites: Vec<&str> = claims
        .iter()
        .map(|c| {
            if c.polarity == "positive" {
                "negative"
            } else {
                "positive"
            }
        })
        .collect();
    let rows = tx
        .query(
            "SELECT c.fragment_id, f.content, c.subject, c.predicate, c.object, c.polarity,
                    c.confidence
               FROM unnest($7::text[], $8::text[], $9::text[], $10::text[])
                    AS n(subject, predicate, object, polarity)
               JOIN mneme.fragment_claims c
                 ON c.tenant_id = $1 AND c.subject = n.subject AND c.predicate = n.predicate
                AND c.object = n.object AND c.polarity = n.polarity
               JOIN mneme.fragments f ON f.tenant_id = $1 AND f.id = c.fragment_id
              WHERE f.key_id = ANY($2) AND f.agent_id IN ($3, 'default')
                AND ($4::text IS NULL OR f.workspace = $4 OR f.workspace IS NULL)
                AND f.valid_to IS NULL AND f.id <> $5 AND c.confidence >= $6
              ORDER BY c.confidence DESC, f.created_at DESC, c.fragment_id
              LIMIT $11",
            &[
                &tx.tenant_id(),
                &scope.key_ids,
                &scope.agent_id,
                &scope.workspace,
                &scope.exclude,
                &scope.min_confidence,
                &subjects,
                &predicates,
                &objects,
                &opposites,
                &scope.limit,
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| PolarityConflict {
            fragment_id: r.get(0),
            content: r.get(1),
            subject: r.get(2),
            predicate: r.get(3),
            object: r.get(4),
            polarity: r.get(5),
            confidence: r.get(6),
        })
        .collect())
}

/// Whether `key_id` refuses writes that break a policy rule
/// (`api_keys.symbolic_hard_gate`); false for an unknown key.
pub async fn hard_gate(tx: &TenantTx<'_>, key_id: Uuid) -> Result<bool> {
    let row = tx
        .query_opt(
            "SELECT symbolic_hard_gate FROM mneme.api_keys WHERE tenant_id = $1 AND id = $2",
            &[&tx.tenant_id(), &key_id],
        )
        .await?;
    Ok(row.is_some_and(|r| r.get(0)))
}
