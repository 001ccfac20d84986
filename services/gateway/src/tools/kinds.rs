//! Enumerations shared by several tools' arguments and results.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Kinds of fragments.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum FragmentKind {
    Fact,
    Decision,
    Error,
    Preference,
    Procedure,
    Relation,
    Episode,
}

impl FragmentKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Fact => "fact",
            Self::Decision => "decision",
            Self::Error => "error",
            Self::Preference => "preference",
            Self::Procedure => "procedure",
            Self::Relation => "relation",
            Self::Episode => "episode",
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Scope {
    Permanent,
    Session,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ResolutionStatusArg {
    Open,
    Resolved,
    Abandoned,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AssertionStatusArg {
    Observed,
    Inferred,
    Verified,
    Rejected,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AffectArg {
    Neutral,
    Frustration,
    Confidence,
    Surprise,
    Doubt,
    Satisfaction,
}

/// The wire name of a unit-variant enum argument.
pub(crate) fn wire_name(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}
