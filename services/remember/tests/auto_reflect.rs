//! Automatic reflection of sessions against real PostgreSQL and Redis, with
//! a local OpenAI-compatible stub as the language model: what is asked,
//! what is stored and as whom, exactly once across pods, and what is left
//! alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use mneme_cache::{ActivityEntry, ActivityOwner, Cache};
use mneme_config::{AutoReflectConfig, Config, ConsolidationConfig, LlmConfig};
use mneme_remember::RememberServer;
use mneme_remember::auto_reflect::SessionReflector;
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use serde_json::{Value, json};

/// The stub model: answers every question with `answer` and keeps the
/// prompts it was asked.
#[derive(Default)]
struct Model {
    prompts: Mutex<Vec<String>>,
    answer: Mutex<String>,
}

async fn complete(State(model): State<Arc<Model>>, Json(body): Json<Value>) -> Json<Value> {
    let prompt = body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    model.prompts.lock().unwrap().push(prompt);
    // Slow enough that two pods polling together overlap.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = model.answer.lock().unwrap().clone();
    Json(
        json!({"choices": [{"message": {"role": "assistant", "content": answer}}],
        "usage": {"total_tokens": 200}}),
    )
}

async fn start_model(answer: Value) -> (Arc<Model>, String) {
    let model = Arc::new(Model::default());
    *model.answer.lock().unwrap() = answer.to_string();
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(complete))
        .with_state(model.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (model, url)
}

fn consolidation(llm_url: Option<String>, daily_tokens: i64) -> ConsolidationConfig {
    let mut settings = Config::defaults().consolidation;
    settings.llm_tenant_daily_tokens = daily_tokens;
    settings.llm = llm_url
        .map(|url| LlmConfig {
            url,
            api_key: None,
            model: "stub".into(),
            timeout: Duration::from_secs(5),
            concurrency: 2,
            breaker_failures: 10,
            breaker_cooldown: Duration::from_secs(600),
        })
        .into_iter()
        .collect();
    settings
}

/// The idle period of these tests.
const IDLE: Duration = Duration::from_secs(60);

fn settings() -> AutoReflectConfig {
    AutoReflectConfig {
        idle: IDLE,
        min_session: Duration::from_secs(30),
        ..Config::defaults().auto_reflect
    }
}

struct Harness {
    db: TestDatabase,
    _redis: TestRedis,
    cache: Cache,
    tenant: TestTenant,
    server: RememberServer,
}

impl Harness {
    async fn new(llm_url: Option<String>) -> Self {
        Self::with_budget(llm_url, 100_000).await
    }

    /// A harness whose tenants may spend `daily_tokens` on the model.
    async fn with_budget(llm_url: Option<String>, daily_tokens: i64) -> Self {
        let db = TestDatabase::create().await;
        let redis = TestRedis::new();
        let store = db.store();
        let tenant = create_tenant(&store, "sessions", ALL_PERMISSIONS).await;
        let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
        let server = RememberServer::new(store, cache.clone(), Config::defaults().remember)
            .with_consolidation(consolidation(llm_url, daily_tokens));
        Self {
            db,
            _redis: redis,
            cache,
            tenant,
            server,
        }
    }

    fn reflector(&self) -> SessionReflector {
        SessionReflector::new(self.server.clone(), settings())
    }

    /// Logs `calls` (tool, detail) in `session`, one every twenty seconds,
    /// the last `idle_secs` ago.
    async fn log(&self, session: &str, calls: &[(&str, &str)], idle_secs: i64) {
        let owner = ActivityOwner {
            tenant_id: self.tenant.tenant_id.to_string(),
            key_id: self.tenant.key_id.to_string(),
            agent_id: "builder".into(),
            workspace: Some("infra".into()),
        };
        let last = Utc::now().timestamp_millis() - idle_secs * 1000;
        let first = last - 20_000 * (calls.len() as i64 - 1);
        for (i, (tool, detail)) in calls.iter().enumerate() {
            let entry = ActivityEntry {
                at_ms: first + 20_000 * i as i64,
                tool: (*tool).into(),
                detail: (*detail).into(),
                failed: false,
            };
            self.cache
                .record_activity(session, &owner, &entry, 200, Duration::from_secs(3600))
                .await
                .unwrap();
        }
        // Due after the idle period, as the gateway would say.
        self.cache
            .reflect_after(session, last + IDLE.as_millis() as i64)
            .await
            .unwrap();
    }

