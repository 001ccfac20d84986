//! Tools of active surfacing: `stm_surfacing_feedback` (rate a block of
//! surfaced memories, or single memories of it) and `stm_surfacing_stats`
//! (how surfacing has been doing).

use chrono::{DateTime, Utc};
use mneme_core::Error;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{EXAMPLE_SURFACING_ID, ToolContext, ToolSpec};

/// Arguments of `stm_surfacing_feedback`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) struct FeedbackArgs {
    /// The `surfacing_id` of the `<surfaced-memories>` block.
    pub surfacing_id: String,
    /// One rating for the whole block (or, with `memory_id`, for one
    /// memory): helpful, partially_helpful, not_relevant or already_known.
    pub rating: Option<String>,
    /// With `rating`: the one memory of the block it rates.
    pub memory_id: Option<String>,
    /// Ratings of single memories of the block:
    /// `[{"memory_id": "…", "rating": "not_relevant"}]`. Use either this or
    /// `rating`.
    pub ratings: Option<Vec<MemoryRatingArg>>,
}

/// One memory's rating.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MemoryRatingArg {
    pub memory_id: String,
    pub rating: String,
}

/// Result of `stm_surfacing_feedback`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FeedbackResult {
    /// Ratings stored: new, or replacing this block's (or memory's) earlier
    /// rating. Each holds one rating, so a retried call counts once.
    pub recorded: usize,
    /// Ratings equal to the one already stored: nothing changed.
    pub unchanged: usize,
    /// Memories no longer surfaced for this tool (rated not_relevant or
    /// already_known one by one).
    pub invalidated: Vec<String>,
    /// The tool's new relevance threshold, when this rating moved it.
    pub threshold: Option<f32>,
}

/// Arguments of `stm_surfacing_stats`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) struct StatsArgs {
    /// Only this tool (`tool` or `server__tool`).
    pub tool: Option<String>,
    /// Only events since this time (RFC 3339).
    pub since: Option<String>,
    /// Recent events listed (default 10, at most 100).
    pub limit: Option<u32>,
}

/// Ratings by kind.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RatingCounts {
    pub helpful: i32,
    pub partially_helpful: i32,
    pub not_relevant: i32,
    pub already_known: i32,
}

/// One tool's figures.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolFigures {
    pub server: String,
    pub tool: String,
    pub events: i64,
    pub avg_memories: f64,
    pub ratings: RatingCounts,
    /// Share of ratings that were not_relevant or already_known.
    pub negative_share: Option<f64>,
    /// The tuned threshold (absent: the default applies).
    pub min_score: Option<f32>,
    pub adjustments: i32,
}

/// One recent event.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecentSurfacing {
    pub surfacing_id: String,
    pub server: String,
    pub tool: String,
    /// The query, its `sha256:` digest, or `<expired>` after the retention
    /// period.
    pub query: String,
    pub memories: usize,
    pub max_relevance: Option<f32>,
    pub created_at: String,
}

/// Result of `stm_surfacing_stats`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StatsResult {
    pub events: i64,
    pub ratings: RatingCounts,
    /// helpful / all ratings.
    pub helpfulness: Option<f64>,
    /// The default threshold (tools without a tuned one use it).
    pub default_min_score: f32,
    pub auto_tune: bool,
    pub tools: Vec<ToolFigures>,
    pub recent: Vec<RecentSurfacing>,
}

fn counts(c: mneme_store::surfacing::Counts) -> RatingCounts {
    RatingCounts {
        helpful: c.helpful,
        partially_helpful: c.partially_helpful,
        not_relevant: c.not_relevant,
        already_known: c.already_known,
    }
}

fn share(part: i32, total: i32) -> Option<f64> {
    (total > 0).then(|| f64::from(part) / f64::from(total))
}

pub(super) fn tools() -> Vec<ToolSpec> {
    let feedback = ToolSpec::new(
        "stm_surfacing_feedback",
        "Rate surfaced memories",
        "Rate a `<surfaced-memories>` block that mneme added to a tool result: the whole \
         block with `rating`, or single memories with `ratings`. Ratings: helpful, \
         partially_helpful, not_relevant, already_known. Memories rated not_relevant or \
         already_known stop being surfaced for that tool, and ratings tune how selective \
         surfacing is.",
        feedback,
    )
    // The same rating again changes nothing: each block and memory holds one.
    .writes(true)
    .example(json!({"surfacing_id": EXAMPLE_SURFACING_ID, "rating": "helpful"}));
    vec![
        feedback,
        ToolSpec::new(
            "stm_surfacing_stats",
            "Surfacing statistics",
            "How active surfacing has been doing: events, ratings and helpfulness per tool, \
             tuned thresholds, and the latest surfacings. Admin keys see the whole tenant, \
             other keys their own surfacings.",
            stats,
        )
        .example(json!({"tool": "builtin__read", "limit": 5})),
    ]
}

async fn feedback(context: ToolContext, args: FeedbackArgs) -> Result<FeedbackResult, Error> {
    let ratings = args
        .ratings
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null));
    let outcome = context
        .surfacer
        .feedback(
            &context.principal,
            args.surfacing_id.trim(),
            args.rating.as_deref(),
            args.memory_id.as_deref(),
            ratings.as_ref(),
        )
        .await?;
    Ok(FeedbackResult {
        recorded: outcome.recorded,
        unchanged: outcome.unchanged,
        invalidated: outcome.invalidated,
        threshold: outcome.threshold,
    })
}

async fn stats(context: ToolContext, args: StatsArgs) -> Result<StatsResult, Error> {
    let since = match args.since.as_deref() {
        None => None,
        Some(raw) => Some(
            DateTime::parse_from_rfc3339(raw)
                .map_err(|_| Error::invalid_argument("since must be an RFC 3339 time"))?
                .with_timezone(&Utc),
        ),
    };
    let limit = i64::from(args.limit.unwrap_or(10).clamp(1, 100));
    let stats = context
        .surfacer
        .stats(&context.principal, args.tool.as_deref(), since, limit)
        .await?;
    let settings = context.surfacer.settings();
    Ok(StatsResult {
        events: stats.events,
        helpfulness: share(stats.ratings.helpful, stats.ratings.total()),
        ratings: counts(stats.ratings),
        default_min_score: settings.min_score,
        auto_tune: settings.tuner_enabled,
        tools: stats
            .tools
            .into_iter()
            .map(|t| ToolFigures {
                negative_share: share(
                    t.ratings.not_relevant + t.ratings.already_known,
                    t.ratings.total(),
                ),
                ratings: counts(t.ratings),
                server: t.server,
                tool: t.tool,
                events: t.events,
                avg_memories: t.avg_memories,
                min_score: t.min_score,
                adjustments: t.adjustments,
            })
            .collect(),
        recent: stats
            .recent
            .into_iter()
            .map(|e| RecentSurfacing {
                surfacing_id: e.id,
                server: e.server,
                tool: e.tool,
                query: e.query.unwrap_or_else(|| "<expired>".to_owned()),
                memories: e.memories,
                max_relevance: e.max_relevance,
                created_at: e.created_at.to_rfc3339(),
            })
            .collect(),
    })
}
