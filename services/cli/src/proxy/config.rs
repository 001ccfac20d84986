//! The local proxy's configuration file (`proxy.json`): its format, where it
//! is found, and its validation into [`Settings`].
//!
//! The file is JSON with camelCase keys (see docs/PROXY.md for a full
//! example). Reading it happens in two passes so that one run reports every
//! problem, each with its JSON path (`upstreamServers.fs.prefix`):
//!
//! 1. **Shape.** The file is parsed into a `serde_json::Value`, then the top
//!    level, `ltm` and each upstream are deserialized on their own into
//!    structs that deny unknown keys. An unknown key (a typo) is recorded and
//!    removed, and deserialization retried, so one typo does not hide the
//!    next; a wrong type stops only the section it is in.
//! 2. **Meaning.** Rules serde cannot express: transports and their fields
//!    (`command` only for stdio, `url` and `headers` only for HTTP), unique
//!    valid prefixes, URL syntax, header names, bounds of numbers, globs.
//!
//! Settings are built only when no problem was found; warnings (dangerous
//! environment variables removed, keys without effect) never block.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use mneme_mcp_upstream::naming;
use mneme_mcp_upstream::pool::{ChildStderr, Limits, StdioCommand, TransportKind, check_headers};
use mneme_mcp_upstream::registration::ToolOverride;
use mneme_mcp_upstream::sealed::Headers;
use mneme_mcp_upstream::ssrf::{SsrfError, UrlPolicy};
use mneme_surfacing::gate::ToolPatterns;
use mneme_surfacing::render::InjectionMode;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;
use sha2::{Digest, Sha256};

pub use mneme_mcp_upstream::shape::Compression;

/// Characters per chunk of a progressive result.
pub const DEFAULT_CHUNK_CHARS: usize = 4000;
/// Character budget of a proxied result.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 16_000;
const DEFAULT_CALL_TIMEOUT_MS: u64 = 60_000;
/// Generous: `npx -y` may download the server on its first start.
const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 60_000;
const DEFAULT_MAX_DESCRIPTION_CHARS: usize = 1024;
/// Claude Code shows tools as `mcp__<server>__<tool>`; 16 characters leave
/// room for a server name like `mneme`.
const DEFAULT_CLIENT_PREFIX_CHARS: usize = 16;
/// Largest response message accepted from an upstream or the LTM.
const MAX_RESPONSE_BYTES: usize = 40 * 1024 * 1024;

/// Environment variables that make a program load foreign code; a config
/// file copied from elsewhere must not smuggle them into a server process.
const DANGEROUS_ENV: &[&str] = &["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "NODE_OPTIONS"];
const DANGEROUS_ENV_PREFIXES: &[&str] = &["DYLD_"];

/// How the proxy reaches the LTM or an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    StreamableHttp,
    Sse,
    Stdio,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::StreamableHttp => "streamable_http",
            Self::Sse => "sse",
            Self::Stdio => "stdio",
        }
    }
}

fn yes() -> bool {
    true
}

/// The top level of the file; `ltm` and the upstreams are read separately
/// so that a problem in one does not hide problems in the others.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileTop {
    ltm: Value,
    #[serde(default)]
    upstream_servers: BTreeMap<String, Value>,
    chunk_chars: Option<usize>,
    #[serde(default = "yes")]
    advertise_context_query: bool,
    injection_mode: Option<String>,
    max_description_chars: Option<usize>,
    client_prefix_chars: Option<usize>,
}

/// `ltm`: the mneme (or mneme-compatible server) the proxy remembers with.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LtmFile {
    #[serde(default = "default_ltm_transport")]
    transport: Transport,
    url: Option<String>,
    api_key: Option<String>,
    #[serde(default)]
    headers: Headers,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    agent_id: Option<String>,
    call_timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
}

fn default_ltm_transport() -> Transport {
    Transport::StreamableHttp
}

