//! `memory_consolidate` end to end: an administrator runs the maintenance
//! stages over MCP with progress notifications, a dry run changes nothing,
//! and keys without the admin permission can neither see nor call it.

use std::sync::{Arc, Mutex};

use mneme_core::Permission;
use mneme_e2e_tests::Stack;
use mneme_test_support::create_tenant;
use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken, RequestMetaObject};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

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

fn affected(result: &Value, stage: &str) -> u64 {
    result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == stage)
        .unwrap_or_else(|| panic!("no {stage} in {result}"))["affected"]
        .as_u64()
        .unwrap()
}

#[tokio::test]
async fn an_administrator_consolidates_now_and_a_dry_run_changes_nothing() {
    let stack = Stack::start("hash", &[]).await;
    let admin = [Permission::Read, Permission::Write, Permission::Admin];
    let acme = create_tenant(&stack.db.store(), "acme", &admin).await;
    let progress = Progress::default();
    let mcp = stack.mcp_with(&acme.api_key, progress.clone()).await;
    let keep = mcp
        .remember_new("The staging cluster runs in eu-west-1.", "infra", "fact")
        .await;
    let stale = mcp
        .remember_new(
            "A throwaway note about a one-off test run.",
            "scratch",
            "fact",
        )
        .await;
    // Make one memory forgettable: unimportant, never used, 40 days old.
    let mut owner = stack.db.owner_client().await;
    let tx = owner.transaction().await.unwrap();
    tx.execute(
        "SELECT set_config('mneme.tenant_id', $1, true)",
        &[&acme.tenant_id.to_string()],
    )
    .await
    .unwrap();
    tx.execute(
        &format!(
            "UPDATE mneme.fragments SET importance = 0.1, ttl_tier = 'warm',
                    created_at = now() - interval '40 days' WHERE id = '{stale}'"
        ),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let with_progress = |mut params: rmcp::model::CallToolRequestParams| {
        let mut meta = RequestMetaObject::default();
        meta.set_progress_token(ProgressToken(NumberOrString::String(
            "consolidate-1".into(),
        )));
        params.meta = Some(meta);
        params
    };
    let dry = mcp
        .call_params("memory_consolidate", json!({"dryRun": true}), with_progress)
        .await;
    assert_ne!(dry.is_error, Some(true), "{dry:?}");
    let dry = dry.structured_content.unwrap();
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["failed"], false, "{dry:#}");
    assert_eq!(affected(&dry, "expired_delete"), 1, "{dry:#}");
    let count = |condition: String| {
        let stack = &stack;
        async move { stack.db.count_in_tenant(acme.tenant_id, &condition).await }
    };
    assert_eq!(
        count(format!("id = '{stale}'")).await,
        1,
        "a dry run deletes nothing"
    );

    let before = mcp.ok("memory_stats", json!({})).await;
    assert!(before.get("lastConsolidatedAt").is_none(), "{before:#}");
    let run = mcp.ok("memory_consolidate", json!({})).await;
    let after = mcp.ok("memory_stats", json!({})).await;
    assert!(after["lastConsolidatedAt"].is_string(), "{after:#}");
    assert_eq!(
        (
            &after["embeddingParked"],
            &after["contradictionsPending"],
            &after["contradictions"]
        ),
        (&json!(0), &json!(0), &json!(0))
    );
    assert_eq!(affected(&run, "expired_delete"), 1, "{run:#}");
    assert_eq!(count(format!("id = '{stale}'")).await, 0);
    assert_eq!(count(format!("id = '{keep}'")).await, 1);
    assert_eq!(
        stack
            .db
            .count_rows(acme.tenant_id, "consolidation_runs", "trigger = 'manual'")
            .await,
        2
    );

    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let seen = progress.0.lock().unwrap().clone();
    let stages = run["stages"].as_array().unwrap().len() as f64;
    // One notification per stage and run (both calls carried a token).
    let first_run = &seen[0].progress_token;
    let of_first: Vec<f64> = seen
        .iter()
        .filter(|p| &p.progress_token == first_run)
        .map(|p| p.progress)
        .collect();
    assert_eq!(
        of_first,
        (1..=stages as u32).map(f64::from).collect::<Vec<_>>(),
        "{seen:?}"
    );
    assert!(seen.iter().all(|p| p.total == Some(stages)), "{seen:?}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn keys_without_the_admin_permission_cannot_consolidate() {
    let stack = Stack::start("hash", &[]).await;
    let writer = create_tenant(
        &stack.db.store(),
        "writer",
        &[Permission::Read, Permission::Write],
    )
    .await;
    let mcp = stack.mcp(&writer.api_key).await;
    let tools = mcp.client.list_all_tools().await.unwrap();
    assert!(tools.iter().all(|t| t.name != "memory_consolidate"));
    let denied = mcp
        .tool_error("memory_consolidate", json!({"dryRun": true}))
        .await;
    assert!(denied.contains("permission_denied"), "{denied}");
    assert_eq!(
        stack
            .db
            .count_rows(writer.tenant_id, "consolidation_runs", "true")
            .await,
        0
    );
    stack.shutdown().await.unwrap();
}
