//! What a page of results carries besides the fragments themselves: their
//! strongest links, the surrounding context, and (in case mode) the cases
//! they belong to. Everything attached is limited to what the caller can
//! read, link previews included.

use std::collections::HashMap;

use mneme_core::Result;
use mneme_proto::v1::{
    CaseEventView, LinkedFragment, NearbyFragment, RecalledCase, RecalledFragment,
};
use mneme_store::{TenantTx, cases, fragments, links};
use uuid::Uuid;

use crate::query::Query;

/// Links attached per result.
const LINKS_PER_RESULT: i64 = 3;
/// Characters of a linked or nearby fragment shown.
const PREVIEW_CHARS: usize = 60;
/// Nearby fragments: same session, within this many minutes.
const NEARBY_MINUTES: f64 = 30.0;
const NEARBY_PER_RESULT: i64 = 3;
/// Events listed per case.
const EVENTS_PER_CASE: i64 = 20;

fn preview(content: &str) -> String {
    let mut preview: String = content.chars().take(PREVIEW_CHARS).collect();
    if content.chars().count() > PREVIEW_CHARS {
        preview.push('…');
    }
    preview
}

/// Attaches links and context to `page` and returns its cases.
pub(crate) async fn enrich(
    tx: &TenantTx<'_>,
    query: &Query,
    page: &mut [RecalledFragment],
) -> Result<Vec<RecalledCase>> {
    let ids: Vec<Uuid> = page.iter().filter_map(|f| f.id.parse().ok()).collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    if query.include_links {
        attach_links(tx, query, page, &ids).await?;
    }
    if query.include_context {
        let nearby =
            fragments::nearby(tx, &query.key_ids, &ids, NEARBY_MINUTES, NEARBY_PER_RESULT).await?;
        for (anchor, neighbor, content) in nearby {
            if let Some(fragment) = page.iter_mut().find(|f| f.id == anchor.to_string()) {
                fragment.nearby.push(NearbyFragment {
                    id: neighbor.to_string(),
                    preview: preview(&content),
                });
            }
        }
    }
    if query.case_mode {
        return cases_of(tx, query, page).await;
    }
    Ok(Vec::new())
}

async fn attach_links(
    tx: &TenantTx<'_>,
    query: &Query,
    page: &mut [RecalledFragment],
    ids: &[Uuid],
) -> Result<()> {
    let found = links::around(
        tx,
        &query.key_ids,
        ids,
        Some(&query.link_relations),
        LINKS_PER_RESULT,
    )
    .await?;
    let others: Vec<Uuid> = found.iter().map(|l| l.other).collect();
    let contents: HashMap<Uuid, String> = fragments::fetch(tx, &query.key_ids, &others)
        .await?
        .into_iter()
        .map(|f| (f.id, f.content))
        .collect();
    for link in found {
        let anchor = link.anchor.to_string();
        let (Some(fragment), Some(content)) = (
            page.iter_mut().find(|f| f.id == anchor),
            contents.get(&link.other),
        ) else {
            continue;
        };
        fragment.linked.push(LinkedFragment {
            id: link.other.to_string(),
            relation_type: link.relation_type,
            weight: link.weight,
            preview: preview(content),
            direction: if link.outgoing {
                "outgoing"
            } else {
                "incoming"
            }
            .into(),
        });
    }
    Ok(())
}

/// The cases of the page's fragments, best first, with their events.
async fn cases_of(
    tx: &TenantTx<'_>,
    query: &Query,
    page: &[RecalledFragment],
) -> Result<Vec<RecalledCase>> {
    let mut order: Vec<(String, f64)> = Vec::new();
    for fragment in page {
        if let Some(case_id) = &fragment.case_id
            && !order.iter().any(|(c, _)| c == case_id)
        {
            order.push((case_id.clone(), fragment.score));
        }
    }
    order.truncate(query.max_cases);
    let case_ids: Vec<String> = order.iter().map(|(c, _)| c.clone()).collect();
    let summaries = cases::summaries(tx, &query.key_ids, &case_ids).await?;
    let mut result = Vec::with_capacity(order.len());
    for (case_id, relevance) in order {
        let Some(summary) = summaries.iter().find(|s| s.case_id == case_id) else {
            continue;
        };
        let events =
            cases::events(tx, &query.key_ids, Some(&case_id), None, EVENTS_PER_CASE).await?;
        result.push(RecalledCase {
            case_id,
            goal: summary.goal.clone(),
            outcome: summary.outcome.clone(),
            resolution_status: summary.resolution_status.clone(),
            events: events
                .into_iter()
                .map(|e| CaseEventView {
                    event_type: e.event_type,
                    summary: e.summary,
                    created_at_unix_ms: e.created_at.timestamp_millis(),
                })
                .collect(),
            fragment_count: u32::try_from(summary.fragment_count).unwrap_or(u32::MAX),
            relevance,
        });
    }
    Ok(result)
}