/// One entry of `upstreamServers`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UpstreamFile {
    /// Inferred from `command` (stdio) or `url` (streamable_http) when absent.
    transport: Option<Transport>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: Headers,
    /// Defaults to the entry's name.
    prefix: Option<String>,
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default)]
    compression: Compression,
    max_result_chars: Option<usize>,
    #[serde(default = "yes")]
    surfacing_enabled: bool,
    #[serde(default)]
    exclude_tools: Vec<String>,
    #[serde(default)]
    tool_overrides: BTreeMap<String, ToolOverride>,
    call_timeout_ms: Option<u64>,
    connect_timeout_ms: Option<u64>,
}

/// A problem that keeps the file from being used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `upstreamServers.fs.prefix`; `(file)` for the file itself.
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What reading a file found.
#[derive(Debug, Default)]
pub struct Report {
    pub problems: Vec<Problem>,
    /// Printed, never blocking.
    pub warnings: Vec<String>,
}

impl Report {
    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    fn warn(&mut self, path: &str, message: impl std::fmt::Display) {
        self.warnings.push(format!("{path}: {message}"));
    }
}

/// The LTM as the proxy uses it.
#[derive(Debug, Clone)]
pub struct LtmSettings {
    pub transport: TransportKind,
    /// Empty for stdio.
    pub url: String,
    /// Sent as they are (values never logged).
    pub headers: Headers,
    /// `None` with an HTTP transport: the token stored by `mneme login`.
    pub api_key: Option<String>,
    /// `POST …/v1/surface`; only a streamable_http LTM is known to serve it.
    pub surface_url: Option<String>,
    pub agent_id: Option<String>,
    pub limits: Limits,
    /// Changes whenever a setting that shapes the connection changes.
    pub fingerprint: String,
}

impl LtmSettings {
    /// Whether requests carry a bearer token (an HTTP transport).
    pub fn uses_bearer(&self) -> bool {
        !matches!(self.transport, TransportKind::Stdio(_))
    }

    /// Whether the token comes from `mneme login` (an HTTP transport with
    /// neither `apiKey` nor an Authorization header in the file).
    pub fn uses_login(&self) -> bool {
        self.uses_bearer()
            && self.api_key.is_none()
            && !self
                .headers
                .keys()
                .any(|h| h.eq_ignore_ascii_case("authorization"))
    }
}

/// One usable upstream.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// Its key in `upstreamServers`.
    pub name: String,
    pub prefix: String,
    pub transport: TransportKind,
    pub url: String,
    pub headers: Headers,
    pub limits: Limits,
    pub compression: Compression,
    pub max_result_chars: usize,
    pub surfacing_enabled: bool,
    pub exclude: ToolPatterns,
    pub overrides: BTreeMap<String, ToolOverride>,
    /// Changes whenever a setting that shapes the connection changes.
    pub fingerprint: String,
}

impl UpstreamSettings {
    pub fn compression(&self, tool: &str) -> Compression {
        self.overrides
            .get(tool)
            .and_then(|o| o.compression.as_deref())
            .and_then(Compression::parse)
            .unwrap_or(self.compression)
    }

    pub fn max_result_chars(&self, tool: &str) -> usize {
        self.overrides
            .get(tool)
            .and_then(|o| o.max_result_chars)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(self.max_result_chars)
    }

    pub fn hidden(&self, tool: &str) -> bool {
        self.overrides.get(tool).is_some_and(|o| o.hidden)
    }

    pub fn description_override(&self, tool: &str) -> Option<&str> {
        self.overrides
            .get(tool)
            .and_then(|o| o.description.as_deref())
    }
}

/// A valid file, ready to serve.
#[derive(Debug, Clone)]
pub struct Settings {
    pub ltm: LtmSettings,
    /// Enabled upstreams by prefix.
    pub upstreams: BTreeMap<String, Arc<UpstreamSettings>>,
    /// Upstreams switched off with `"enabled": false` (for the summary).
    pub disabled: Vec<String>,
    pub chunk_chars: usize,
    pub advertise_context_query: bool,
    /// `None`: the mode the LTM answers with.
    pub injection_mode: Option<InjectionMode>,
    pub max_description_chars: usize,
    pub client_prefix_chars: usize,
}

/// `$MNEME_PROXY_CONFIG`, else `proxy.json` next to `mneme login`'s
/// credentials: `$XDG_CONFIG_HOME/mneme/`, else `~/.config/mneme/`.
pub fn default_path() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("MNEME_PROXY_CONFIG").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|p| !p.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?)
            .join(".config"),
    };
    Ok(base.join("mneme").join("proxy.json"))
}

