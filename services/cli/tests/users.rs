//! `mneme users create` and `mneme users reset-password` as an operator
//! runs them: the `mneme` binary against a mneme's database, the password
//! from standard input or generated. The person then signs in to the
//! dashboard (`POST /admin/api/session`) with exactly that password.

// Only part of the shared stack's helpers are used here.
#[allow(dead_code)]
mod common;

use std::process::Stdio;

use common::LocalStack;
use mneme_test_support::{ALL_PERMISSIONS, create_tenant};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// What a run of `mneme` printed.
struct Run {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The last line of stdout, where a generated password is printed.
    fn last_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or_default()
    }
}

/// Runs `mneme users <args>` against `stack`'s database with `stdin` on its
/// standard input (and no other MNEME_* setting of the test's environment).
async fn users(stack: &LocalStack, args: &[&str], stdin: &str) -> Run {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mneme"))
        .arg("users")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .env("MNEME_DATABASE_URL", &stack.db.app_url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mneme starts");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    let output = child.wait_with_output().await.unwrap();
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Signs in to the dashboard: the status and the answer (`null` when not
/// JSON).
async fn sign_in(stack: &LocalStack, email: &str, password: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("http://{}/admin/api/session", stack.http_addr))
        .json(&json!({"email": email, "password": password}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn users_create_and_reset_password_set_the_password_the_person_signs_in_with() {
    const FIRST: &str = "a first password, long enough";
    const THIRD: &str = "a third password, also long";
    let stack = LocalStack::start().await;
    let store = stack.db.store();
    create_tenant(&store, "acme", ALL_PERMISSIONS).await;
    create_tenant(&store, "globex", ALL_PERMISSIONS).await;

    // Created with the password from standard input, never echoed.
    let created = users(
        &stack,
        &[
            "create",
            "--tenant",
            "acme",
            "--email",
            "Ana@Acme.example",
            "--role",
            "owner",
        ],
        &format!("{FIRST}\n"),
    )
    .await;
    assert!(created.success, "{}{}", created.stdout, created.stderr);
    assert!(
        created.stdout.contains("created user ana@acme.example (")
            && created.stdout.contains(") in acme as owner"),
        "{}",
        created.stdout
    );
    assert!(!created.stdout.contains(FIRST), "{}", created.stdout);
    let (status, me) = sign_in(&stack, "ana@acme.example", FIRST).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["me"]["role"], "owner", "{me}");
    assert_eq!(me["me"]["tenantName"], "acme", "{me}");
    assert_eq!(
        sign_in(&stack, "ana@acme.example", "not the password at all")
            .await
            .0,
        401
    );

    // The same email again, or a short password, creates no one.
    let again = users(
        &stack,
        &["create", "--tenant", "acme", "--email", "ana@acme.example"],
        "another password, long enough\n",
    )
    .await;
    assert!(!again.success);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    let short = users(
        &stack,
        &["create", "--tenant", "acme", "--email", "bo@acme.example"],
        "too short\n",
    )
    .await;
    assert!(!short.success);
    assert!(
        short.stderr.contains("at least 12 characters"),
        "{}",
        short.stderr
    );
    let listed = users(&stack, &["list", "--tenant", "acme"], "").await;
    assert!(listed.success, "{}", listed.stderr);
    assert_eq!(listed.stdout.lines().count(), 1, "{}", listed.stdout);
    assert!(
        listed.stdout.contains("\tana@acme.example\towner\t"),
        "{}",
        listed.stdout
    );

    // A generated password is printed once, as the last line.
    let generated = users(
        &stack,
        &[
            "create",
            "--tenant",
            "acme",
            "--email",
            "bo@acme.example",
            "--generate-password",
        ],
        "",
    )
    .await;
    assert!(generated.success, "{}", generated.stderr);
    let bo_password = generated.last_line();
    assert!(bo_password.len() >= 12, "{}", generated.stdout);
    let (status, me) = sign_in(&stack, "bo@acme.example", bo_password).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["me"]["role"], "member", "the default role: {me}");

    // An administrator's reset (generated): the old password fails, the new
    // one signs the person in, with the same role.
    let reset = users(
        &stack,
        &[
            "reset-password",
            "--tenant",
            "acme",
            "--email",
            "ana@acme.example",
            "--generate-password",
        ],
        "",
    )
    .await;
    assert!(reset.success, "{}", reset.stderr);
    assert!(
        reset
            .stdout
            .starts_with("password of ana@acme.example replaced\n"),
        "{}",
        reset.stdout
    );
    let second = reset.last_line();
    assert_ne!(second, FIRST);
    assert_eq!(sign_in(&stack, "ana@acme.example", FIRST).await.0, 401);
    let (status, me) = sign_in(&stack, "ana@acme.example", second).await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["me"]["role"], "owner", "{me}");

    // A reset from standard input.
    let reset_again = users(
        &stack,
        &[
            "reset-password",
            "--tenant",
            "acme",
            "--email",
            "ana@acme.example",
        ],
        &format!("{THIRD}\n"),
    )
    .await;
    assert!(reset_again.success, "{}", reset_again.stderr);
    assert!(
        !reset_again.stdout.contains(THIRD),
        "{}",
        reset_again.stdout
    );
    assert_eq!(sign_in(&stack, "ana@acme.example", second).await.0, 401);
    assert_eq!(sign_in(&stack, "ana@acme.example", THIRD).await.0, 200);

    // Another tenant's administrator cannot reset acme's person.
    let elsewhere = users(
        &stack,
        &[
            "reset-password",
            "--tenant",
            "globex",
            "--email",
            "ana@acme.example",
            "--generate-password",
        ],
        "",
    )
    .await;
    assert!(!elsewhere.success, "{}", elsewhere.stdout);
    assert!(
        elsewhere
            .stderr
            .contains("no user `ana@acme.example` in tenant `globex`"),
        "{}",
        elsewhere.stderr
    );
    assert_eq!(sign_in(&stack, "ana@acme.example", THIRD).await.0, 200);

    stack.shutdown().await;
}
