//! MCP sessions in Redis: mneme's record of each session (who it belongs
//! to, its negotiated protocol version and mode), the rmcp state that lets
//! any pod replay the session's `initialize`, and the map from a hashed
//! bearer credential to its live session.
//!
//! Keys: `sess:{<id>}` (the record), `sess:{<id>}:init` (rmcp's state),
//! `tok:<credential hash>` (session id). The braces keep a session's two
//! keys in one Redis Cluster slot. Unlike the caches, these calls report
//! Redis failures: the gateway must tell "no such session" from "Redis is
//! down" to choose between recovery and degraded service.

use std::time::Duration;

use fred::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Cache, CacheError};

/// mneme's record of one MCP session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub tenant_id: String,
    pub key_id: String,
    /// The protocol version negotiated by `initialize` (or assumed when the
    /// session was recovered).
    pub protocol_version: String,
    pub mode: Option<String>,
    pub created_at_ms: i64,
    /// Set by `DELETE`: the id answers 404 until the record expires.
    #[serde(default)]
    pub closed: bool,
}

/// Sessions read per Redis round trip when listing a tenant's sessions.
const SESSION_LIST_CHUNK: usize = 256;

/// How long a session lives without being used. A new session gets `min`;
/// each use extends its life to twice its age, within `[min, max]`. Hosts
/// that open a session per call (claude.ai, ChatGPT) leave sessions that
/// are gone within `min`, while a session in use for days keeps days of
/// slack. An expired id is recreated on its next use (same-id recovery),
/// so the client never notices either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLifetime {
    pub min: Duration,
    pub max: Duration,
}

impl SessionLifetime {
    /// The time left to a session of this age when it is used now.
    pub fn at_age(&self, age: Duration) -> Duration {
        age.saturating_mul(2)
            .clamp(self.min, self.max.max(self.min))
    }

    /// When a session created at `created_ms` with `left` to live was last
    /// used, as of `now_ms` (both Unix milliseconds): the inverse of
    /// [`SessionLifetime::at_age`].
    pub fn last_use_ms(&self, created_ms: i64, now_ms: i64, left: Duration) -> i64 {
        let left = millis(left);
        let (min, max) = (millis(self.min), millis(self.max.max(self.min)));
        // Used at t, it was given clamp(2 (t - created), min, max), of
        // which now - t have passed.
        let candidates = [
            now_ms - (min - left),
            now_ms - (max - left),
            (left + 2 * created_ms + now_ms) / 3,
        ];
        candidates
            .into_iter()
            .filter(|t| *t >= created_ms && *t <= now_ms)
            .min_by_key(|t| {
                let given = (2 * (t - created_ms)).clamp(min, max);
                (given - (now_ms - t) - left).abs()
            })
            .unwrap_or(now_ms)
    }
}

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
}

/// Reads the record and, when it exists, gives both session keys the
/// lifetime of [`SessionLifetime::at_age`] in the same step. ARGV: min and
/// max lifetime and now, in milliseconds.
const TOUCH: &str = r#"
local record = redis.call('GET', KEYS[1])
if record then
  local ttl = tonumber(ARGV[1])
  local ok, decoded = pcall(cjson.decode, record)
  if ok and type(decoded) == 'table' and tonumber(decoded.created_at_ms) then
    local age = tonumber(ARGV[3]) - tonumber(decoded.created_at_ms)
    ttl = math.min(math.max(2 * age, tonumber(ARGV[1])), tonumber(ARGV[2]))
  end
  ttl = math.floor(ttl)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return record
"#;