/// Reads and validates the file at `path`.
pub fn load(path: &Path) -> (Option<Settings>, Report) {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text),
        Err(error) => {
            let mut report = Report::default();
            report.problem("(file)", format!("cannot read {}: {error}", path.display()));
            (None, report)
        }
    }
}

/// Validates a file's text; settings only when there is no problem.
pub fn parse(text: &str) -> (Option<Settings>, Report) {
    let mut report = Report::default();
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(error) => {
            report.problem(
                "(file)",
                format!(
                    "not valid JSON at line {}, column {}: {error}",
                    error.line(),
                    error.column()
                ),
            );
            return (None, report);
        }
    };
    let Some(top) = deserialize::<FileTop>(value, "", &mut report) else {
        return (None, report);
    };
    let ltm = deserialize::<LtmFile>(top.ltm, "ltm", &mut report)
        .and_then(|ltm| ltm_settings(ltm, &mut report));

    let mut upstreams = BTreeMap::new();
    let mut disabled = Vec::new();
    // prefix → the first entry that claimed it.
    let mut claimed: BTreeMap<String, String> = BTreeMap::new();
    for (name, raw) in top.upstream_servers {
        let path = key_path("upstreamServers", &name);
        let Some(file) = deserialize::<UpstreamFile>(raw, &path, &mut report) else {
            continue;
        };
        let prefix_path = format!("{path}.prefix");
        let prefix = file
            .prefix
            .clone()
            .unwrap_or_else(|| name.replace("__", "_"));
        match claimed.get(&prefix) {
            Some(first) => report.problem(
                &prefix_path,
                format!(
                    "duplicate prefix \"{prefix}\" (also used by {}); prefixes must be unique",
                    key_path("upstreamServers", first)
                ),
            ),
            None => {
                claimed.insert(prefix.clone(), name.clone());
            }
        }
        let enabled = file.enabled;
        if let Some(upstream) = upstream_settings(&name, &path, prefix, file, &mut report) {
            if enabled {
                upstreams.insert(upstream.prefix.clone(), Arc::new(upstream));
            } else {
                disabled.push(name);
            }
        }
    }

    let chunk_chars = top.chunk_chars.unwrap_or(DEFAULT_CHUNK_CHARS);
    if !(100..=1_000_000).contains(&chunk_chars) {
        report.problem("chunkChars", "must be between 100 and 1000000");
    }
    let injection_mode = match top.injection_mode.as_deref() {
        None => None,
        Some(mode) => match mode.parse::<InjectionMode>() {
            Ok(mode) => Some(mode),
            Err(error) => {
                report.problem("injectionMode", format!("{error}, or null"));
                None
            }
        },
    };
    let max_description_chars = top
        .max_description_chars
        .unwrap_or(DEFAULT_MAX_DESCRIPTION_CHARS);
    if !(32..=100_000).contains(&max_description_chars) {
        report.problem("maxDescriptionChars", "must be between 32 and 100000");
    }
    let client_prefix_chars = top
        .client_prefix_chars
        .unwrap_or(DEFAULT_CLIENT_PREFIX_CHARS);
    if client_prefix_chars > 48 {
        report.problem("clientPrefixChars", "must be at most 48");
    }

    let settings = match ltm {
        Some(ltm) if report.problems.is_empty() => Some(Settings {
            ltm,
            upstreams,
            disabled,
            chunk_chars,
            advertise_context_query: top.advertise_context_query,
            injection_mode,
            max_description_chars,
            client_prefix_chars,
        }),
        _ => None,
    };
    (settings, report)
}

/// `parent.key`, or `parent["key"]` when the key is not a plain word.
fn key_path(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (false, true) => format!("{parent}.{key}"),
        (_, false) => format!("{parent}[{key:?}]"),
    }
}

fn join_path(base: &str, segments: &[Segment]) -> String {
    let mut path = base.to_owned();
    for segment in segments {
        match segment {
            Segment::Map { key } => path = key_path(&path, key),
            Segment::Seq { index } => path.push_str(&format!("[{index}]")),
            Segment::Enum { variant } => path = key_path(&path, variant),
            Segment::Unknown => path.push_str(".?"),
        }
    }
    if path.is_empty() {
        "(top level)".to_owned()
    } else {
        path
    }
}

