//! Fixed-window request counters shared by every gateway pod.
//!
//! One script checks all the buckets a request falls into and counts it in
//! each only when none is full, so a refused request consumes nothing and
//! two pods can never together admit more than a bucket's limit per window.

use std::time::Duration;

use crate::{Cache, CacheError};

/// One counter: `limit` requests per window. `key` names the bucket and its
/// window (callers put the window's index in it); `ttl` outlives the window.
#[derive(Debug, Clone)]
pub struct Bucket {
    pub key: String,
    pub limit: u32,
    pub ttl: Duration,
}

/// The outcome over all buckets of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub allowed: bool,
    /// Index of the deciding bucket: the full one when refused, else the one
    /// with the fewest requests left.
    pub bucket: usize,
    /// Requests left in that bucket after this one.
    pub remaining: u32,
}

const ADMIT: &str = r#"
local tightest, least = 1, -1
for i = 1, #KEYS do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  local limit = tonumber(ARGV[2 * i - 1])
  if used >= limit then
    return {0, i, 0}
  end
  local left = limit - used - 1
  if least < 0 or left < least then
    tightest, least = i, left
  end
end
for i = 1, #KEYS do
  if redis.call('INCR', KEYS[i]) == 1 then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
  end
end
return {1, tightest, least}
"#;

impl Cache {
    /// The Redis key of a rate-limit bucket. `scope` is the hash tag: all
    /// buckets checked together must share it (one Redis Cluster slot).
    pub fn rate_limit_key(&self, scope: &str, parts: &[&str]) -> String {
        let mut key = self.key(&["rl", &format!("{{{scope}}}")]);
        for part in parts {
            key.push(':');
            key.push_str(part);
        }
        key
    }

    /// Counts one request in every bucket, unless one of them is full.
    pub async fn admit(&self, buckets: &[Bucket]) -> Result<Admission, CacheError> {
        let keys: Vec<String> = buckets.iter().map(|b| b.key.clone()).collect();
        let mut args: Vec<i64> = Vec::with_capacity(buckets.len() * 2);
        for bucket in buckets {
            args.push(i64::from(bucket.limit));
            args.push(
                i64::try_from(bucket.ttl.as_millis())
                    .unwrap_or(i64::MAX)
                    .max(1),
            );
        }
        let script = fred::types::scripts::Script::from_lua(ADMIT);
        let (allowed, bucket, remaining): (i64, i64, i64) =
            script.evalsha_with_reload(self.live()?, keys, args).await?;
        Ok(Admission {
            allowed: allowed == 1,
            bucket: usize::try_from(bucket - 1).unwrap_or(0),
            remaining: u32::try_from(remaining.max(0)).unwrap_or(u32::MAX),
        })
    }

    /// The count of a bucket, without counting (0 when absent).
    pub async fn bucket_count(&self, key: &str) -> Result<u32, CacheError> {
        use fred::prelude::KeysInterface;
        let count: Option<u32> = self.live()?.get(key).await?;
        Ok(count.unwrap_or(0))
    }

    /// Counts one event in a bucket regardless of its limit (failed
    /// authentications are counted after the fact).
    pub async fn count(&self, bucket: &Bucket) -> Result<u32, CacheError> {
        use fred::prelude::KeysInterface;
        let count: u32 = self.live()?.incr(&bucket.key).await?;
        if count == 1 {
            let ttl = i64::try_from(bucket.ttl.as_millis()).unwrap_or(i64::MAX);
            self.live()?
                .pexpire::<(), _>(&bucket.key, ttl, None)
                .await?;
        }
        Ok(count)
    }
}
