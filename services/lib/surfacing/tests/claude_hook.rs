//! End to end over a recorded Claude Code payload: parse the hook event,
//! extract the query, render the block and wrap it as hook output.

use mneme_surfacing::extract::{Stage, Templates, extract_query};
use mneme_surfacing::hook::{claude_output, parse_claude_post_tool_use};
use mneme_surfacing::render::{BlockOptions, Memory, render_block};
use serde_json::Value;

const FIXTURE: &str = include_str!("fixtures/claude_post_tool_use_read.json");

#[test]
fn read_of_a_source_file_surfaces_a_block() {
    let payload: Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    let event = parse_claude_post_tool_use(&payload).expect("a surfaceable Read");

    let extracted = extract_query(
        &event.host,
        &event.tool_name,
        &event.tool_input,
        None,
        &Templates::default(),
        1,
    )
    .expect("the path carries signal");
    assert_eq!(extracted.stage, Stage::Path);
    assert_eq!(extracted.query, "project src auth jwt handler");

    let memories = [Memory {
        id: "0195f3c2-7a1e-7c44-9d0b-3e5f6a7b8c9d".to_owned(),
        content: "JWT signing keys rotate every 24h; verify against KEYS.previous too.".to_owned(),
        topic: Some("auth".to_owned()),
        source: None,
        relevance: 0.82,
    }];
    let options = BlockOptions {
        header: "## Relevant Memories",
        surfacing_id: None,
        feedback_tool: "stm_surfacing_feedback",
        floor: 0.3,
        max_chars: 1_500,
        preview_chars: 300,
    };
    let rendered = render_block(&memories, &options).expect("one memory fits");
    assert_eq!(rendered.delivered, [memories[0].id.clone()]);

    let output = claude_output(&rendered.block);
    let context = output["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("a string");
    assert!(context.starts_with("<surfaced-memories>\n## Relevant Memories\n"));
    assert!(
        context.contains(
            "- [strong] `0195f3c2-7a1e-7c44-9d0b-3e5f6a7b8c9d` **auth**: JWT signing keys"
        )
    );
    assert!(context.ends_with("</surfaced-memories>"));
}