/// The name in serde's "unknown field `x`, expected …" message, and what
/// follows it.
fn unknown_field(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, expected) = rest.split_once('`')?;
    Some((name, expected.trim_start_matches(", ")))
}

/// Removes the key at `segments` (an object member) from `value`.
fn remove_at(value: &mut Value, segments: &[Segment]) -> bool {
    let Some((Segment::Map { key }, parents)) = segments.split_last() else {
        return false;
    };
    let mut current = value;
    for segment in parents {
        current = match (segment, current) {
            (Segment::Map { key }, Value::Object(map)) => match map.get_mut(key) {
                Some(next) => next,
                None => return false,
            },
            (Segment::Seq { index }, Value::Array(items)) => match items.get_mut(*index) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    current
        .as_object_mut()
        .is_some_and(|map| map.remove(key).is_some())
}

/// Deserializes `value`, recording every unknown key (removed, then tried
/// again) and the first other error, each under `base`.
fn deserialize<T: DeserializeOwned>(
    mut value: Value,
    base: &str,
    report: &mut Report,
) -> Option<T> {
    // Each round removes one key, so the number of keys bounds the rounds;
    // the cap only guards against a bug looping forever.
    for _ in 0..1000 {
        let error = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(parsed) => return Some(parsed),
            Err(error) => error,
        };
        let segments: Vec<Segment> = error.path().iter().cloned().collect();
        let path = join_path(base, &segments);
        let message = error.inner().to_string();
        if let Some((name, expected)) = unknown_field(&message) {
            report.problem(&path, format!("unknown key \"{name}\"; {expected}"));
            if remove_at(&mut value, &segments) {
                continue;
            }
            return None;
        }
        report.problem(&path, message);
        return None;
    }
    None
}

/// Drops environment variables that load foreign code, with a warning.
fn safe_env(
    mut env: BTreeMap<String, String>,
    path: &str,
    report: &mut Report,
) -> BTreeMap<String, String> {
    env.retain(|name, _| {
        let upper = name.to_ascii_uppercase();
        let dangerous = DANGEROUS_ENV.contains(&upper.as_str())
            || DANGEROUS_ENV_PREFIXES.iter().any(|p| upper.starts_with(p));
        if dangerous {
            report.warn(
                &key_path(&format!("{path}.env"), name),
                "removed: it would let the file inject code into the server process",
            );
        }
        !dangerous
    });
    env
}

/// Checks a timeout in milliseconds against its bounds.
fn millis(value: Option<u64>, default: u64, max: u64, path: &str, report: &mut Report) -> Duration {
    let ms = value.unwrap_or(default);
    if !(100..=max).contains(&ms) {
        report.problem(path, format!("must be between 100 and {max}"));
    }
    Duration::from_millis(ms)
}

fn limits(call_timeout: Duration, connect_timeout: Duration) -> Limits {
    Limits {
        connect_timeout,
        call_timeout,
        // One retry of a read-only call fits in the deadline.
        overall_timeout: call_timeout * 2 + Duration::from_secs(1),
        max_retries: 1,
        retry_backoff: Duration::from_millis(200),
        breaker_failures: 3,
        breaker_reset: Duration::from_secs(30),
        max_concurrency: 16,
        tools_ttl: Duration::from_secs(300),
        max_response_bytes: MAX_RESPONSE_BYTES,
    }
}

/// The rule for URLs of the local proxy: the user's own machine may reach
/// private addresses and plain http (a mneme on localhost, say).
pub fn url_policy() -> UrlPolicy {
    UrlPolicy {
        allow_private: true,
        resolve_timeout: Duration::from_secs(5),
    }
}

/// A digest of what shapes a connection (values included, so a changed
/// header reconnects; only the digest is kept).
fn fingerprint(transport: &TransportKind, url: &str, headers: &Headers, limits: &Limits) -> String {
    let command = match transport {
        TransportKind::Stdio(command) => serde_json::json!({
            "program": command.program, "args": command.args,
            "env": command.env, "cwd": command.cwd,
        }),
        _ => Value::Null,
    };
    let described = serde_json::json!({
        "transport": transport.as_str(), "url": url, "headers": headers,
        "command": command, "limits": format!("{limits:?}"),
    });
    hex::encode(Sha256::digest(described.to_string().as_bytes()))
}

/// The connection part shared by `ltm` and upstreams: stdio or HTTP, with
/// the fields of the other kind refused.
struct Connection {
    transport: TransportKind,
    url: String,
    headers: Headers,
}

#[allow(clippy::too_many_arguments)]
fn connection(
    path: &str,
    transport: Transport,
    command: Option<String>,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    headers: Headers,
    report: &mut Report,
) -> Option<Connection> {
    let before = report.problems.len();
    match transport {
        Transport::Stdio => {
            if url.is_some() {
                report.problem(
                    format!("{path}.url"),
                    "only for the streamable_http and sse transports",
                );
            }
            if !headers.is_empty() {
                report.problem(
                    format!("{path}.headers"),
                    "headers are only sent over HTTP; give a stdio server its secrets in `env`",
                );
            }
            let program = command.unwrap_or_default();
            if program.trim().is_empty() {
                report.problem(
                    format!("{path}.command"),
                    "a stdio server needs the program to run",
                );
            }
            let env = safe_env(env, path, report);
            (report.problems.len() == before).then(|| Connection {
                transport: TransportKind::Stdio(Arc::new(StdioCommand {
                    program,
                    args,
                    env,
                    cwd,
                    stderr: ChildStderr::Inherit,
                })),
                url: String::new(),
                headers: Headers::new(),
            })
        }
        Transport::StreamableHttp | Transport::Sse => {
            for (field, present) in [
                ("command", command.is_some()),
                ("args", !args.is_empty()),
                ("env", !env.is_empty()),
                ("cwd", cwd.is_some()),
            ] {
                if present {
                    report.problem(format!("{path}.{field}"), "only for the stdio transport");
                }
            }
            let url = url.unwrap_or_default();
            if url.is_empty() {
                report.problem(
                    format!("{path}.url"),
                    format!("a {} server needs a `url`", transport.as_str()),
                );
            } else if let Err(error) = url_policy().check_syntax(&url) {
                // The guard's message says https, which is the hosted rule;
                // here plain http is fine too.
                let message = match error {
                    SsrfError::Scheme => "the URL must use http or https".to_owned(),
                    other => other.to_string(),
                };
                report.problem(format!("{path}.url"), message);
            }
            if let Err(error) = check_headers(&headers) {
                report.problem(format!("{path}.headers"), error);
            }
            let kind = match transport {
                Transport::Sse => TransportKind::Sse,
                _ => TransportKind::StreamableHttp,
            };
            (report.problems.len() == before).then_some(Connection {
                transport: kind,
                url,
                headers,
            })
        }
    }
}

fn ltm_settings(file: LtmFile, report: &mut Report) -> Option<LtmSettings> {
    let before = report.problems.len();
    let call_timeout = millis(
        file.call_timeout_ms,
        DEFAULT_CALL_TIMEOUT_MS,
        600_000,
        "ltm.callTimeoutMs",
        report,
    );
    let connect_timeout = millis(
        file.connect_timeout_ms,
        DEFAULT_CONNECT_TIMEOUT_MS,
        300_000,
        "ltm.connectTimeoutMs",
        report,
    );
    if let Some(key) = &file.api_key {
        if file.transport == Transport::Stdio {
            report.problem(
                "ltm.apiKey",
                "only for the HTTP transports; give a stdio server its key in `env`",
            );
        } else if key.trim().is_empty() || key.chars().any(|c| c.is_whitespace()) {
            report.problem(
                "ltm.apiKey",
                "must be the key itself (no spaces); leave it out to use `mneme login`",
            );
        } else if file
            .headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("authorization"))
        {
            report.problem(
                "ltm.apiKey",
                "both `apiKey` and an Authorization header are set; keep one",
            );
        }
    }
    if let Some(agent) = &file.agent_id
        && (agent.is_empty() || agent.len() > 128)
    {
        report.problem("ltm.agentId", "must be 1 to 128 characters");
    }
    let connection = connection(
        "ltm",
        file.transport,
        file.command,
        file.args,
        file.env,
        file.cwd,
        file.url,
        file.headers,
        report,
    )?;
    if report.problems.len() != before {
        return None;
    }
    let surface_url = (file.transport == Transport::StreamableHttp).then(|| {
        let trimmed = connection.url.trim_end_matches('/');
        let base = trimmed.strip_suffix("/mcp").unwrap_or_else(|| {
            report.warn(
                "ltm.url",
                format!("does not end with /mcp; surfacing will post to {trimmed}/v1/surface"),
            );
            trimmed
        });
        format!("{base}/v1/surface")
    });
    let limits = limits(call_timeout, connect_timeout);
    let mut fingerprint = fingerprint(
        &connection.transport,
        &connection.url,
        &connection.headers,
        &limits,
    );
    if let Some(key) = &file.api_key {
        fingerprint = hex::encode(Sha256::digest(format!("{fingerprint}\0{key}").as_bytes()));
    }
    Some(LtmSettings {
        transport: connection.transport,
        url: connection.url,
        headers: connection.headers,
        api_key: file.api_key,
        surface_url,
        agent_id: file.agent_id,
        limits,
        fingerprint,
    })
}

