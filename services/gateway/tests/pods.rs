//! Gateway pods as separate processes sharing PostgreSQL and Redis: MCP
//! sessions roam between pods, survive a killed pod, are recovered under
//! their own id, stay bound to their credentials; rate limits hold across
//! pods and fall back to per-pod counting when Redis is unreachable.

mod common;

use common::{Fleet, TcpProxy, initialize, redis_addr, request};
use fred::prelude::*;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::json;

fn remember(id: u64, content: &str) -> serde_json::Value {
    request(
        id,
        "tools/call",
        json!({"name": "remember", "arguments": {
            "content": content, "topic": "pods", "type": "fact"
        }}),
    )
}

/// A Redis client of the fleet's Redis, to look at the sessions' keys.
async fn redis_client(fleet: &Fleet) -> fred::clients::Client {
    let redis = fred::clients::Client::new(
        fred::types::config::Config::from_url(&fleet.redis.url).unwrap(),
        None,
        None,
        None,
    );
    redis.init().await.unwrap();
    redis
}

fn tools_list(id: u64) -> serde_json::Value {
    request(id, "tools/list", json!({}))
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_roam_between_pods_survive_a_killed_pod_and_stay_bound_to_their_key() {
    let fleet = Fleet::start().await;
    let store = fleet.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let globex = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    let pod_a = fleet.pod(&[]).await;
    let pod_b = fleet.pod(&[]).await;
    let version = [("mcp-protocol-version", "2025-06-18")];

    // Initialized on A, served by B.
    let session = pod_a.initialize(&acme.api_key).await;
    let on_b = pod_b
        .post(
            &acme.api_key,
            Some(&session),
            &version,
            &remember(2, "Pods share sessions through Redis."),
        )
        .await;
    assert_eq!(on_b.status, 200, "{on_b:?}");
    assert_eq!(
        on_b.message.as_ref().unwrap().pointer("/result/isError"),
        Some(&json!(false)),
        "{on_b:?}"
    );
    let on_a = pod_a
        .post(&acme.api_key, Some(&session), &version, &tools_list(3))
        .await;
    assert_eq!(on_a.status, 200);

    // Another tenant's key cannot use the session: 404 as for an id never
    // issued (no recovery, and nothing learnt about the session).
    let stolen = pod_b
        .post(&globex.api_key, Some(&session), &version, &tools_list(4))
        .await;
    assert_eq!(stolen.status, 404, "{stolen:?}");
    assert_eq!(stolen.error_code(), Some(-32000));

    // An id mneme never issued: 404 with JSON-RPC -32000.
    let unknown = pod_b
        .post(
            &acme.api_key,
            Some(&uuid::Uuid::new_v4().to_string()),
            &version,
            &tools_list(5),
        )
        .await;
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert_eq!(unknown.error_code(), Some(-32000));

    // A version newer than the negotiated one: 400.
    let mismatched = pod_b
        .post(
            &acme.api_key,
            Some(&session),
            &[("mcp-protocol-version", "2025-11-25")],
            &tools_list(6),
        )
        .await;
    assert_eq!(mismatched.status, 400, "{mismatched:?}");

    // Pod A dies; its session goes on on B.
    pod_a.kill().await;
    let after_kill = pod_b
        .post(&acme.api_key, Some(&session), &version, &tools_list(7))
        .await;
    assert_eq!(after_kill.status, 200, "{after_kill:?}");

    // The session's Redis state is lost (expiry, flush): the same id is
    // recreated for the key that presents it, on a pod that never saw it…
    let pod_c = fleet.pod(&[]).await;
    let redis = redis_client(&fleet).await;
    let record = format!("{}sess:{{{session}}}", fleet.redis.prefix);
    let deleted: i64 = redis
        .del(vec![record.clone(), format!("{record}:init")])
        .await
        .unwrap();
    assert_eq!(deleted, 2, "the session's record and state lived in Redis");
    let recovered = pod_c
        .post(&acme.api_key, Some(&session), &version, &tools_list(8))
        .await;
    assert_eq!(recovered.status, 200, "{recovered:?}");
    // …and bound to it again.
    let stolen_again = pod_c
        .post(&globex.api_key, Some(&session), &version, &tools_list(9))
        .await;
    assert_eq!(stolen_again.status, 404);

    // Ending the session ends it on every pod, recovery included.
    assert_eq!(pod_c.delete(&acme.api_key, &session).await, 202);
    for pod in [&pod_b, &pod_c] {
        let ended = pod
            .post(&acme.api_key, Some(&session), &version, &tools_list(10))
            .await;
        assert_eq!(ended.status, 404, "{ended:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_reuse_on_initialize_with_the_same_credentials_gets_the_live_session_back() {
    let fleet = Fleet::start().await;
    let acme = create_tenant(&fleet.db.store(), "acme", ALL_PERMISSIONS).await;
    let globex = create_tenant(&fleet.db.store(), "globex", ALL_PERMISSIONS).await;
    let reuse = [("MNEME_SESSION_REUSE_BY_TOKEN", "true")];
    let (pod_a, pod_b) = (fleet.pod(&reuse).await, fleet.pod(&reuse).await);

    let first = pod_a.initialize(&acme.api_key).await;
    let again = pod_b
        .post(&acme.api_key, None, &[], &initialize("2025-06-18"))
        .await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.session_id().as_deref(), Some(first.as_str()));
    assert!(
        again
            .message
            .unwrap()
            .pointer("/result/protocolVersion")
            .is_some()
    );

    let other = pod_a
        .post(&globex.api_key, None, &[], &initialize("2025-06-18"))
        .await;
    assert_ne!(
        other.session_id(),
        Some(first.clone()),
        "never another key's session"
    );

    // Without reuse (the default: concurrent clients of one key must not
    // share a session), every initialize opens a session of its own.
    let fresh_pod = fleet.pod(&[]).await;
    let fresh = fresh_pod
        .post(&acme.api_key, None, &[], &initialize("2025-06-18"))
        .await;
    assert_ne!(fresh.session_id(), Some(first));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_session_lives_an_hour_and_use_extends_it_with_its_age() {
    let fleet = Fleet::start().await;
    let acme = create_tenant(&fleet.db.store(), "acme", ALL_PERMISSIONS).await;
    let pod = fleet.pod(&[]).await;
    let session = pod.initialize(&acme.api_key).await;
    let redis = redis_client(&fleet).await;
    let record = format!("{}sess:{{{session}}}", fleet.redis.prefix);
    let hour_ms = 3_600_000_i64;
    let ttls = |redis: fred::clients::Client, record: String| async move {
        let left: i64 = redis.pttl(&record).await.unwrap();
        let init: i64 = redis.pttl(format!("{record}:init")).await.unwrap();
        (left, init)
    };
    let (left, init) = ttls(redis.clone(), record.clone()).await;
    assert!(left > hour_ms - 60_000 && left <= hour_ms, "{left}");
    assert!(init > hour_ms - 60_000 && init <= hour_ms, "{init}");

    // The session turns ten days old: its next use gives it twenty.
    let raw: String = redis.get(&record).await.unwrap();
    let mut stored: serde_json::Value = serde_json::from_str(&raw).unwrap();
    let created = stored["created_at_ms"].as_i64().unwrap();
    stored["created_at_ms"] = (created - 240 * hour_ms).into();
    let _: () = redis
        .set(
            &record,
            stored.to_string(),
            Some(fred::types::Expiration::KEEPTTL),
            None,
            false,
        )
        .await
        .unwrap();
    let version = [("mcp-protocol-version", "2025-06-18")];
    let used = pod
        .post(&acme.api_key, Some(&session), &version, &tools_list(2))
        .await;
    assert_eq!(used.status, 200, "{used:?}");
    let (left, init) = ttls(redis.clone(), record.clone()).await;
    let twenty_days = 480 * hour_ms;
    assert!((left - twenty_days).abs() < 60_000, "{left}");
    // Within a minute of each other: the two TTLs are read at different
    // moments, and twenty days is a whole number of minutes, so comparing
    // whole minutes would fail whenever the reads straddle one.
    assert!(
        (left - init).abs() < 60_000,
        "both keys live alike: {left} / {init}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_hold_across_pods_and_fall_back_to_each_pod_without_redis() {
    const LIMIT: usize = 10;
    let fleet = Fleet::start().await;
    let store = fleet.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let proxy = TcpProxy::start(redis_addr(&fleet.redis.url)).await;
    let redis_url = format!("redis://{}", proxy.addr);
    let limits = [
        ("MNEME_RATE_LIMIT_KEY", "10"),
        ("MNEME_RATE_LIMIT_WINDOW_SECS", "3600"),
    ];
    let pod_a = fleet.pod_via_redis(&redis_url, &limits).await;
    let pod_b = fleet.pod_via_redis(&redis_url, &limits).await;
    let modern = [("mcp-protocol-version", "2026-07-28")];
    let discover = |id| {
        request(
            id,
            "tools/list",
            json!({"_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }}),
        )
    };

    let mut allowed = 0;
    let mut limited = Vec::new();
    for i in 0..2 * LIMIT {
        let pod = if i % 2 == 0 { &pod_a } else { &pod_b };
        let reply = pod
            .post(
                &acme.api_key,
                None,
                &[("mcp-method", "tools/list"), modern[0]],
                &discover(i as u64),
            )
            .await;
        match reply.status {
            200 => allowed += 1,
            429 => limited.push(reply),
            other => panic!("unexpected status {other}: {reply:?}"),
        }
    }
    assert_eq!(
        allowed, LIMIT,
        "both pods together admit exactly the key's limit"
    );
    let refused = &limited[0];
    assert_eq!(refused.error_code(), Some(-32000));
    assert!(refused.header("retry-after").is_some(), "{refused:?}");
    assert_eq!(refused.header("ratelimit-limit"), Some("10"));
    assert_eq!(refused.header("ratelimit-remaining"), Some("0"));

    // Redis goes away: each pod limits on its own, no request fails otherwise.
    proxy.cut();
    let globex = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    for pod in [&pod_a, &pod_b] {
        let mut statuses = Vec::new();
        for i in 0..LIMIT + 2 {
            let reply = pod
                .post(
                    &globex.api_key,
                    None,
                    &[("mcp-method", "tools/list"), modern[0]],
                    &discover(i as u64),
                )
                .await;
            statuses.push(reply.status);
        }
        let ok = statuses.iter().filter(|s| **s == 200).count();
        assert_eq!(ok, LIMIT, "per-pod limit while Redis is down: {statuses:?}");
        assert!(statuses[LIMIT..].iter().all(|s| *s == 429), "{statuses:?}");
    }

    // Legacy sessions keep working without Redis too.
    let session = pod_a
        .initialize(
            &create_tenant(&store, "initech", ALL_PERMISSIONS)
                .await
                .api_key,
        )
        .await;
    assert!(!session.is_empty());
    proxy.restore();
}

#[tokio::test(flavor = "multi_thread")]
async fn legacy_sse_streams_take_messages_sent_to_any_pod_and_only_from_their_key() {
    let fleet = Fleet::start().await;
    let store = fleet.db.store();
    let acme = create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    let globex = create_tenant(&store, "globex", ALL_PERMISSIONS).await;
    let (pod_a, pod_b) = (fleet.pod(&[]).await, fleet.pod(&[]).await);

    let mut stream = common::SseClient::open(&pod_a, &acme.api_key).await;
    assert!(
        stream.endpoint.starts_with("/message?sessionId="),
        "{}",
        stream.endpoint
    );
    let endpoint = stream.endpoint.clone();

    // The handshake and a tool call arrive through pod B; answers come back
    // on pod A's stream.
    let sent = pod_b
        .post_message(&acme.api_key, &endpoint, &initialize("2024-11-05"))
        .await;
    assert_eq!(sent.status, 202, "{sent:?}");
    let answer = stream.next_message().await;
    assert_eq!(answer["id"], 1);
    assert!(
        answer.pointer("/result/protocolVersion").is_some(),
        "{answer}"
    );
    let ack = pod_b
        .post_message(&acme.api_key, &endpoint, &common::initialized())
        .await;
    assert_eq!(ack.status, 202);
    let call = pod_a
        .post_message(
            &acme.api_key,
            &endpoint,
            &remember(2, "SSE messages can land on any pod."),
        )
        .await;
    assert_eq!(call.status, 202);
    let answer = stream.next_message().await;
    assert_eq!(answer["id"], 2);
    assert_eq!(
        answer.pointer("/result/isError"),
        Some(&json!(false)),
        "{answer}"
    );

    // Another tenant's key cannot write into the stream; invented ids are unknown.
    let stolen = pod_b
        .post_message(&globex.api_key, &endpoint, &tools_list(3))
        .await;
    assert_eq!(stolen.status, 404, "{stolen:?}");
    let invented = pod_b
        .post_message(&acme.api_key, "/message?sessionId=invented", &tools_list(4))
        .await;
    assert_eq!(invented.status, 404, "{invented:?}");
    assert!(!stream.session_id().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn daily_call_limits_count_tool_calls_on_every_pod_and_usage_reaches_the_database() {
    let fleet = Fleet::start().await;
    let acme = create_tenant(&fleet.db.store(), "acme", ALL_PERMISSIONS).await;
    {
        let mut db = fleet.db.store().client().await.unwrap();
        let tx = mneme_store::TenantTx::begin(&mut db, acme.tenant_id)
            .await
            .unwrap();
        let updated = tx
            .execute(
                "UPDATE mneme.api_keys SET daily_call_limit = 3 WHERE tenant_id = $1 AND id = $2",
                &[&acme.tenant_id, &acme.key_id],
            )
            .await
            .unwrap();
        assert_eq!(updated, 1);
        tx.commit().await.unwrap();
    }
    let settings = [
        ("MNEME_USAGE_FLUSH_SECS", "1"),
        ("MNEME_AUTH_CACHE_SECS", "0"),
    ];
    let (pod_a, pod_b) = (fleet.pod(&settings).await, fleet.pod(&settings).await);
    let version = [("mcp-protocol-version", "2025-06-18")];
    let session = pod_a.initialize(&acme.api_key).await;

    // Listing tools is not a tool call: it does not count.
    for id in 0..5 {
        let listed = pod_b
            .post(&acme.api_key, Some(&session), &version, &tools_list(id))
            .await;
        assert_eq!(listed.status, 200);
    }
    let mut statuses = Vec::new();
    for id in 0..4 {
        let pod = if id % 2 == 0 { &pod_a } else { &pod_b };
        let call = request(
            100 + id,
            "tools/call",
            json!({"name": "recall", "arguments": {"text": "anything"}}),
        );
        let reply = pod
            .post(&acme.api_key, Some(&session), &version, &call)
            .await;
        if reply.status == 429 {
            assert!(reply.header("retry-after").is_some());
            assert!(
                reply.message.as_ref().unwrap()["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("daily"),
                "{reply:?}"
            );
        }
        statuses.push(reply.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 429],
        "three tool calls a day, across pods"
    );

    // Each pod adds its tally to api_key_usage.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let recorded = fleet
            .db
            .count_rows(acme.tenant_id, "api_key_usage", "tool_calls > 0")
            .await;
        let mut db = fleet.db.store().client().await.unwrap();
        let tx = mneme_store::TenantTx::begin(&mut db, acme.tenant_id)
            .await
            .unwrap();
        let today = chrono::Utc::now().date_naive();
        let total = mneme_store::usage::tool_calls(&tx, acme.key_id, today)
            .await
            .unwrap();
        drop(tx);
        if recorded > 0 && total == 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "usage recorded: {total} tool calls"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
