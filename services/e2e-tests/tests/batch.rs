//! `batch_remember` end to end: per-item results, one transaction, MCP
//! progress notifications, and the permission check on the streaming path.

use std::sync::{Arc, Mutex};

use mneme_core::Permission;
use mneme_e2e_tests::Stack;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use rmcp::ClientHandler;
use rmcp::RoleClient;
use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken, RequestMetaObject};
use rmcp::service::NotificationContext;
use serde_json::{Value, json};

/// A client that records progress notifications.
#[derive(Clone, Default)]
struct Progress(Arc<Mutex<Vec<ProgressNotificationParam>>>);

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }
}

fn item(i: usize) -> Value {
    json!({"content": format!("Batch fact {i}: host-{i} runs the ingest job."), "topic": "batch", "type": "fact"})
}

#[tokio::test]
async fn a_batch_reports_each_item_and_progress_and_stores_the_valid_ones_together() {
    let stack = Stack::start("hash", &[]).await;
    let tenant = create_tenant(&stack.db.store(), "batch", ALL_PERMISSIONS).await;
    let progress = Progress::default();
    let mcp = stack.mcp_with(&tenant.api_key, progress.clone()).await;

    let mut items: Vec<Value> = (0..60).map(item).collect();
    items[7] = json!({"content": "short", "topic": "batch", "type": "fact"});
    items[30] =
        json!({"content": "https://example.com/only-a-link", "topic": "batch", "type": "fact"});
    items[41] = item(40); // same content as item 40
    let result = mcp
        .call_params(
            "batch_remember",
            json!({"fragments": items}),
            |mut params| {
                let mut meta = RequestMetaObject::default();
                meta.set_progress_token(ProgressToken(NumberOrString::String("batch-1".into())));
                params.meta = Some(meta);
                params
            },
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let body = result.structured_content.unwrap();
    assert_eq!(
        (
            body["created"].as_u64(),
            body["existing"].as_u64(),
            body["rejected"].as_u64()
        ),
        (Some(57), Some(1), Some(2)),
        "{body:#}"
    );
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 60);
    assert_eq!(results[7]["outcome"], "rejected");
    assert_eq!(results[7]["error"]["code"], "invalid_argument");
    assert!(
        results[30]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only a URL")
    );
    assert_eq!(results[41]["outcome"], "duplicate");
    assert_eq!(results[41]["id"], results[40]["id"]);
    assert_eq!(
        stack
            .db
            .count_in_tenant(tenant.tenant_id, "topic = 'batch'")
            .await,
        57
    );

    // Notifications may trail the result on the wire; give them a moment.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let seen = progress.0.lock().unwrap().clone();
    assert!(seen.len() >= 3, "{seen:?}");
    // Progress only grows and ends at its total: 60 validation steps plus
    // 58 stored items.
    assert!(
        seen.windows(2).all(|w| w[0].progress < w[1].progress),
        "{seen:?}"
    );
    let last = seen.last().unwrap();
    assert_eq!(
        (last.progress, last.total),
        (118.0, Some(118.0)),
        "{seen:?}"
    );
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_read_only_key_cannot_write_through_the_streaming_batch_path() {
    // Regression: the reference let read-only keys write through its SSE
    // progress path, which skipped the permission check.
    let stack = Stack::start("hash", &[]).await;
    let reader = create_tenant(&stack.db.store(), "reader", &[Permission::Read]).await;
    let mcp = stack.mcp(&reader.api_key).await;
    let denied = mcp
        .tool_error("batch_remember", json!({"fragments": [item(1)]}))
        .await;
    assert!(denied.contains("permission_denied"), "{denied}");
    assert_eq!(stack.db.count_in_tenant(reader.tenant_id, "true").await, 0);

    let writer = create_tenant(&stack.db.store(), "writer", ALL_PERMISSIONS).await;
    let mcp = stack.mcp(&writer.api_key).await;
    let too_many: Vec<Value> = (0..201).map(item).collect();
    let error = mcp
        .tool_error("batch_remember", json!({"fragments": too_many}))
        .await;
    assert!(error.contains("the limit is 200"), "{error}");
    assert_eq!(stack.db.count_in_tenant(writer.tenant_id, "true").await, 0);
    stack.shutdown().await.unwrap();
}