fn upstream_settings(
    name: &str,
    path: &str,
    prefix: String,
    file: UpstreamFile,
    report: &mut Report,
) -> Option<UpstreamSettings> {
    let before = report.problems.len();
    if let Err(error) = naming::validate_prefix(&prefix) {
        let message = if file.prefix.is_some() {
            error
        } else {
            format!("{error} (the entry's name is the prefix unless `prefix` is set)")
        };
        report.problem(format!("{path}.prefix"), message);
    }
    let transport = match file.transport {
        Some(transport) => transport,
        None if file.command.is_some() => Transport::Stdio,
        None if file.url.is_some() => Transport::StreamableHttp,
        None => {
            report.problem(
                format!("{path}.transport"),
                "say how to reach the server: stdio (with `command`), streamable_http or sse \
                 (with `url`)",
            );
            return None;
        }
    };
    let max_result_chars = file.max_result_chars.unwrap_or(DEFAULT_MAX_RESULT_CHARS);
    if max_result_chars < 100 {
        report.problem(format!("{path}.maxResultChars"), "must be at least 100");
    }
    let call_timeout = millis(
        file.call_timeout_ms,
        DEFAULT_CALL_TIMEOUT_MS,
        600_000,
        &format!("{path}.callTimeoutMs"),
        report,
    );
    let connect_timeout = millis(
        file.connect_timeout_ms,
        DEFAULT_CONNECT_TIMEOUT_MS,
        300_000,
        &format!("{path}.connectTimeoutMs"),
        report,
    );
    if file.exclude_tools.iter().any(|g| g.is_empty()) {
        report.problem(format!("{path}.excludeTools"), "globs must not be empty");
    }
    let exclude = match ToolPatterns::new(&file.exclude_tools) {
        Ok(patterns) => Some(patterns),
        Err(error) => {
            report.problem(format!("{path}.excludeTools"), error.to_string());
            None
        }
    };
    for (tool, o) in &file.tool_overrides {
        let tool_path = key_path(&format!("{path}.toolOverrides"), tool);
        if let Some(compression) = &o.compression
            && Compression::parse(compression).is_none()
        {
            report.problem(
                format!("{tool_path}.compression"),
                format!("\"{compression}\" is not one of none, truncate, progressive"),
            );
        }
        if o.max_result_chars.is_some_and(|n| n < 100) {
            report.problem(
                format!("{tool_path}.maxResultChars"),
                "must be at least 100",
            );
        }
        if o.description
            .as_ref()
            .is_some_and(|d| d.chars().count() > 4000)
        {
            report.problem(
                format!("{tool_path}.description"),
                "is longer than 4000 characters",
            );
        }
        if o.cache_ttl_secs.is_some() {
            report.warn(
                &format!("{tool_path}.cacheTtlSecs"),
                "has no effect: the local proxy keeps no result cache",
            );
        }
    }
    let connection = connection(
        path,
        transport,
        file.command,
        file.args,
        file.env,
        file.cwd,
        file.url,
        file.headers,
        report,
    );
    let (Some(connection), Some(exclude)) = (connection, exclude) else {
        return None;
    };
    if report.problems.len() != before {
        return None;
    }
    let limits = limits(call_timeout, connect_timeout);
    let fingerprint = fingerprint(
        &connection.transport,
        &connection.url,
        &connection.headers,
        &limits,
    );
    Some(UpstreamSettings {
        name: name.to_owned(),
        prefix,
        transport: connection.transport,
        url: connection.url,
        headers: connection.headers,
        limits,
        compression: file.compression,
        max_result_chars,
        surfacing_enabled: file.surfacing_enabled,
        exclude,
        overrides: file.tool_overrides,
        fingerprint,
    })
}

