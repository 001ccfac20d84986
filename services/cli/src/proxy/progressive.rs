//! Where the local proxy keeps the whole text of progressive results until
//! `stm_proxy_read_more` has read them.
//!
//! The hosted gateway keeps them in Redis per API key; the local proxy
//! serves one user in one process, so memory is enough: a map with a
//! 30-minute time-to-live that every read renews (the reference's contract)
//! and a cap of 200 entries that evicts the least recently used one, which
//! bounds memory however many long results an agent leaves unread.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an unread result is kept.
pub const TTL: Duration = Duration::from_secs(30 * 60);
/// How many results are kept at most.
pub const MAX_ENTRIES: usize = 200;

struct Entry {
    content: Arc<str>,
    last_used: Instant,
}

/// See the module documentation.
pub struct Store {
    entries: HashMap<String, Entry>,
    ttl: Duration,
    max_entries: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("entries", &self.entries.len())
            .field("ttl", &self.ttl)
            .field("max_entries", &self.max_entries)
            .finish()
    }
}

impl Default for Store {
    fn default() -> Self {
        Self::new(TTL, MAX_ENTRIES)
    }
}

impl Store {
    pub fn new(ttl: Duration, max_entries: usize) -> Self {
        Self {
            entries: HashMap::new(),
            ttl,
            max_entries: max_entries.max(1),
        }
    }

    fn expire(&mut self, now: Instant) {
        let ttl = self.ttl;
        self.entries
            .retain(|_, entry| now.duration_since(entry.last_used) < ttl);
    }

    /// Keeps `content` under `key`, evicting the least recently used entry
    /// when full. (A linear scan: 200 entries cost nothing next to the
    /// upstream call that produced the content.)
    pub fn insert(&mut self, key: String, content: &str) {
        let now = Instant::now();
        self.expire(now);
        while self.entries.len() >= self.max_entries {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.entries.insert(
            key,
            Entry {
                content: content.into(),
                last_used: now,
            },
        );
    }

    /// The content under `key`, renewing its time-to-live.
    pub fn get(&mut self, key: &str) -> Option<Arc<str>> {
        let now = Instant::now();
        self.expire(now);
        let entry = self.entries.get_mut(key)?;
        entry.last_used = now;
        Some(entry.content.clone())
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_entry_goes_first() {
        let mut store = Store::new(TTL, 2);
        store.insert("a".into(), "A");
        std::thread::sleep(Duration::from_millis(2));
        store.insert("b".into(), "B");
        std::thread::sleep(Duration::from_millis(2));
        // Reading `a` makes `b` the oldest.
        assert_eq!(store.get("a").as_deref(), Some("A"));
        std::thread::sleep(Duration::from_millis(2));
        store.insert("c".into(), "C");
        assert_eq!(store.len(), 2);
        assert!(store.get("b").is_none());
        assert_eq!(store.get("a").as_deref(), Some("A"));
        assert_eq!(store.get("c").as_deref(), Some("C"));
    }

    #[test]
    fn entries_expire_unless_read() {
        let mut store = Store::new(Duration::from_millis(50), 10);
        store.insert("a".into(), "A");
        store.insert("b".into(), "B");
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(20));
            assert!(store.get("a").is_some(), "reads renew the TTL");
        }
        assert!(store.get("b").is_none());
        assert_eq!(store.len(), 1);
    }
}
