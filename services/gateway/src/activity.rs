//! The activity log of MCP sessions, for automatic reflection (the remember
//! service's `auto_reflect` reads it): one entry per tool call of a
//! session, written after the call and off its path, so a slow or absent
//! Redis costs the call nothing.

use std::time::Duration;

use mneme_cache::{ActivityEntry, ActivityOwner, Cache, SessionLifetime};
use mneme_config::AutoReflectConfig;
use mneme_core::Principal;
use rmcp::model::JsonObject;
use tokio_util::task::TaskTracker;

/// Characters of a call's arguments kept in its entry.
const DETAIL_CHARS: usize = 300;

/// Writes sessions' activity.
#[derive(Debug, Clone)]
pub(crate) struct ActivityLog {
    cache: Cache,
    bound: usize,
    ttl: Duration,
    idle: Duration,
    /// How long sessions live unused: one that expires is over, and due
    /// for reflection then rather than after the idle period.
    lifetime: SessionLifetime,
    /// The writes in flight, which a stopping gateway lets finish.
    writes: TaskTracker,
}

impl ActivityLog {
    /// `None` when automatic reflection is off or has no language model
    /// to ask (then a log would only cost Redis writes).
    pub(crate) fn new(
        cache: Cache,
        config: &AutoReflectConfig,
        has_model: bool,
        lifetime: SessionLifetime,
        writes: TaskTracker,
    ) -> Option<Self> {
        (config.enabled && has_model).then(|| Self {
            cache,
            bound: config.log_entries,
            ttl: config.log_ttl(),
            idle: config.idle,
            lifetime,
            writes,
        })
    }

    /// What a call was about: its arguments as compact JSON, cut to twice
    /// [`DETAIL_CHARS`] (the rest of the work, off the call's path, is in
    /// [`ActivityLog::record`]).
    pub(crate) fn detail(arguments: &JsonObject) -> String {
        let json = serde_json::to_string(arguments).unwrap_or_default();
        cut(json, 2 * DETAIL_CHARS)
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
            detail: String::new(),
            failed,
        };
        let log = self.clone();
        self.writes.spawn(async move {
            let entry = ActivityEntry {
                detail: stored_detail(&detail),
                ..entry
            };
            let logged = async {
                let first_ms = log
                    .cache
                    .record_activity(&session, &owner, &entry, log.bound, log.ttl)
                    .await?;
                log.cache
                    .reflect_after(
                        &session,
                        due_after(log.idle, log.lifetime, first_ms, entry.at_ms),
                    )
                    .await
            };
            if let Err(error) = logged.await {
                tracing::debug!(%error, "session activity not logged");
            }
        });
    }
}

/// A call's detail as logged: secrets redacted, then cut to
/// [`DETAIL_CHARS`] (redacted first, so a secret is never cut into a shape
/// the patterns no longer know).
fn stored_detail(raw: &str) -> String {
    cut(mneme_core::redact::redact(raw, false).text, DETAIL_CHARS)
}

/// `text` cut to `chars` characters, marked with `…` when it was longer.
fn cut(text: String, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// When a session whose first logged call was at `first_ms` is due for
/// reflection after a call at `at_ms`: after the `idle` period, or when the
/// session expires if that is sooner (its lifetime grows with its age, see
/// [`SessionLifetime`]).
fn due_after(idle: Duration, lifetime: SessionLifetime, first_ms: i64, at_ms: i64) -> i64 {
    let age = Duration::from_millis(u64::try_from(at_ms - first_ms).unwrap_or(0));
    let wait = idle.min(lifetime.at_age(age));
    at_ms.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_session_is_due_after_the_idle_period_or_when_it_expires() {
        let idle = Duration::from_secs(86_400);
        let lifetime = SessionLifetime {
            min: Duration::from_secs(3_600),
            max: Duration::from_secs(30 * 86_400),
        };
        let hour = 3_600_000;
        // A session of one call lives an hour: it is over then.
        assert_eq!(due_after(idle, lifetime, 0, 0), hour);
        // Three hours in, it has six hours left.
        assert_eq!(due_after(idle, lifetime, 0, 3 * hour), 9 * hour);
        // A long session lives longer than the idle period.
        assert_eq!(due_after(idle, lifetime, 0, 100 * hour), 124 * hour);
    }

    #[test]
    fn details_are_compact_redacted_and_cut() {
        let stored = |arguments: serde_json::Value| {
            stored_detail(&ActivityLog::detail(arguments.as_object().unwrap()))
        };
        let detail =
            stored(json!({"query": "deploy", "token": "ghp_0123456789abcdefghijABCDEFGHIJ012345"}));
        assert!(detail.starts_with(r#"{"query":"deploy""#), "{detail}");
        assert!(!detail.contains("ghp_0123456789"), "{detail}");
        let long = ActivityLog::detail(json!({"text": "가".repeat(4000)}).as_object().unwrap());
        assert_eq!(
            long.chars().count(),
            2 * DETAIL_CHARS + 1,
            "cut on the call's path"
        );
        let detail = stored(json!({"text": "가".repeat(400)}));
        assert_eq!(detail.chars().count(), DETAIL_CHARS + 1);
        assert!(detail.ends_with('…'));
    }
}
