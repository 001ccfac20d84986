//! `get_skill_guide`: how to use mneme well, by section. The text lives in
//! `guide.md` next to this file, one `## section` per heading.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use mneme_core::Error;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::kinds::wire_name;
use super::{ToolContext, ToolSpec};

const GUIDE: &str = include_str!("guide.md");

/// The guide's sections by name, in file order.
static SECTIONS: LazyLock<BTreeMap<String, String>> = LazyLock::new(|| {
    let mut sections = BTreeMap::new();
    for part in GUIDE.split("\n## ").map(|p| p.trim_start_matches("## ")) {
        if let Some((name, body)) = part.split_once('\n') {
            sections.insert(name.trim().to_owned(), body.trim().to_owned());
        }
    }
    sections
});

/// Sections of the guide.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Section {
    Overview,
    Lifecycle,
    Keywords,
    Search,
    Episode,
    Multiplatform,
    Tools,
    Importance,
    Experiential,
    Triggers,
    Antipatterns,
}

/// Arguments of `get_skill_guide`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GuideArgs {
    /// The section to read (default `overview`).
    pub section: Option<Section>,
}

/// Result of `get_skill_guide`.
#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct GuideResult {
    pub section: String,
    pub content: String,
    /// The other sections there are.
    pub sections: Vec<String>,
}

pub(super) fn tools() -> Vec<ToolSpec> {
    vec![
        ToolSpec::new(
            "get_skill_guide",
            "Memory skill guide",
            "How to use mneme well: when to remember and recall, writing good memories, \
         importance, episodes, search options, and mistakes to avoid. One section at a time.",
            guide,
        )
        .example(json!({"section": "importance"})),
    ]
}

async fn guide(_context: ToolContext, args: GuideArgs) -> Result<GuideResult, Error> {
    let name = wire_name(args.section.unwrap_or(Section::Overview));
    let content = SECTIONS.get(&name).cloned().ok_or_else(|| {
        tracing::error!(section = %name, "the guide lacks a section");
        Error::internal()
    })?;
    Ok(GuideResult {
        section: name,
        content,
        sections: SECTIONS.keys().cloned().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_has_text_in_the_guide() {
        let all = [
            Section::Overview,
            Section::Lifecycle,
            Section::Keywords,
            Section::Search,
            Section::Episode,
            Section::Multiplatform,
            Section::Tools,
            Section::Importance,
            Section::Experiential,
            Section::Triggers,
            Section::Antipatterns,
        ];
        for section in all {
            let name = wire_name(section);
            assert!(
                SECTIONS.get(&name).is_some_and(|text| text.len() > 100),
                "{name}"
            );
        }
        assert_eq!(SECTIONS.len(), all.len(), "{:?}", SECTIONS.keys());
    }
}
