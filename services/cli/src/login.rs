//! `mneme login`: signs the command line in to a mneme with OAuth, the way
//! an MCP client would, and keeps the tokens.
//!
//! Discovery starts from the MCP URL's 401 (protected-resource metadata,
//! then the authorization server's metadata); the CLI registers itself
//! (RFC 7591) with a loopback redirect, sends the person to the sign-in
//! page (printing the URL when no browser opens) and redeems the code with
//! PKCE. The `oauth2` crate builds the authorization request and performs
//! the token exchange and refresh; HTTP goes through reqwest.
//!
//! Tokens are stored in `credentials.json` under the user's configuration
//! directory (`MNEME_CREDENTIALS` overrides the path), readable by the user
//! only. [`bearer`] hands out a valid access token, refreshing it first
//! when it is about to expire; commands that talk to a mneme use it when no
//! API key is given.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use oauth2::basic::BasicClient;
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, CsrfToken, PkceCodeChallenge, RedirectUrl, RefreshToken,
    Scope, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Scopes the CLI asks for.
const SCOPES: &[&str] = &["memory:read", "memory:write"];
/// Refresh this long before the access token expires.
const REFRESH_MARGIN_SECS: i64 = 60;
/// How long the person has to sign in.
const SIGN_IN_TIMEOUT: Duration = Duration::from_secs(600);

/// What `mneme login` keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// The MCP endpoint signed in to.
    pub mcp_url: String,
    pub token_url: String,
    pub client_id: String,
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// Unix seconds.
    pub expires_at: i64,
}

/// Shows the person the sign-in page: opens a browser, or prints the URL.
pub type Opener = Box<dyn FnOnce(String) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// The default [`Opener`]: prints the URL and tries `xdg-open`.
pub fn print_and_open() -> Opener {
    Box::new(|url| {
        Box::pin(async move {
            eprintln!("Open this page to sign in to mneme:\n\n  {url}\n");
            let _ = tokio::process::Command::new("xdg-open")
                .arg(&url)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .await;
        })
    })
}

/// Performs an `oauth2` HTTP request with reqwest (no redirects followed).
async fn send(request: oauth2::HttpRequest) -> Result<oauth2::HttpResponse, reqwest::Error> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let (parts, body) = request.into_parts();
    let response = client
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await?;
    let mut answer = http::Response::builder().status(response.status());
    for (name, value) in response.headers() {
        answer = answer.header(name, value);
    }
    let body = response.bytes().await?.to_vec();
    Ok(answer.body(body).expect("a response from valid parts"))
}

/// Where the MCP endpoint's authorization server is.
struct Discovered {
    resource: String,
    authorize: String,
    token: String,
    register: String,
}

async fn discover(mcp_url: &str) -> anyhow::Result<Discovered> {
    let http = reqwest::Client::new();
    let probe = http
        .post(mcp_url)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .with_context(|| format!("cannot reach {mcp_url}"))?;
    if probe.status() != reqwest::StatusCode::UNAUTHORIZED {
        bail!(
            "{mcp_url} did not ask for authorization (HTTP {})",
            probe.status()
        );
    }
    let challenge = probe
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let metadata_url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .ok_or_else(|| anyhow!("{mcp_url} names no protected-resource metadata"))?;
    let resource: Value = http
        .get(metadata_url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let issuer = resource["authorization_servers"][0]
        .as_str()
        .ok_or_else(|| anyhow!("the resource metadata names no authorization server"))?;
    let server: Value = http
        .get(format!(
            "{}/.well-known/oauth-authorization-server",
            issuer.trim_end_matches('/')
        ))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let field = |name: &str| {
        server[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("the authorization server metadata has no {name}"))
    };
    Ok(Discovered {
        resource: resource["resource"].as_str().unwrap_or(mcp_url).to_owned(),
        authorize: field("authorization_endpoint")?,
        token: field("token_endpoint")?,
        register: field("registration_endpoint")?,
    })
}

/// Waits for the browser's redirect to the loopback listener; the query.
async fn callback(listener: TcpListener) -> anyhow::Result<Vec<(String, String)>> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let mut buffer = vec![0u8; 8192];
        let read = stream.read(&mut buffer).await?;
        let request = String::from_utf8_lossy(&buffer[..read]);
        let target = request
            .lines()
            .next()
            .and_then(|line| line.split_whitespace().nth(1))
            .unwrap_or_default()
            .to_owned();
        if !target.starts_with("/callback") {
            let _ = stream
                .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                .await;
            continue;
        }
        let page =
            "<!doctype html><title>mneme</title><p>Signed in. You can close this window.</p>";
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
            page.len()
        );
        let _ = stream.write_all(answer.as_bytes()).await;
        let url = reqwest::Url::parse(&format!("http://127.0.0.1{target}"))?;
        return Ok(url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect());
    }
}

