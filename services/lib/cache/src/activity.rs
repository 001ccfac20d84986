//! Each MCP session's activity log, for automatic reflection.
//!
//! The gateway appends one entry per tool call ([`Cache::record_activity`])
//! and says when the session is due for reflection if nothing else happens
//! ([`Cache::reflect_after`]: after the idle period, or sooner when the
//! session itself expires); the log is bounded (the newest entries stay)
//! and expires with its TTL. A global index orders sessions by that time,
//! so the remember service finds the due ones ([`Cache::due_sessions`]);
//! [`Cache::close_activity`] makes a closed session due at once. Once a
//! stretch of activity is reflected, [`Cache::settle_activity`] drops it,
//! keeping anything recorded since.
//!
//! Keys: `act:{<session>}` (the entries, oldest first), `act:{<session>}:meta`
//! (owner, first and last activity), `actdue` (session → when it is due, in
//! Unix ms; 0 once closed). The braces keep a session's keys in one Redis
//! Cluster slot, so each script touches one slot. Losing the log loses a
//! reflection, never a memory; the calls report Redis failures so the
//! reflector can tell "nothing to do" from "cannot see".

use std::time::Duration;

use fred::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Cache, CacheError};

/// Whose session it is: the identity its reflection is written as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityOwner {
    pub tenant_id: String,
    pub key_id: String,
    pub agent_id: String,
    pub workspace: Option<String>,
}

/// One tool call of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityEntry {
    pub at_ms: i64,
    pub tool: String,
    /// What the call was about (its arguments, shortened and redacted).
    pub detail: String,
    /// The call failed.
    #[serde(default)]
    pub failed: bool,
}

/// A session's log as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionActivity {
    pub owner: ActivityOwner,
    pub first_ms: i64,
    pub last_ms: i64,
    /// Oldest first; at most the log's bound.
    pub entries: Vec<ActivityEntry>,
}

/// Appends ARGV[1] (an entry at ARGV[4] ms) to the log KEYS[1], keeps the
/// newest ARGV[2] entries, and updates the meta hash KEYS[2] (owner ARGV[5],
/// first and last activity); both live ARGV[3] ms.
const RECORD: &str = r#"
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('HSETNX', KEYS[2], 'first_ms', ARGV[4])
local last = tonumber(redis.call('HGET', KEYS[2], 'last_ms') or '0')
if tonumber(ARGV[4]) > last then
  redis.call('HSET', KEYS[2], 'last_ms', ARGV[4])
end
redis.call('HSET', KEYS[2], 'owner', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return tonumber(redis.call('HGET', KEYS[2], 'first_ms'))
"#;

/// Drops the entries of log KEYS[1] recorded at or before ARGV[1] ms. When
/// none are left the meta hash KEYS[2] goes too (returns 1); otherwise the
/// first activity moves to the oldest remaining entry (returns 0).
const SETTLE: &str = r#"
local entries = redis.call('LRANGE', KEYS[1], 0, -1)
local until_ms = tonumber(ARGV[1])
local settled = 0
local first = nil
for _, raw in ipairs(entries) do
  local ok, entry = pcall(cjson.decode, raw)
  local at = ok and type(entry) == 'table' and tonumber(entry.at_ms) or 0
  if first == nil and at <= until_ms then
    settled = settled + 1
  elseif first == nil then
    first = at
  end
end
if first == nil then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
redis.call('LTRIM', KEYS[1], settled, -1)
redis.call('HSET', KEYS[2], 'first_ms', first)
return 0
"#;

/// Removes ARGV[1] from the index KEYS[1] unless new activity moved its
/// due time past ARGV[2] ms.
const UNINDEX: &str = r#"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return 1
"#;

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis())
        .unwrap_or(i64::MAX)
        .max(1)
}

impl Cache {
    fn activity_keys(&self, session: &str) -> (String, String) {
        let log = self.key(&["act", &format!("{{{session}}}")]);
        let meta = format!("{log}:meta");
        (log, meta)
    }

    fn activity_index(&self) -> String {
        self.key(&["actdue"])
    }

