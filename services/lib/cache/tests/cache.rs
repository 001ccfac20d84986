//! The cache against a real Redis, and its behaviour when Redis is absent.

use std::time::Duration;

use mneme_cache::{Cache, CachedStats};
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
async fn cached_stats_are_served_only_under_the_change_number_they_were_computed_under() {
    let redis = TestRedis::new();
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let ttl = Duration::from_secs(60);
    let empty = CachedStats {
        change: 0,
        answer: None,
    };
    assert_eq!(cache.cached_stats("t1", "view").await, Some(empty));

    cache.store_stats("t1", "view", 0, b"answer", ttl).await;
    let hit = cache.cached_stats("t1", "view").await.unwrap();
    assert_eq!(hit.answer.as_deref(), Some(&b"answer"[..]));
    // Views and tenants are separate entries.
    assert_eq!(
        cache.cached_stats("t1", "other").await.unwrap().answer,
        None
    );
    assert_eq!(cache.cached_stats("t2", "view").await.unwrap().answer, None);

    // A change elsewhere in the tenant retires every answer stored before.
    cache.note_tenant_changed("t1").await;
    let after = cache.cached_stats("t1", "view").await.unwrap();
    assert_eq!((after.change, after.answer), (1, None));
    // Another tenant's answers stay.
    cache.store_stats("t2", "view", 0, b"theirs", ttl).await;
    cache.note_tenant_changed("t1").await;
    let theirs = cache.cached_stats("t2", "view").await.unwrap();
    assert_eq!(theirs.answer.as_deref(), Some(&b"theirs"[..]));

    // An answer stored under an older number than the current one (its
    // query raced a write) is never served.
    cache.store_stats("t1", "view", 1, b"raced", ttl).await;
    assert_eq!(cache.cached_stats("t1", "view").await.unwrap().answer, None);
    cache.store_stats("t1", "view", 2, b"fresh", ttl).await;
    let fresh = cache.cached_stats("t1", "view").await.unwrap();
    assert_eq!(fresh.answer.as_deref(), Some(&b"fresh"[..]));

    // Answers expire.
    cache
        .store_stats("t1", "brief", 2, b"x", Duration::from_millis(50))
        .await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        cache.cached_stats("t1", "brief").await.unwrap().answer,
        None
    );
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
    assert_eq!(cache.cached_stats("t", "view").await, None);
    cache
        .store_stats("t", "view", 0, b"x", Duration::from_secs(5))
        .await;
    cache.note_tenant_changed("t").await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}
