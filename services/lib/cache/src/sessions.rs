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

/// Reads the record and, when it exists, extends both session keys by `ttl`
/// in the same step (sliding expiry).
const TOUCH: &str = r#"
local record = redis.call('GET', KEYS[1])
if record then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
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

    /// True while the client is connected to Redis. Callers skip Redis when
    /// it is not, instead of waiting for each command to time out.
    pub fn is_connected(&self) -> bool {
        self.client.is_connected()
    }

    /// The session's record, extending its lifetime by `ttl`.
    pub async fn touch_session(
        &self,
        id: &str,
        ttl: Duration,
    ) -> Result<Option<SessionRecord>, CacheError> {
        let (record, init) = self.session_keys(id);
        let script = fred::types::scripts::Script::from_lua(TOUCH);
        let raw: Option<String> = script
            .evalsha_with_reload(&self.client, vec![record, init], vec![millis(ttl)])
            .await?;
        Ok(raw.and_then(|raw| {
            serde_json::from_str(&raw)
                .inspect_err(|error| tracing::warn!(%error, "unreadable session record"))
                .ok()
        }))
    }

    /// Writes (or replaces) the session's record.
    pub async fn put_session(
        &self,
        id: &str,
        record: &SessionRecord,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let (key, _) = self.session_keys(id);
        let value = serde_json::to_string(record).expect("a session record serializes");
        self.client
            .set::<(), _, _>(key, value, Some(Expiration::PX(millis(ttl))), None, false)
            .await?;
        // The tenant's index of sessions, for the admin dashboard. Entries
        // whose record expired are dropped when the index is read.
        let index = self.key(&["tsess", &record.tenant_id]);
        let _: () = self
            .client
            .zadd(
                &index,
                None,
                None,
                false,
                false,
                (record.created_at_ms as f64, id),
            )
            .await?;
        let _: () = self.client.pexpire(&index, millis(ttl), None).await?;
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
            .client
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
            let pipeline = self.client.pipeline();
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
            let _: () = self.client.zrem(&index, gone).await?;
        }
        Ok(sessions)
    }

    /// The record of a session, without extending it.
    pub async fn session_record(&self, id: &str) -> Result<Option<SessionRecord>, CacheError> {
        let (key, _) = self.session_keys(id);
        let raw: Option<String> = self.client.get(key).await?;
        Ok(raw.and_then(|raw| serde_json::from_str(&raw).ok()))
    }

    /// The transport's saved state of the session (rmcp's `SessionState`,
    /// as JSON).
    pub async fn session_state(&self, id: &str) -> Result<Option<String>, CacheError> {
        let (_, init) = self.session_keys(id);
        Ok(self.client.get(init).await?)
    }

    pub async fn put_session_state(
        &self,
        id: &str,
        state: &str,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        let (_, init) = self.session_keys(id);
        self.client
            .set::<(), _, _>(init, state, Some(Expiration::PX(millis(ttl))), None, false)
            .await?;
        Ok(())
    }

    pub async fn delete_session_state(&self, id: &str) -> Result<(), CacheError> {
        let (_, init) = self.session_keys(id);
        self.client.del::<(), _>(init).await?;
        Ok(())
    }

    /// The live session last bound to a credential, by the credential's
    /// hash (never the credential).
    pub async fn credential_session(
        &self,
        credential_hash: &str,
    ) -> Result<Option<String>, CacheError> {
        Ok(self.client.get(self.key(&["tok", credential_hash])).await?)
    }

    pub async fn bind_credential_session(
        &self,
        credential_hash: &str,
        session_id: &str,
        ttl: Duration,
    ) -> Result<(), CacheError> {
        self.client
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
        self.client
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
        Ok(self.client.getdel(self.oauth_code_key(code_hash)).await?)
    }
}
