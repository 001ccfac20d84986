//! The remember service over real gRPC on loopback: principal checks,
//! health, validation, redaction and idempotency.

use mneme_cache::Cache;
use mneme_config::Config;
use mneme_core::{Permission, Principal};
use mneme_proto::principal::PrincipalSigner;
use mneme_proto::v1::remember_service_client::RememberServiceClient;
use mneme_proto::v1::{ForgetRequest, RememberRequest, WriteOutcome};
use mneme_remember::{RememberServer, serve};
use mneme_test_support::{ALL_PERMISSIONS, TestDatabase, TestRedis, TestTenant, create_tenant};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const TOKEN: &str = "test-internal-token-0123456789abcdef";

struct Running {
    _db: TestDatabase,
    tenant: TestTenant,
    channel: Channel,
    stop: CancellationToken,
}

async fn start() -> Running {
    let db = TestDatabase::create().await;
    let redis = TestRedis::new();
    let store = db.store();
    let tenant = create_tenant(&store, "writes", ALL_PERMISSIONS).await;
    let cache = Cache::connect(&redis.url, &redis.prefix).await.unwrap();
    let server = RememberServer::new(store, cache, Config::defaults().remember);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(serve(
        server,
        PrincipalSigner::new(TOKEN),
        listener,
        stop.clone().cancelled_owned(),
    ));
    let channel = Channel::from_shared(url).unwrap().connect_lazy();
    Running {
        _db: db,
        tenant,
        channel,
        stop,
    }
}

fn principal(tenant: &TestTenant, permissions: &[Permission]) -> Principal {
    Principal {
        tenant_id: tenant.tenant_id,
        key_id: tenant.key_id,
        group_key_ids: vec![],
        user_id: None,
        permissions: permissions.to_vec(),
        workspace: Some("team-docs".into()),
        mode: None,
        session_id: Some("session-1".into()),
        agent_id: "default".into(),
    }
}

fn signed<T>(token: &str, principal: &Principal, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    PrincipalSigner::new(token).attach(&mut request, principal);
    request
}

fn fact(content: &str) -> RememberRequest {
    RememberRequest {
        content: content.into(),
        topic: "ops".into(),
        r#type: "fact".into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn calls_need_a_principal_signed_with_the_internal_token() {
    let running = start().await;
    let mut client = RememberServiceClient::new(running.channel.clone());

    let anonymous = client
        .remember(tonic::Request::new(fact(
            "Nobody signed this request at all.",
        )))
        .await
        .unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated);

    let who = principal(&running.tenant, ALL_PERMISSIONS);
    let forged = client
        .remember(signed(
            "another-token-0123456789abcdef0123",
            &who,
            fact("Signed with the wrong token."),
        ))
        .await
        .unwrap_err();
    assert_eq!(forged.code(), Code::Unauthenticated);

    let ok = client
        .remember(signed(
            TOKEN,
            &who,
            fact("Signed with the deployment's token."),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.outcome(), WriteOutcome::Created);

    // Health needs no principal.
    let health = HealthClient::new(running.channel.clone())
        .check(HealthCheckRequest {
            service: "mneme.v1.RememberService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(health.status, 1);
    running.stop.cancel();
}

#[tokio::test]
async fn writes_are_validated_redacted_and_idempotent() {
    let running = start().await;
    let mut client = RememberServiceClient::new(running.channel.clone());
    let who = principal(&running.tenant, ALL_PERMISSIONS);

    let redacted = client
        .remember(signed(
            TOKEN,
            &who,
            fact("The CI token is ghp_abcdefghijklmnopqrstuvwxyz0123456789 for now."),
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(redacted.redactions, 1);

    let invalid = client
        .remember(signed(TOKEN, &who, fact("https://example.com/runbook")))
        .await
        .unwrap_err();
    assert_eq!(invalid.code(), Code::InvalidArgument);
    assert!(
        invalid.message().contains("only a URL"),
        "{}",
        invalid.message()
    );

    let keyed = RememberRequest {
        idempotency_key: Some("import-7".into()),
        ..fact("Imported fact seven from the old wiki.")
    };
    let first = client
        .remember(signed(TOKEN, &who, keyed.clone()))
        .await
        .unwrap()
        .into_inner();
    let retry = client
        .remember(signed(TOKEN, &who, keyed))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (retry.id.clone(), retry.outcome()),
        (first.id, WriteOutcome::Replayed)
    );

    let reader = principal(&running.tenant, &[Permission::Read]);
    let denied = client
        .remember(signed(
            TOKEN,
            &reader,
            fact("Readers cannot write anything here."),
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let denied = client
        .forget(signed(
            TOKEN,
            &reader,
            ForgetRequest {
                id: retry.id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);

    let forgotten = client
        .forget(signed(
            TOKEN,
            &who,
            ForgetRequest {
                id: retry.id.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((forgotten.deleted, forgotten.protected), (1, 0));
    let again = client
        .forget(signed(
            TOKEN,
            &who,
            ForgetRequest {
                id: retry.id,
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::NotFound);
    running.stop.cancel();
}
