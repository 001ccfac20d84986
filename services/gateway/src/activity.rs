//! The activity log of MCP sessions, for automatic reflection (the remember
//! service's `auto_reflect` reads it): one entry per tool call of a
//! session, written after the call and off its path, so a slow or absent
//! Redis costs the call nothing.

use std::time::Duration;

use mneme_cache::{ActivityEntry, ActivityOwner, Cache};
use mneme_config::AutoReflectConfig;
use mneme_core::Principal;
use rmcp::model::JsonObject;

/// Characters of a call's arguments kept in its entry.
const DETAIL_CHARS: usize = 300;

/// Writes sessions' activity.
#[derive(Debug, Clone)]
pub(crate) struct ActivityLog {
    cache: Cache,
    bound: usize,
    ttl: Duration,
}

impl ActivityLog {
    /// `None` when automatic reflection is off or has no language model
    /// to ask (then a log would only cost Redis writes).
    pub(crate) fn new(cache: Cache, config: &AutoReflectConfig, has_model: bool) -> Option<Self> {
        (config.enabled && has_model).then(|| Self {
            cache,
            bound: config.log_entries,
            ttl: config.log_ttl(),
        })
    }

    /// What a call was about: its arguments as compact JSON, secrets
    /// redacted, cut to [`DETAIL_CHARS`].
    pub(crate) fn detail(arguments: &JsonObject) -> String {
        let json = serde_json::to_string(arguments).unwrap_or_default();
        let redacted = mneme_core::redact::redact(&json, false).text;
        match redacted.char_indices().nth(DETAIL_CHARS) {
            Some((cut, _)) => format!("{}…", &redacted[..cut]),
            None => redacted,
        }
    }

    /// Appends the call to its session's log (calls outside a session are
    /// not logged).
    pub(crate) fn record(&self, principal: &Principal, tool: &str, detail: String, failed: bool) {
        let Some(session) = principal.session_id.clone() else {
            return;
        };
        let owner = ActivityOwner {
            tenant_id: principal.tenant_id.to_string(),
            key_id: principal.key_id.to_string(),
            agent_id: principal.agent_id.clone(),
            workspace: principal.workspace.clone(),
        };
        let entry = ActivityEntry {
            at_ms: chrono::Utc::now().timestamp_millis(),
            tool: tool.to_owned(),
            detail,
            failed,
        };
        let (cache, bound, ttl) = (self.cache.clone(), self.bound, self.ttl);
        tokio::spawn(async move {
            if let Err(error) = cache
                .record_activity(&session, &owner, &entry, bound, ttl)
                .await
            {
                tracing::debug!(%error, "session activity not logged");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn details_are_compact_redacted_and_cut() {
        let arguments =
            json!({"query": "deploy", "token": "ghp_0123456789abcdefghijABCDEFGHIJ012345"});
        let detail = ActivityLog::detail(arguments.as_object().unwrap());
        assert!(detail.starts_with(r#"{"query":"deploy""#), "{detail}");
        assert!(!detail.contains("ghp_0123456789"), "{detail}");
        let long = json!({"text": "가".repeat(400)});
        let detail = ActivityLog::detail(long.as_object().unwrap());
        assert_eq!(detail.chars().count(), DETAIL_CHARS + 1);
        assert!(detail.ends_with('…'));
    }
}