/// The human summary `mneme proxy validate` prints for a valid file
/// (never a header value, key or environment value).
pub fn summary(settings: &Settings) -> Vec<String> {
    let mut lines = Vec::new();
    let ltm = &settings.ltm;
    let reach = match &ltm.transport {
        TransportKind::Stdio(command) => {
            format!("stdio `{}` ({} args)", command.program, command.args.len())
        }
        other => format!("{} {}", other.as_str(), ltm.url),
    };
    let auth = if !ltm.uses_bearer() {
        ""
    } else if ltm
        .headers
        .keys()
        .any(|h| h.eq_ignore_ascii_case("authorization"))
    {
        ", Authorization header from the file"
    } else if ltm.api_key.is_some() {
        ", API key from the file"
    } else {
        ", the sign-in stored by `mneme login`"
    };
    lines.push(format!("ltm: {reach}{auth}"));
    lines.push(match &ltm.surface_url {
        Some(url) => format!("surfacing: via {url}"),
        None => "surfacing: off (only a streamable_http LTM serves /v1/surface)".to_owned(),
    });
    for upstream in settings.upstreams.values() {
        let reach = match &upstream.transport {
            TransportKind::Stdio(command) => {
                format!("stdio `{}` ({} args)", command.program, command.args.len())
            }
            other => format!("{} {}", other.as_str(), upstream.url),
        };
        lines.push(format!(
            "upstream {}: {reach}, tools as {}__*, compression {} ({} chars), surfacing {}",
            upstream.name,
            upstream.prefix,
            upstream.compression.as_str(),
            upstream.max_result_chars,
            if upstream.surfacing_enabled {
                "on"
            } else {
                "off"
            },
        ));
    }
    for name in &settings.disabled {
        lines.push(format!("upstream {name}: disabled"));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<String> {
        let (settings, report) = parse(text);
        assert!(settings.is_none() || report.problems.is_empty());
        report.problems.iter().map(ToString::to_string).collect()
    }

    const FULL: &str = r#"{
      "ltm": {"transport": "streamable_http", "url": "https://mneme.example.com/mcp",
              "apiKey": "mn_test_key", "headers": {}},
      "upstreamServers": {
        "fs": {"transport": "stdio", "command": "npx",
               "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/project"],
               "env": {"LD_PRELOAD": "/tmp/evil.so", "FOO": "bar"}, "prefix": "fs",
               "compression": "truncate", "maxResultChars": 16000, "surfacingEnabled": true,
               "excludeTools": ["*secret*"],
               "toolOverrides": {"read_media_file": {"hidden": true}},
               "callTimeoutMs": 60000},
        "remote": {"transport": "streamable_http", "url": "https://tools.example.com/mcp",
                   "headers": {"Authorization": "Bearer abc"}, "compression": "progressive"}
      },
      "chunkChars": 4000, "advertiseContextQuery": true, "injectionMode": null
    }"#;

    #[test]
    fn the_documented_example_is_valid() {
        let (settings, report) = parse(FULL);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let settings = settings.expect("valid");
        assert_eq!(
            settings.ltm.surface_url.as_deref(),
            Some("https://mneme.example.com/v1/surface")
        );
        let fs = &settings.upstreams["fs"];
        let TransportKind::Stdio(command) = &fs.transport else {
            panic!("fs is stdio");
        };
        assert_eq!(command.program, "npx");
        assert!(!command.env.contains_key("LD_PRELOAD"));
        assert_eq!(command.env["FOO"], "bar");
        assert!(report.warnings.iter().any(|w| w.contains("LD_PRELOAD")));
        assert!(fs.hidden("read_media_file"));
        assert_eq!(
            settings.upstreams["remote"].compression("x"),
            Compression::Progressive
        );
        let summary = summary(&settings).join("\n");
        assert!(!summary.contains("mn_test_key") && !summary.contains("Bearer abc"));
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let found = problems(
            r#"{
              "ltm": {"url": "https://m.example.com/mcp", "apiKy": "x"},
              "upstreamServer": {},
              "upstreamServers": {
                "a": {"command": "x", "prefix": "fs", "toolOverrides": {"t": {"hiden": true}}},
                "b": {"command": "y", "prefix": "fs", "url": "https://x.example"},
                "c": {"transport": "stdoi", "command": "z"},
                "d": {"transport": "sse", "command": "z", "headers": {"Host": "x"}},
                "Bad Name": {"command": "z"}
              },
              "chunkChars": 5
            }"#,
        );
        let expect = [
            "upstreamServer: unknown key",
            "ltm.apiKy: unknown key",
            "upstreamServers.a.toolOverrides.t.hiden: unknown key",
            "upstreamServers.b.prefix: duplicate prefix \"fs\" (also used by upstreamServers.a)",
            "upstreamServers.b.url: only for",
            "upstreamServers.c.transport: unknown variant",
            "upstreamServers.d.command: only for the stdio transport",
            "upstreamServers.d.url: a sse server needs a `url`",
            "upstreamServers.d.headers: the header `Host`",
            "upstreamServers[\"Bad Name\"].prefix: The prefix",
            "chunkChars: must be between",
        ];
        for needle in expect {
            assert!(
                found.iter().any(|p| p.starts_with(needle)),
                "{needle} missing from {found:#?}"
            );
        }
    }

    #[test]
    fn broken_json_names_the_place() {
        let found = problems("{\"ltm\": {\n  \"url\": }");
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("line 2"), "{found:?}");
        assert!(problems("{}")[0].contains("missing field `ltm`"));
    }

    #[test]
    fn the_ltm_transport_decides_surfacing_and_authentication() {
        let (settings, report) = parse(
            r#"{"ltm": {"transport": "stdio", "command": "mneme-local", "env": {"DYLD_INSERT_LIBRARIES": "x"}}}"#,
        );
        let settings = settings.expect("valid");
        assert!(settings.ltm.surface_url.is_none());
        assert!(!settings.ltm.uses_bearer());
        assert!(report.warnings[0].contains("DYLD_INSERT_LIBRARIES"));
        let found = problems(
            r#"{"ltm": {"transport": "stdio", "command": "m", "apiKey": "k", "url": "http://x"}}"#,
        );
        assert!(found.iter().any(|p| p.starts_with("ltm.apiKey")));
        assert!(found.iter().any(|p| p.starts_with("ltm.url")));
        let found = problems(
            r#"{"ltm": {"url": "http://localhost:8080/mcp", "apiKey": "k", "headers": {"authorization": "Bearer x"}}}"#,
        );
        assert!(found[0].contains("both"), "{found:?}");
    }

    #[test]
    fn fingerprints_follow_connection_settings_only() {
        let fingerprint_of = |text: &str| {
            let (settings, report) = parse(text);
            assert!(report.problems.is_empty(), "{:?}", report.problems);
            settings.expect("valid").upstreams["fs"].fingerprint.clone()
        };
        let base = fingerprint_of(
            r#"{"ltm": {"url": "http://127.0.0.1/mcp"}, "upstreamServers": {"fs": {"command": "a"}}}"#,
        );
        let compressed = fingerprint_of(
            r#"{"ltm": {"url": "http://127.0.0.1/mcp"}, "upstreamServers": {"fs": {"command": "a", "compression": "none"}}}"#,
        );
        let other_args = fingerprint_of(
            r#"{"ltm": {"url": "http://127.0.0.1/mcp"}, "upstreamServers": {"fs": {"command": "a", "args": ["b"]}}}"#,
        );
        assert_eq!(base, compressed);
        assert_ne!(base, other_args);
    }
}
