//! The proxy's own tool: `stm_proxy_read_more`, the further chunks of an
//! upstream result that was too long to return at once (compression
//! `progressive`).

use mneme_core::Error;
use serde_json::json;

use super::{ToolContext, ToolSpec};
use crate::proxy::{READ_MORE_TOOL, ReadMoreArgs, ReadMoreResult};

/// Stands for the key of a progressive result in the tool's example.
pub(crate) const EXAMPLE_PROGRESSIVE_KEY: &str = "<progressive key>";

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            READ_MORE_TOOL,
            "Read more of a long tool result",
            "Continue reading a proxied tool result that ended with a `[progressive: …]` \
             footer: pass the footer's `key` and `offset`. Each answer holds the next chunk \
             followed by a new footer; split every part on `\\n---\\n[progressive: chars=` \
             and join the pieces to rebuild the full result exactly. Keys expire after \
             30 minutes without a read and belong to the API key that received them. \
             `surfacedMemories`, when present, holds memories relevant to the original call \
             that were not shown before.",
            read_more,
        )
        .example(json!({"key": EXAMPLE_PROGRESSIVE_KEY, "offset": 4000})),
    ]
}

async fn read_more(context: ToolContext, args: ReadMoreArgs) -> Result<ReadMoreResult, Error> {
    context
        .proxy
        .read_more(&context.surfacer, &context.principal, args)
        .await
}