fn millis(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

impl Cache {
    fn session_keys(&self, id: &str) -> (String, String) {
        let record = self.key(&["sess", &format!("{{{id}}}")]);
        let init = format!("{record}:init");
        (record, init)
    }

    /// The session's record, its lifetime extended as a use of it.
    pub async fn touch_session(
        &self,
        id: &str,
        lifetime: SessionLifetime,
    ) -> Result<Option<SessionRecord>, CacheError> {
        let (record, init) = self.session_keys(id);
        let script = fred::types::scripts::Script::from_lua(TOUCH);
        let raw: Option<String> = script
            .evalsha_with_reload(
                self.live()?,
                vec![record, init],
                vec![
                    millis(lifetime.min),
                    millis(lifetime.max.max(lifetime.min)),
                    now_ms(),
                ],
            )
            .await?;
        Ok(raw.and_then(|raw| {
            serde_json::from_str(&raw)
                .inspect_err(|error| tracing::warn!(%error, "unreadable session record"))
                .ok()
        }))
    }

    /// Writes (or replaces) the session's record, as a use of it.
    pub async fn put_session(
        &self,
        id: &str,
        record: &SessionRecord,
        lifetime: SessionLifetime,
    ) -> Result<(), CacheError> {
        let now = now_ms();
        let age = Duration::from_millis(u64::try_from(now - record.created_at_ms).unwrap_or(0));
        let ttl = lifetime.at_age(age);
        let (key, _) = self.session_keys(id);
        let value = serde_json::to_string(record).expect("a session record serializes");
        self.live()?
            .set::<(), _, _>(key, value, Some(Expiration::PX(millis(ttl))), None, false)
            .await?;
        // The tenant's index of sessions, for the admin dashboard. Entries
        // whose record expired are dropped when the index is read.
        let index = self.key(&["tsess", &record.tenant_id]);
        let _: () = self
            .live()?
            .zadd(
                &index,
                None,
                None,
                false,
                false,
                (record.created_at_ms as f64, id),
            )
            .await?;
        // Entries older than the longest lifetime are gone for sure; the
        // index must not grow with every session a per-call host opened.
        let oldest = (now - millis(lifetime.max)) as f64;
        let _: () = self
            .live()?
            .zremrangebyscore(&index, f64::NEG_INFINITY, oldest)
            .await?;
        let _: () = self
            .live()?
            .pexpire(&index, millis(lifetime.max), None)
            .await?;
        Ok(())
    }

    /// The tenant's live sessions (at most `limit`, newest first), each with
    /// the time its record has left to live (so when it was last used).
    pub async fn tenant_sessions(
        &self,
        tenant_id: &str,
        limit: usize,
    ) -> Result<Vec<(String, SessionRecord, Duration)>, CacheError> {
        let index = self.key(&["tsess", tenant_id]);
        let ids: Vec<String> = self
            .live()?
            .zrange(
                &index,
                "+inf",
                "-inf",
                Some(fred::types::sorted_sets::ZSort::ByScore),
                true,
                None,
                false,
            )
            .await?;
        let mut sessions = Vec::new();
        let mut gone = Vec::new();
        // One round trip per chunk: each record and its remaining lifetime.
        for chunk in ids.chunks(SESSION_LIST_CHUNK) {
            let pipeline = self.live()?.pipeline();
            for id in chunk {
                let (key, _) = self.session_keys(id);
                let _: () = pipeline.get(&key).await?;
                let _: () = pipeline.pttl(&key).await?;
            }
            let answers: Vec<fred::types::Value> = pipeline.all().await?;
            for (id, answer) in chunk.iter().zip(answers.chunks(2)) {
                let record = answer[0]
                    .as_str()
                    .and_then(|raw| serde_json::from_str::<SessionRecord>(&raw).ok());
                match record {
                    Some(record) if !record.closed && record.tenant_id == tenant_id => {
                        if sessions.len() < limit {
                            let left = answer[1].as_i64().and_then(|ms| u64::try_from(ms).ok());
                            let left = Duration::from_millis(left.unwrap_or(0));
                            sessions.push((id.clone(), record, left));
                        }
                    }
                    _ => gone.push(id.clone()),
                }
            }
        }
        if !gone.is_empty() {
            let _: () = self.live()?.zrem(&index, gone).await?;
        }
        Ok(sessions)
    }

    /// The record of a session, without extending it.
    pub async fn session_record(&self, id: &str) -> Result<Option<SessionRecord>, CacheError> {
        let (key, _) = self.session_keys(id);
        let raw: Option<String> = self.live()?.get(key).await?;
        Ok(raw.and_then(|raw| serde_json::from_str(&raw).ok()))
    }

    /// The transport's saved state of the session (rmcp's `SessionState`,
    /// as JSON).
    pub async fn session_state(&self, id: &str) -> Result<Option<String>, CacheError> {
        let (_, init) = self.session_keys(id);
        Ok(self.live()?.get(init).await?)
    }

    pub async fn put_session_state(
        &self,
        id: &str,
        state: &str,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let (_, init) = self.session_keys(id);
        self.live()?
            .set::<(), _, _>(init, state, Some(Expiration::PX(millis(ttl))), None, false)
            .await?;
        Ok(())
    }

    pub async fn delete_session_state(&self, id: &str) -> Result<(), CacheError> {
        let (_, init) = self.session_keys(id);
        self.live()?.del::<(), _>(init).await?;
        Ok(())
    }

    /// The live session last bound to a credential, by the credential's
    /// hash (never the credential).
    pub async fn credential_session(
        &self,
        credential_hash: &str,
    ) -> Result<Option<String>, CacheError> {
        Ok(self
            .live()?
            .get(self.key(&["tok", credential_hash]))
            .await?)
    }

    pub async fn bind_credential_session(
        &self,
        credential_hash: &str,
        session_id: &str,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.live()?
            .set::<(), _, _>(
                self.key(&["tok", credential_hash]),
                session_id,
                Some(Expiration::PX(millis(ttl))),
                None,
                false,
            )
            .await?;
        Ok(())
    }
}

impl Cache {
    fn oauth_code_key(&self, code_hash: &str) -> String {
        self.key(&["oauth-code", code_hash])
    }

    /// Stores an authorization code's grant (by the code's hash) for `ttl`.
    pub async fn put_oauth_code(
        &self,
        code_hash: &str,
        grant: &str,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.live()?
            .set::<(), _, _>(
                self.oauth_code_key(code_hash),
                grant,
                Some(Expiration::PX(millis(ttl))),
                None,
                false,
            )
            .await?;
        Ok(())
    }

    /// Takes a code's grant: the first caller gets it, every later one
    /// `None` (codes work once).
    pub async fn take_oauth_code(&self, code_hash: &str) -> Result<Option<String>, CacheError> {
        Ok(self.live()?.getdel(self.oauth_code_key(code_hash)).await?)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::SessionLifetime;

    const HOUR: Duration = Duration::from_secs(3600);
    const LIFETIME: SessionLifetime = SessionLifetime {
        min: HOUR,
        max: Duration::from_secs(30 * 24 * 3600),
    };

    #[test]
    fn a_session_lives_twice_its_age_within_the_bounds() {
        assert_eq!(LIFETIME.at_age(Duration::ZERO), HOUR);
        assert_eq!(LIFETIME.at_age(Duration::from_secs(60)), HOUR);
        assert_eq!(LIFETIME.at_age(5 * HOUR), 10 * HOUR);
        assert_eq!(LIFETIME.at_age(1000 * HOUR), LIFETIME.max);
    }

    #[test]
    fn the_last_use_is_recovered_from_the_time_left() {
        let created = 1_700_000_000_000_i64;
        let hour_ms = 3_600_000_i64;
        // (age at the last use, time since) in hours, over all three regimes.
        for (age, since) in [
            (0, 0.0),
            (0, 0.5),
            (3, 1.0),
            (10, 4.0),
            (400, 2.0),
            (2000, 100.0),
        ] {
            let used = created + age * hour_ms;
            let now = used + (since * hour_ms as f64) as i64;
            let given = LIFETIME.at_age(Duration::from_millis((used - created) as u64));
            let left = given - Duration::from_millis((now - used) as u64);
            let found = LIFETIME.last_use_ms(created, now, left);
            assert!(
                (found - used).abs() <= 1,
                "age {age} h, {since} h ago: {found} != {used}"
            );
        }
    }
}
