//! A whole mneme (`mneme up`) in the test process, for the tests that run
//! the `mneme` binary against it (the hook, the local proxy). The
//! end-to-end tests' `Stack` does the same, but that crate depends on this
//! one, so these tests keep a small copy of their own.

use std::collections::HashMap;
use std::net::SocketAddr;

use mneme::up::{Listeners, up};
use mneme_config::Config;
use mneme_test_support::{TestDatabase, TestRedis};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A running mneme on a database and Redis prefix of its own.
pub(crate) struct LocalStack {
    pub(crate) db: TestDatabase,
    _redis: TestRedis,
    pub(crate) http_addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<anyhow::Result<()>>,
}

impl LocalStack {
    /// Starts every service with the hash embedder and no scheduled
    /// consolidation.
    pub(crate) async fn start() -> Self {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http_addr = http.local_addr().unwrap();
        let env: HashMap<String, String> = HashMap::from([
            ("MNEME_DATABASE_URL".into(), db.app_url.clone()),
            ("MNEME_REDIS_URL".into(), redis.url.clone()),
            ("MNEME_REDIS_PREFIX".into(), redis.prefix.clone()),
            ("MNEME_EMBEDDER".into(), "hash".into()),
            ("MNEME_EMBED_SWEEP_SECS".into(), "1".into()),
            ("MNEME_CONSOLIDATION".into(), "false".into()),
            ("MNEME_PUBLIC_URL".into(), format!("http://{http_addr}")),
            // As a deployment sets it; each stack its own, so tokens and
            // session ids of one stack mean nothing to another.
            (
                "MNEME_INTERNAL_TOKEN".into(),
                format!("internal-token-of-{}", redis.prefix),
            ),
        ]);
        let config = Config::from_env(&env).expect("valid test configuration");
        let listeners = Listeners {
            http,
            recall: TcpListener::bind("127.0.0.1:0").await.unwrap(),
            remember: TcpListener::bind("127.0.0.1:0").await.unwrap(),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(up(config, listeners, stop.clone().cancelled_owned()));
        Self {
            db,
            _redis: redis,
            http_addr,
            stop,
            task,
        }
    }

    /// Stores memories with `api_key` through `POST /v1/tools/remember` and
    /// waits until all of the tenant's memories have embeddings.
    pub(crate) async fn remember_all(
        &self,
        tenant_id: uuid::Uuid,
        api_key: &str,
        memories: &[(&str, &str)],
    ) {
        let client = reqwest::Client::new();
        for (content, topic) in memories {
            let response = client
                .post(format!("http://{}/v1/tools/remember", self.http_addr))
                .bearer_auth(api_key)
                .json(&serde_json::json!({"content": content, "topic": topic, "type": "fact"}))
                .send()
                .await
                .unwrap();
            assert!(response.status().is_success(), "{}", response.status());
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self
            .db
            .count_in_tenant(tenant_id, "embedding IS NULL")
            .await
            > 0
        {
            assert!(
                std::time::Instant::now() < deadline,
                "embeddings did not complete"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    /// Stops every service; fails when one ended with an error.
    pub(crate) async fn shutdown(self) {
        self.stop.cancel();
        self.task.await.unwrap().unwrap();
    }
}
