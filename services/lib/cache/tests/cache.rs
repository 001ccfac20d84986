//! The cache against a real Redis, and its behaviour when Redis is absent.

use std::time::Duration;

use mneme_cache::Cache;
use mneme_test_support::TestRedis;

#[tokio::test]
async fn embeddings_round_trip_and_respect_dimension() {
    let redis = TestRedis::new();
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    assert!(cache.ping().await);
    assert_eq!(cache.cached_embedding("m", "coffee", 3).await, None);
    cache
        .cache_embedding("m", "coffee", &[0.5, -1.0, 2.0], Duration::from_secs(60))
        .await;
    assert_eq!(
        cache.cached_embedding("m", "coffee", 3).await,
        Some(vec![0.5, -1.0, 2.0])
    );
    // Another model or another dimension is a miss, never a wrong vector.
    assert_eq!(cache.cached_embedding("other", "coffee", 3).await, None);
    assert_eq!(cache.cached_embedding("m", "coffee", 4).await, None);
}

#[tokio::test]
async fn wake_ups_reach_listeners_of_the_same_prefix_only() {
    let redis = TestRedis::new();
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let other = Cache::connect(&redis.url, "another-deployment:")
        .await
        .unwrap();
    let mut listener = cache.embedding_wake_listener().await.unwrap();
    other.wake_embedding_worker("not-for-us").await;
    cache.wake_embedding_worker("tenant-1").await;
    let received = tokio::time::timeout(Duration::from_secs(5), listener.recv())
        .await
        .unwrap();
    assert_eq!(received.as_deref(), Some("tenant-1"));
}

#[tokio::test]
async fn an_unreachable_redis_degrades_instead_of_failing() {
    // Nothing listens on port 9 (discard); connect must still return.
    let cache = Cache::connect("redis://127.0.0.1:9", "x:").await.unwrap();
    assert!(!cache.ping().await);
    let started = std::time::Instant::now();
    assert_eq!(cache.cached_embedding("m", "q", 3).await, None);
    cache
        .cache_embedding("m", "q", &[1.0, 2.0, 3.0], Duration::from_secs(5))
        .await;
    cache.wake_embedding_worker("t").await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}