    /// Appends `entry` to `session`'s log (keeping the newest `bound`
    /// entries, for `ttl`); returns when the session's first logged call
    /// was (Unix ms).
    pub async fn record_activity(
        &self,
        session: &str,
        owner: &ActivityOwner,
        entry: &ActivityEntry,
        bound: usize,
        ttl: Duration,
    ) -> Result<i64, CacheError> {
        let (log, meta) = self.activity_keys(session);
        let script = fred::types::scripts::Script::from_lua(RECORD);
        let first_ms: i64 = script
            .evalsha_with_reload(
                self.live()?,
                vec![log, meta],
                vec![
                    serde_json::to_string(entry).expect("an activity entry serialises"),
                    bound.max(1).to_string(),
                    millis(ttl).to_string(),
                    entry.at_ms.to_string(),
                    serde_json::to_string(owner).expect("an activity owner serialises"),
                ],
            )
            .await?;
        Ok(first_ms)
    }

    /// Makes `session` due for reflection at `due_ms` (Unix ms), unless it
    /// is already due later.
    pub async fn reflect_after(&self, session: &str, due_ms: i64) -> Result<(), CacheError> {
        let _: () = self
            .live()?
            .zadd(
                self.activity_index(),
                None,
                Some(fred::types::sorted_sets::Ordering::GreaterThan),
                false,
                false,
                (due_ms as f64, session),
            )
            .await?;
        Ok(())
    }

    /// Makes a closed session due for reflection at once (if it has any
    /// activity).
    pub async fn close_activity(&self, session: &str) -> Result<(), CacheError> {
        let _: () = self
            .live()?
            .zadd(
                self.activity_index(),
                Some(SetOptions::XX),
                None,
                false,
                false,
                (0.0, session),
            )
            .await?;
        Ok(())
    }

    /// Up to `limit` sessions due for reflection at `now_ms`, longest due
    /// first, each with its due time (for [`Cache::settle_activity`]).
    pub async fn due_sessions(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<(String, i64)>, CacheError> {
        let due: Vec<(String, f64)> = self
            .live()?
            .zrangebyscore(
                self.activity_index(),
                f64::NEG_INFINITY,
                now_ms as f64,
                true,
                Some((0, i64::try_from(limit).unwrap_or(i64::MAX))),
            )
            .await?;
        Ok(due
            .into_iter()
            .map(|(session, due)| (session, due as i64))
            .collect())
    }

    /// `session`'s log, or `None` when it has none (expired, or settled).
    pub async fn session_activity(
        &self,
        session: &str,
    ) -> Result<Option<SessionActivity>, CacheError> {
        let (log, meta) = self.activity_keys(session);
        let pipeline = self.live()?.pipeline();
        let _: () = pipeline
            .hmget(&meta, vec!["owner", "first_ms", "last_ms"])
            .await?;
        let _: () = pipeline.lrange(&log, 0, -1).await?;
        let (fields, raw): (Vec<Option<String>>, Vec<String>) = pipeline.all().await?;
        let [Some(owner), Some(first), Some(last)] = fields.as_slice() else {
            return Ok(None);
        };
        let Ok(owner) = serde_json::from_str::<ActivityOwner>(owner) else {
            tracing::warn!("unreadable session activity owner");
            return Ok(None);
        };
        let entries: Vec<ActivityEntry> = raw
            .iter()
            .filter_map(|entry| serde_json::from_str(entry).ok())
            .collect();
        Ok(Some(SessionActivity {
            owner,
            first_ms: first.parse().unwrap_or(0),
            last_ms: last.parse().unwrap_or(0),
            entries,
        }))
    }

    /// Drops `session`'s activity up to `until_ms` (it was reflected or
    /// skipped); activity recorded since stays and keeps the session due
    /// later. `due_ms` is the due time the session was taken at.
    pub async fn settle_activity(
        &self,
        session: &str,
        until_ms: i64,
        due_ms: i64,
    ) -> Result<(), CacheError> {
        let (log, meta) = self.activity_keys(session);
        let script = fred::types::scripts::Script::from_lua(SETTLE);
        let emptied: i64 = script
            .evalsha_with_reload(self.live()?, vec![log, meta], vec![until_ms.to_string()])
            .await?;
        if emptied == 1 {
            let script = fred::types::scripts::Script::from_lua(UNINDEX);
            let _: i64 = script
                .evalsha_with_reload(
                    self.live()?,
                    vec![self.activity_index()],
                    vec![session.to_owned(), due_ms.to_string()],
                )
                .await?;
        }
        Ok(())
    }

    /// Takes `session` out of the index (its log is gone).
    pub async fn forget_activity(&self, session: &str) -> Result<(), CacheError> {
        let _: () = self.live()?.zrem(self.activity_index(), session).await?;
        Ok(())
    }
}