    async fn count(&self, condition: &str) -> i64 {
        self.db
            .count_in_tenant(self.tenant.tenant_id, condition)
            .await
    }

    async fn reflections(&self, condition: &str) -> i64 {
        let client = self.db.owner_in_tenant(self.tenant.tenant_id).await;
        client
            .query_one(
                &format!("SELECT count(*) FROM mneme.session_reflections WHERE {condition}"),
                &[],
            )
            .await
            .unwrap()
            .get(0)
    }
}

/// A session of four recalls (a minute long): long enough to reflect.
const FOUR_RECALLS: [(&str, &str); 4] = [("recall", "{}"); 4];

const ANSWER: &str = r#"{"summary": ["The staging database runs PostgreSQL 15."],
    "decisions": ["Deploys to staging wait for the nightly backup."],
    "errors_resolved": [], "new_procedures": [], "open_questions": [],
    "narrative_summary": "The agent checked the staging database before a deploy."}"#;

#[tokio::test]
async fn two_pods_reflect_an_idle_session_once_as_its_own_key() {
    let (model, url) = start_model(serde_json::from_str(ANSWER).unwrap()).await;
    let h = Harness::new(Some(url)).await;
    let calls = [
        ("recall", r#"{"text":"staging database version"}"#),
        ("github__get_file", r#"{"path":"deploy/staging.yaml"}"#),
        ("context", "{}"),
    ];
    h.log("s-idle", &calls, 120).await;
    // Active a moment ago: not due yet.
    h.log("s-active", &calls, 5).await;

    let (first, second) = (h.reflector(), h.reflector());
    let now = Utc::now();
    let (a, b) = tokio::join!(first.reflect_due(now), second.reflect_due(now));
    assert_eq!(
        (a.unwrap(), b.unwrap()),
        (1, 1),
        "both pods see the one due session"
    );

    let prompts = model.prompts.lock().unwrap().clone();
    assert_eq!(
        prompts.len(),
        1,
        "one question for one session: {prompts:?}"
    );
    assert!(prompts[0].contains("3 tool calls"), "{}", prompts[0]);
    assert!(prompts[0].contains("github__get_file: {\"path\":\"deploy/staging.yaml\"}"));
    assert_eq!(
        h.count("source = 'auto_reflect'").await,
        3,
        "summary, decision and their episode"
    );
    let own = format!(
        "source = 'auto_reflect' AND key_id = '{}' AND session_id = 's-idle' \
         AND agent_id = 'builder' AND workspace = 'infra'",
        h.tenant.key_id
    );
    assert_eq!(
        h.count(&own).await,
        3,
        "stored as the session's key, agent and workspace"
    );
    assert_eq!(
        h.count("type = 'episode' AND session_id = 's-idle'").await,
        1
    );
    assert_eq!(
        h.reflections("session_id = 's-idle' AND state = 'reflected' AND fragments = 3 AND calls = 3 AND attempts = 1")
            .await,
        1
    );
    // Settled: the activity is gone and the session is not asked about again.
    assert!(h.cache.session_activity("s-idle").await.unwrap().is_none());
    assert_eq!(first.reflect_due(Utc::now()).await.unwrap(), 0);
    assert_eq!(model.prompts.lock().unwrap().len(), 1);

    // Used again later: the new stretch is reflected on its own.
    h.log(
        "s-idle",
        &[
            ("recall", r#"{"text":"backup window"}"#),
            ("context", "{}"),
            ("recall", "{}"),
            ("recall", "{}"),
        ],
        90,
    )
    .await;
    assert_eq!(first.reflect_due(Utc::now()).await.unwrap(), 1);
    assert_eq!(model.prompts.lock().unwrap().len(), 2);
    assert!(model.prompts.lock().unwrap()[1].contains("backup window"));
    assert_eq!(h.reflections("session_id = 's-idle'").await, 2);
    // Same answer, same key: exact duplicates are not stored twice.
    assert_eq!(h.count("source = 'auto_reflect'").await, 3);
    assert!(
        h.cache
            .session_activity("s-active")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn sessions_that_remembered_were_brief_or_have_no_model_are_left_without_a_question() {
    let (model, url) = start_model(serde_json::from_str(ANSWER).unwrap()).await;
    let h = Harness::new(Some(url)).await;
    h.log(
        "s-remembered",
        &[
            ("recall", "{}"),
            ("remember", r#"{"content":"x"}"#),
            ("recall", "{}"),
            ("recall", "{}"),
        ],
        120,
    )
    .await;
    h.log("s-brief", &[("recall", "{}"), ("recall", "{}")], 120)
        .await;
    assert_eq!(h.reflector().reflect_due(Utc::now()).await.unwrap(), 2);
    assert!(model.prompts.lock().unwrap().is_empty());
    assert_eq!(
        h.reflections("true").await,
        0,
        "no claim for what needs no question"
    );
    assert!(
        h.cache
            .session_activity("s-remembered")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        h.reflector().reflect_due(Utc::now()).await.unwrap(),
        0,
        "settled"
    );

    let no_model = Harness::new(None).await;
    no_model.log("s-1", &FOUR_RECALLS, 120).await;
    assert_eq!(
        no_model.reflector().reflect_due(Utc::now()).await.unwrap(),
        1
    );
    assert_eq!(no_model.count("true").await, 0);
    assert!(
        no_model
            .cache
            .session_activity("s-1")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn an_unusable_answer_is_tried_again_then_given_up() {
    let (model, url) = start_model(json!("I cannot help with that.")).await;
    let h = Harness::new(Some(url)).await;
    h.log("s-vague", &FOUR_RECALLS, 120).await;
    let reflector = h.reflector();
    for attempt in 1..=3 {
        assert_eq!(reflector.reflect_due(Utc::now()).await.unwrap(), 1);
        assert_eq!(
            h.reflections(&format!("state = 'failed' AND attempts = {attempt}"))
                .await,
            1
        );
    }
    assert_eq!(model.prompts.lock().unwrap().len(), 3);
    assert!(
        h.cache.session_activity("s-vague").await.unwrap().is_none(),
        "given up"
    );
    assert_eq!(reflector.reflect_due(Utc::now()).await.unwrap(), 0);
    assert_eq!(
        h.count("true").await,
        0,
        "nothing stored from an unusable answer"
    );
}

#[tokio::test]
async fn a_spent_token_budget_makes_sessions_wait_without_using_attempts() {
    let (model, url) = start_model(serde_json::from_str(ANSWER).unwrap()).await;
    // Each answer costs 200 tokens: the first session spends the day's 150.
    let h = Harness::with_budget(Some(url), 150).await;
    let calls = [("recall", "{}"), ("context", "{}"), ("recall", "{}")];
    h.log("s-first", &calls, 300).await;
    h.log("s-second", &calls, 120).await;
    let reflector = h.reflector();
    assert_eq!(reflector.reflect_due(Utc::now()).await.unwrap(), 2);
    for _ in 0..3 {
        assert_eq!(reflector.reflect_due(Utc::now()).await.unwrap(), 1);
    }
    assert_eq!(
        model.prompts.lock().unwrap().len(),
        1,
        "nothing asked past the budget"
    );
    assert_eq!(
        h.reflections("session_id = 's-first' AND state = 'reflected'")
            .await,
        1
    );
    assert_eq!(
        h.reflections(
            "session_id = 's-second' AND state = 'paused' AND attempts = 0 \
             AND reason LIKE '%budget%'"
        )
        .await,
        1,
        "the waiting session keeps all its attempts"
    );
    assert!(
        h.cache
            .session_activity("s-second")
            .await
            .unwrap()
            .is_some()
    );
}
