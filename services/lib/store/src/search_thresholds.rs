//! The `search_param_thresholds` table: the adaptive similarity floor,
//! learned per key, query type and hour of day (SearchParamAdaptor).
//!
//! Every recall that used the floor reports how many results it returned;
//! once a bucket has enough samples its floor moves one step down when
//! recalls return almost nothing and one step up when they return many,
//! within bounds. The update is one `INSERT … ON CONFLICT DO UPDATE`, so
//! concurrent recalls on many pods never lose an observation.

use uuid::Uuid;

use crate::{Result, TenantTx};

/// Average result count below which the floor is lowered.
pub const FEW_RESULTS: f64 = 1.0;
/// Average result count above which the floor is raised.
pub const MANY_RESULTS: f64 = 8.0;
/// How far one adjustment moves the floor.
pub const STEP: f32 = 0.01;

/// Bounds and warm-up of the floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloorRule {
    pub start: f32,
    pub min: f32,
    pub max: f32,
    /// Observations a bucket needs before its floor applies or moves.
    pub min_samples: i32,
}

/// Where one observation belongs.
#[derive(Debug, Clone, Copy)]
pub struct Bucket<'a> {
    pub key_id: Uuid,
    pub query_type: &'a str,
    /// Hour of day (UTC), 0–23.
    pub hour: i16,
}

/// The learned floor of `bucket`, once it has `min_samples` observations.
pub async fn floor(tx: &TenantTx<'_>, bucket: Bucket<'_>, rule: &FloorRule) -> Result<Option<f32>> {
    Ok(tx
        .query_opt(
            "SELECT min_similarity FROM mneme.search_param_thresholds
              WHERE tenant_id = $1 AND key_id = $2 AND query_type = $3 AND hour_bucket = $4
                AND sample_count >= $5",
            &[
                &tx.tenant_id(),
                &bucket.key_id,
                &bucket.query_type,
                &bucket.hour,
                &rule.min_samples,
            ],
        )
        .await?
        .map(|row| row.get(0)))
}

/// Records that a recall in `bucket` returned `results` fragments and moves
/// the floor if the average calls for it.
pub async fn observe(
    tx: &TenantTx<'_>,
    bucket: Bucket<'_>,
    results: i32,
    rule: &FloorRule,
) -> Result<()> {
    tx.execute(
        "INSERT INTO mneme.search_param_thresholds AS t
             (tenant_id, key_id, query_type, hour_bucket, min_similarity, sample_count,
              total_result_count)
         VALUES ($1, $2, $3, $4, $5, 1, $6)
         ON CONFLICT (tenant_id, key_id, query_type, hour_bucket) DO UPDATE SET
             sample_count = t.sample_count + 1,
             total_result_count = t.total_result_count + $6,
             min_similarity = CASE
                 WHEN t.sample_count + 1 < $7 THEN t.min_similarity
                 WHEN (t.total_result_count + $6)::float8 / (t.sample_count + 1) < $8
                     THEN GREATEST($10, t.min_similarity - $12)
                 WHEN (t.total_result_count + $6)::float8 / (t.sample_count + 1) > $9
                     THEN LEAST($11, t.min_similarity + $12)
                 ELSE t.min_similarity END,
             updated_at = now()",
        &[
            &tx.tenant_id(),
            &bucket.key_id,
            &bucket.query_type,
            &bucket.hour,
            &rule.start,
            &i64::from(results),
            &rule.min_samples,
            &FEW_RESULTS,
            &MANY_RESULTS,
            &rule.min,
            &rule.max,
            &STEP,
        ],
    )
    .await?;
    Ok(())
}
