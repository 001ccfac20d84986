//! The `auto_link_queue` table: new fragments waiting for their automatic
//! links. Writes enqueue in their own transaction; the remember service
//! takes batches with `FOR UPDATE SKIP LOCKED`, so any number of its pods
//! can drain one tenant's queue together, and a batch whose transaction
//! rolls back is taken again.

use std::collections::HashMap;

use uuid::Uuid;

use crate::{Result, TenantTx};

/// Queues `fragment_ids` (new fragments of the tenant) for linking.
pub async fn enqueue(tx: &TenantTx<'_>, fragment_ids: &[Uuid]) -> Result<()> {
    if fragment_ids.is_empty() {
        return Ok(());
    }
    tx.execute(
        "INSERT INTO mneme.auto_link_queue (tenant_id, fragment_id)
         SELECT $1, id FROM unnest($2::uuid[]) AS ids(id)
         ON CONFLICT DO NOTHING",
        &[&tx.tenant_id(), &fragment_ids],
    )
    .await?;
    Ok(())
}

/// A queued fragment, taken for linking.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    pub fragment_id: Uuid,
    /// `None` when the fragment is gone (forgotten before it was linked)
    /// or no longer valid (superseded): nothing to link.
    pub fragment: Option<QueuedFragment>,
}

/// What linking needs of a queued fragment.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedFragment {
    pub key_id: Uuid,
    pub keywords: Vec<String>,
}

/// Removes up to `limit` of the oldest queued fragments that no concurrent
/// transaction holds, and returns them. The removal commits with the
/// caller's links; if the transaction rolls back they are queued again.
///
/// Two statements, so that the fragments are read by primary key whatever
/// the planner believes of the tenant's size (as one join, a few batches of
/// a 100,000-memory import ran into the statement timeout).
pub async fn take(tx: &TenantTx<'_>, limit: i64) -> Result<Vec<Taken>> {
    let taken: Vec<Uuid> = tx
        .query(
            "WITH picked AS MATERIALIZED (
                 SELECT fragment_id FROM mneme.auto_link_queue
                  WHERE tenant_id = $1
                  ORDER BY fragment_id
                  LIMIT $2
                    FOR UPDATE SKIP LOCKED)
             DELETE FROM mneme.auto_link_queue q
              USING picked p
              WHERE q.tenant_id = $1 AND q.fragment_id = p.fragment_id
             RETURNING q.fragment_id",
            &[&tx.tenant_id(), &limit],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    if taken.is_empty() {
        return Ok(Vec::new());
    }
    let mut fragments: HashMap<Uuid, QueuedFragment> = tx
        .query(
            "SELECT id, key_id, keywords FROM mneme.fragments
              WHERE tenant_id = $1 AND id = ANY($2) AND valid_to IS NULL",
            &[&tx.tenant_id(), &taken],
        )
        .await?
        .iter()
        .map(|row| {
            let fragment = QueuedFragment {
                key_id: row.get(1),
                keywords: row.get(2),
            };
            (row.get(0), fragment)
        })
        .collect();
    let mut taken: Vec<Taken> = taken
        .into_iter()
        .map(|fragment_id| Taken {
            fragment_id,
            fragment: fragments.remove(&fragment_id),
        })
        .collect();
    taken.sort_by_key(|t| t.fragment_id);
    Ok(taken)
}

/// How many of the tenant's fragments wait, and how long the oldest has
/// waited, in seconds (0 when none).
pub async fn backlog(tx: &TenantTx<'_>) -> Result<(i64, f64)> {
    let row = tx
        .query_one(
            "SELECT count(*),
                    COALESCE(extract(epoch FROM now() - min(enqueued_at))::float8, 0)
               FROM mneme.auto_link_queue WHERE tenant_id = $1",
            &[&tx.tenant_id()],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}
