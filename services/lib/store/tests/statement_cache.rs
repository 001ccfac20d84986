//! `MNEME_DB_STATEMENT_CACHE`: repository statements prepared once per
//! connection, and never planned generically. One test in a binary of its
//! own, because the setting is process-wide.

use mneme_store::{Connection, Store, StoreOptions, TenantTx, api_keys};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, create_tenant};

/// Runs the same repository statement three times on `client`, then counts
/// the statements left prepared on that connection by their text.
async fn prepared_after_three_runs(client: &mut Connection, tenant: uuid::Uuid) -> i64 {
    for _ in 0..3 {
        let tx = TenantTx::begin(client, tenant).await.unwrap();
        api_keys::list(&tx).await.unwrap();
        tx.commit().await.unwrap();
    }
    client
        .query_one(
            "SELECT count(*) FROM pg_prepared_statements
              WHERE statement LIKE '%FROM mneme.api_keys%'
                AND statement NOT LIKE '%pg_prepared_statements%'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn statements_are_prepared_once_per_connection_unless_turned_off() {
    let db = TestDatabase::create().await;
    let tenant = create_tenant(&db.store(), "cached", ALL_PERMISSIONS).await;
    for (cache, expected) in [(true, 1), (false, 0)] {
        let store = Store::connect(
            &db.app_url,
            &StoreOptions {
                statement_cache: cache,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let mut client = store.client().await.unwrap();
        assert_eq!(
            prepared_after_three_runs(&mut client, tenant.tenant_id).await,
            expected,
            "statement cache {cache}"
        );
        // A cached statement is still planned for its parameters each time.
        let mode: String = client
            .query_one("SHOW plan_cache_mode", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(mode, "force_custom_plan");
    }
}