/// Signs in to the mneme serving `mcp_url`; `open` shows the sign-in page.
pub async fn login(mcp_url: &str, open: Opener) -> anyhow::Result<Credentials> {
    let found = discover(mcp_url).await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let redirect = format!(
        "http://127.0.0.1:{}/callback",
        listener.local_addr()?.port()
    );
    let registered: Value = reqwest::Client::new()
        .post(&found.register)
        .json(&json!({
            "client_name": "mneme CLI",
            "redirect_uris": [redirect],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await?
        .error_for_status()
        .context("client registration was refused")?
        .json()
        .await?;
    let client_id = registered["client_id"]
        .as_str()
        .ok_or_else(|| anyhow!("the registration answer has no client_id"))?
        .to_owned();
    let client = BasicClient::new(ClientId::new(client_id.clone()))
        .set_auth_uri(AuthUrl::new(found.authorize.clone())?)
        .set_token_uri(TokenUrl::new(found.token.clone())?)
        .set_redirect_uri(RedirectUrl::new(redirect)?);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state) = client
        .authorize_url(CsrfToken::new_random)
        .add_scopes(SCOPES.iter().map(|s| Scope::new((*s).to_owned())))
        .add_extra_param("resource", &found.resource)
        .set_pkce_challenge(challenge)
        .url();
    let waiting = tokio::spawn(callback(listener));
    open(url.to_string()).await;
    let query = tokio::time::timeout(SIGN_IN_TIMEOUT, waiting)
        .await
        .map_err(|_| {
            anyhow!(
                "nobody signed in within {} minutes",
                SIGN_IN_TIMEOUT.as_secs() / 60
            )
        })???;
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(error) = param("error") {
        bail!(
            "sign-in failed: {error} {}",
            param("error_description").unwrap_or_default()
        );
    }
    if param("state").as_deref() != Some(state.secret().as_str()) {
        bail!("the sign-in answer does not belong to this login (state mismatch)");
    }
    let code = param("code").ok_or_else(|| anyhow!("the sign-in answer has no code"))?;
    let token = client
        .exchange_code(AuthorizationCode::new(code))
        .set_pkce_verifier(verifier)
        .add_extra_param("resource", &found.resource)
        .request_async(&send)
        .await
        .map_err(|e| anyhow!("the token exchange failed: {e}"))?;
    Ok(credentials(mcp_url, &found.token, &client_id, &token, None))
}

fn credentials(
    mcp_url: &str,
    token_url: &str,
    client_id: &str,
    token: &impl TokenResponse,
    previous_refresh: Option<&str>,
) -> Credentials {
    let lifetime = token.expires_in().unwrap_or(Duration::from_secs(3600));
    Credentials {
        mcp_url: mcp_url.to_owned(),
        token_url: token_url.to_owned(),
        client_id: client_id.to_owned(),
        access_token: token.access_token().secret().clone(),
        refresh_token: token
            .refresh_token()
            .map(|t| t.secret().clone())
            .or_else(|| previous_refresh.map(str::to_owned)),
        expires_at: chrono::Utc::now().timestamp() + lifetime.as_secs() as i64,
    }
}

/// New tokens for `credentials` (the refresh token is replaced: mneme
/// rotates it on every use).
pub async fn refresh(credentials: &Credentials) -> anyhow::Result<Credentials> {
    let refresh_token = credentials
        .refresh_token
        .clone()
        .ok_or_else(|| anyhow!("no refresh token stored; run `mneme login` again"))?;
    let client = BasicClient::new(ClientId::new(credentials.client_id.clone()))
        .set_token_uri(TokenUrl::new(credentials.token_url.clone())?);
    let token = client
        .exchange_refresh_token(&RefreshToken::new(refresh_token.clone()))
        .request_async(&send)
        .await
        .map_err(|e| anyhow!("refreshing the sign-in failed (run `mneme login` again): {e}"))?;
    Ok(self::credentials(
        &credentials.mcp_url,
        &credentials.token_url,
        &credentials.client_id,
        &token,
        Some(&refresh_token),
    ))
}

/// Where credentials are kept: `MNEME_CREDENTIALS`, else
/// `$XDG_CONFIG_HOME/mneme/credentials.json`, else under `~/.config`.
pub fn credentials_path() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("MNEME_CREDENTIALS") {
        return Ok(PathBuf::from(path));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?)
            .join(".config"),
    };
    Ok(base.join("mneme").join("credentials.json"))
}

/// Writes credentials readable by the user only.
pub fn save(credentials: &Credentials, path: &Path) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let temporary = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(&serde_json::to_vec_pretty(credentials)?)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    Ok(())
}

pub fn load(path: &Path) -> anyhow::Result<Credentials> {
    let raw = std::fs::read(path)
        .with_context(|| format!("no stored sign-in at {}; run `mneme login`", path.display()))?;
    Ok(serde_json::from_slice(&raw)?)
}

/// A valid access token from the stored credentials, refreshed (and the
/// new tokens stored) when it is about to expire.
pub async fn bearer(path: &Path) -> anyhow::Result<String> {
    let stored = load(path)?;
    if stored.expires_at - chrono::Utc::now().timestamp() > REFRESH_MARGIN_SECS {
        return Ok(stored.access_token);
    }
    let fresh = refresh(&stored).await?;
    save(&fresh, path)?;
    Ok(fresh.access_token)
}
