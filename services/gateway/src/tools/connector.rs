//! `search` and `fetch`: the two tools ChatGPT connectors and deep research
//! require, in OpenAI's exact shapes. Each result carries a `url` so
//! ChatGPT can cite it; the URL opens the memory at mneme's endpoint.

use mneme_core::Error;
use mneme_proto::v1;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{EXAMPLE_FRAGMENT_ID, ToolContext, ToolSpec};

/// Results of one `search`.
const SEARCH_RESULTS: u32 = 10;
/// Characters of content used as a result's title.
const TITLE_CHARS: usize = 80;

/// Arguments of `search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    /// What to look for, in any language.
    pub query: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchHit {
    pub id: String,
    pub title: String,
    pub url: String,
}

/// Result of `search`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchResult {
    pub results: Vec<SearchHit>,
}

/// Arguments of `fetch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FetchArgs {
    /// An `id` returned by `search`.
    pub id: String,
}

/// What `fetch` adds about a memory.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FetchMetadata {
    pub topic: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub keywords: Vec<String>,
    pub importance: f32,
    pub created_at: String,
}

/// Result of `fetch`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct FetchResult {
    pub id: String,
    pub title: String,
    pub text: String,
    pub url: String,
    pub metadata: FetchMetadata,
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "search",
            "Search memories",
            "Search long-term memory and return matching memories as {id, title, url}. Use \
             `fetch` with an id for the full text.",
            search,
        )
        .example(json!({"query": "payments API rate limit"})),
        ToolSpec::new(
            "fetch",
            "Fetch a memory",
            "Return the full text of one memory found by `search`.",
            fetch,
        )
        .example(json!({"id": EXAMPLE_FRAGMENT_ID})),
    ]
}

fn title(content: &str) -> String {
    let mut title: String = content.chars().take(TITLE_CHARS).collect();
    if content.chars().count() > TITLE_CHARS {
        title.push('…');
    }
    title
}

fn url(context: &ToolContext, id: &str) -> String {
    format!("{}/memories/{id}", context.public_url)
}

async fn search(context: ToolContext, args: SearchArgs) -> Result<SearchResult, Error> {
    let query = args.query.trim();
    if query.is_empty() {
        return Err(Error::invalid_argument("query must not be empty"));
    }
    let response = context
        .backends
        .recall(
            &context.principal,
            v1::RecallRequest {
                text: Some(query.to_owned()),
                limit: Some(SEARCH_RESULTS),
                include_links: Some(false),
                exclude_seen: Some(false),
                ..v1::RecallRequest::default()
            },
        )
        .await?;
    Ok(SearchResult {
        results: response
            .fragments
            .into_iter()
            .map(|f| SearchHit {
                url: url(&context, &f.id),
                title: title(&f.content),
                id: f.id,
            })
            .collect(),
    })
}

async fn fetch(context: ToolContext, args: FetchArgs) -> Result<FetchResult, Error> {
    let f = context
        .backends
        .fetch(
            &context.principal,
            v1::FetchRequest {
                id: args.id,
                agent_id: None,
            },
        )
        .await?;
    Ok(FetchResult {
        url: url(&context, &f.id),
        title: title(&f.content),
        metadata: FetchMetadata {
            topic: f.topic,
            kind: f.r#type,
            keywords: f.keywords,
            importance: f.importance,
            created_at: super::recall::rfc3339(f.created_at_unix_ms),
        },
        text: f.content,
        id: f.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_titles_are_cut_with_an_ellipsis() {
        assert_eq!(title("short"), "short");
        let long = "가".repeat(100);
        let cut = title(&long);
        assert_eq!(cut.chars().count(), TITLE_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
