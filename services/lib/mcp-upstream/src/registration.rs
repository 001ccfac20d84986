//! What a tenant may register as an upstream, read the same way by the
//! admin API and the CLI: the request body ([`UpstreamInput`], also used
//! for partial updates), its validation into stored settings, the sealing
//! of headers, and the limits that apply once the operator's defaults fill
//! what the tenant left unset.

use std::collections::BTreeMap;

use mneme_config::ProxyConfig;
use mneme_store::upstreams::{SealedHeaders, UpstreamSettings};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::naming;
use crate::pool::{Limits, TransportKind, check_headers};
use crate::sealed::{HeaderKey, Headers};
use crate::ssrf::UrlPolicy;

/// Per-tool settings of an upstream (`toolOverrides`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOverride {
    /// `none`, `truncate` or `progressive`.
    pub compression: Option<String>,
    pub max_result_chars: Option<u32>,
    pub cache_ttl_secs: Option<u32>,
    /// Not listed and not callable through mneme.
    #[serde(default)]
    pub hidden: bool,
    /// Shown instead of the upstream's description.
    pub description: Option<String>,
}

/// Parses stored or submitted `toolOverrides`.
pub fn tool_overrides(value: &Value) -> Result<BTreeMap<String, ToolOverride>, String> {
    let overrides: BTreeMap<String, ToolOverride> =
        serde_json::from_value(value.clone()).map_err(|e| format!("toolOverrides: {e}"))?;
    for (tool, o) in &overrides {
        if let Some(compression) = &o.compression {
            check_compression(compression).map_err(|e| format!("toolOverrides.{tool}: {e}"))?;
        }
        if o.max_result_chars == Some(0) {
            return Err(format!(
                "toolOverrides.{tool}.maxResultChars must be positive"
            ));
        }
        if o.description
            .as_ref()
            .is_some_and(|d| d.chars().count() > 4000)
        {
            return Err(format!(
                "toolOverrides.{tool}.description is longer than 4000 characters"
            ));
        }
    }
    Ok(overrides)
}

fn check_compression(name: &str) -> Result<(), String> {
    match name {
        "none" | "truncate" | "progressive" => Ok(()),
        other => Err(format!(
            "compression `{other}` is not one of none, truncate, progressive"
        )),
    }
}

/// A numeric setting: its API name, the submitted change, where it is
/// stored, and its bounds.
type NumberField<'a> = (
    &'static str,
    Option<Option<i32>>,
    &'a mut Option<i32>,
    i32,
    i32,
);

/// Present-and-null (reset to the default) apart from absent (unchanged).
fn explicit<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// An upstream as submitted. On update, absent fields stay as they are and
/// `null` returns a setting to the operator's default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpstreamInput {
    pub name: Option<String>,
    /// Defaults to the name.
    pub prefix: Option<String>,
    /// `streamable_http` (default) or `sse`.
    pub transport: Option<String>,
    pub url: Option<String>,
    /// Replaces all headers; `{}` removes them.
    pub headers: Option<Headers>,
    pub enabled: Option<bool>,
    pub surfacing_enabled: Option<bool>,
    /// Globs of this upstream's tools that are never surfaced on.
    pub exclude_tools: Option<Vec<String>>,
    #[serde(default, deserialize_with = "explicit")]
    pub compression: Option<Option<String>>,
    #[serde(default, deserialize_with = "explicit")]
    pub max_result_chars: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub cache_ttl_secs: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub connect_timeout_ms: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub call_timeout_ms: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub overall_timeout_ms: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub max_retries: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub breaker_failures: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub breaker_reset_ms: Option<Option<i32>>,
    #[serde(default, deserialize_with = "explicit")]
    pub max_concurrency: Option<Option<i32>>,
    pub tool_overrides: Option<Value>,
}

/// Checks an upstream's name (what the CLI and API address it by).
pub fn validate_name(name: &str) -> Result<(), String> {
    let valid = (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err("an upstream name is 1-63 lowercase letters, digits, `-` or `_`".into())
    }
}

/// Settings of a new upstream before the input applies.
pub fn new_settings() -> UpstreamSettings {
    UpstreamSettings {
        transport: TransportKind::StreamableHttp.as_str().to_owned(),
        enabled: true,
        surfacing_enabled: true,
        tool_overrides: Value::Object(serde_json::Map::new()),
        ..UpstreamSettings::default()
    }
}

impl UpstreamInput {
    /// The settings after applying this input to `base` (see
    /// [`new_settings`] for a new upstream named `name`).
    pub fn apply(
        &self,
        name: &str,
        mut base: UpstreamSettings,
        policy: &UrlPolicy,
    ) -> Result<UpstreamSettings, String> {
        validate_name(name)?;
        if let Some(prefix) = &self.prefix {
            base.prefix.clone_from(prefix);
        }
        if base.prefix.is_empty() {
            base.prefix = name.replace("__", "_");
        }
        naming::validate_prefix(&base.prefix)?;
        if let Some(transport) = &self.transport {
            TransportKind::parse(transport).ok_or_else(|| {
                format!("transport `{transport}` is not one of streamable_http, sse")
            })?;
            base.transport.clone_from(transport);
        }
        if let Some(url) = &self.url {
            base.url.clone_from(url);
        }
        if base.url.is_empty() {
            return Err("an upstream needs a `url`".into());
        }
        policy.check_syntax(&base.url).map_err(|e| e.to_string())?;
        if let Some(enabled) = self.enabled {
            base.enabled = enabled;
        }
        if let Some(enabled) = self.surfacing_enabled {
            base.surfacing_enabled = enabled;
        }
        if let Some(globs) = &self.exclude_tools {
            if globs.len() > 100 || globs.iter().any(|g| g.is_empty() || g.len() > 200) {
                return Err("excludeTools holds at most 100 globs of 1-200 characters".into());
            }
            mneme_surfacing::gate::ToolPatterns::new(globs)
                .map_err(|e| format!("excludeTools: {e}"))?;
            base.exclude_tools.clone_from(globs);
        }
        if let Some(compression) = &self.compression {
            if let Some(name) = compression {
                check_compression(name)?;
            }
            base.compression.clone_from(compression);
        }
        let numbers: [NumberField<'_>; 9] = [
            (
                "maxResultChars",
                self.max_result_chars,
                &mut base.max_result_chars,
                100,
                i32::MAX,
            ),
            (
                "cacheTtlSecs",
                self.cache_ttl_secs,
                &mut base.cache_ttl_secs,
                0,
                86_400 * 7,
            ),
            (
                "connectTimeoutMs",
                self.connect_timeout_ms,
                &mut base.connect_timeout_ms,
                100,
                120_000,
            ),
            (
                "callTimeoutMs",
                self.call_timeout_ms,
                &mut base.call_timeout_ms,
                100,
                600_000,
            ),
            (
                "overallTimeoutMs",
                self.overall_timeout_ms,
                &mut base.overall_timeout_ms,
                100,
                1_200_000,
            ),
            ("maxRetries", self.max_retries, &mut base.max_retries, 0, 10),
            (
                "breakerFailures",
                self.breaker_failures,
                &mut base.breaker_failures,
                0,
                1000,
            ),
            (
                "breakerResetMs",
                self.breaker_reset_ms,
                &mut base.breaker_reset_ms,
                100,
                3_600_000,
            ),
            (
                "maxConcurrency",
                self.max_concurrency,
                &mut base.max_concurrency,
                1,
                1000,
            ),
        ];
        for (field, input, slot, min, max) in numbers {
            if let Some(value) = input {
                if let Some(n) = value
                    && !(min..=max).contains(&n)
                {
                    return Err(format!("{field} must be between {min} and {max}"));
                }
                *slot = value;
            }
        }
        if let (Some(call), Some(overall)) = (base.call_timeout_ms, base.overall_timeout_ms)
            && call > overall
        {
            return Err("callTimeoutMs must not exceed overallTimeoutMs".into());
        }
        if let Some(overrides) = &self.tool_overrides {
            tool_overrides(overrides)?;
            base.tool_overrides = overrides.clone();
        }
        Ok(base)
    }

    /// The headers to store, sealed for `tenant`; `None` when the input
    /// leaves them unchanged.
    pub fn sealed_headers(
        &self,
        key: Option<&HeaderKey>,
        tenant: Uuid,
    ) -> Result<Option<SealedHeaders>, String> {
        let Some(headers) = &self.headers else {
            return Ok(None);
        };
        check_headers(headers)?;
        if headers.is_empty() {
            return Ok(Some(SealedHeaders::default()));
        }
        let key = key.ok_or(
            "this mneme cannot store upstream headers: the operator has not set \
             MNEME_PROXY_HEADER_KEY",
        )?;
        Ok(Some(SealedHeaders {
            sealed: key.seal(tenant, headers),
            names: headers.keys().cloned().collect(),
        }))
    }
}

/// The limits of an upstream: its own settings, else the operator's.
pub fn limits(settings: &UpstreamSettings, config: &ProxyConfig) -> Limits {
    let millis = |value: Option<i32>, default: std::time::Duration| {
        value.map_or(default, |ms| {
            std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
        })
    };
    let count =
        |value: Option<i32>, default: u32| value.map_or(default, |n| u32::try_from(n).unwrap_or(0));
    Limits {
        connect_timeout: millis(settings.connect_timeout_ms, config.connect_timeout),
        call_timeout: millis(settings.call_timeout_ms, config.call_timeout),
        overall_timeout: millis(settings.overall_timeout_ms, config.overall_timeout),
        max_retries: count(settings.max_retries, config.max_retries),
        retry_backoff: config.retry_backoff,
        breaker_failures: count(settings.breaker_failures, config.breaker_failures),
        breaker_reset: millis(settings.breaker_reset_ms, config.breaker_reset),
        max_concurrency: settings
            .max_concurrency
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(config.max_concurrency),
        tools_ttl: config.tools_ttl,
        max_response_bytes: config.max_upstream_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> UrlPolicy {
        UrlPolicy {
            allow_private: false,
            resolve_timeout: std::time::Duration::from_secs(1),
        }
    }

    fn input(json: Value) -> UpstreamInput {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_new_upstream_gets_defaults_and_its_name_as_prefix() {
        let settings = input(serde_json::json!({"url": "https://mcp.example.com/mcp"}))
            .apply("github", new_settings(), &policy())
            .unwrap();
        assert_eq!(settings.prefix, "github");
        assert_eq!(settings.transport, "streamable_http");
        assert!(settings.enabled && settings.surfacing_enabled);
        assert_eq!(settings.call_timeout_ms, None);
    }

    #[test]
    fn updates_keep_absent_fields_and_reset_null_ones() {
        let base = input(serde_json::json!({
            "url": "https://mcp.example.com/mcp", "callTimeoutMs": 5000, "maxRetries": 1
        }))
        .apply("gh", new_settings(), &policy())
        .unwrap();
        let updated = input(serde_json::json!({"callTimeoutMs": null, "surfacingEnabled": false}))
            .apply("gh", base, &policy())
            .unwrap();
        assert_eq!(updated.call_timeout_ms, None);
        assert_eq!(updated.max_retries, Some(1));
        assert!(!updated.surfacing_enabled);
    }

    #[test]
    fn bad_input_is_refused_with_a_reason() {
        for (json, needle) in [
            (
                serde_json::json!({"url": "http://mcp.example.com"}),
                "https",
            ),
            (
                serde_json::json!({"url": "https://x.example", "transport": "stdio"}),
                "transport",
            ),
            (
                serde_json::json!({"url": "https://x.example", "prefix": "a__b"}),
                "prefix",
            ),
            (
                serde_json::json!({"url": "https://x.example", "maxRetries": 99}),
                "maxRetries",
            ),
            (
                serde_json::json!({"url": "https://x.example", "toolOverrides": {"t": {"compression": "zip"}}}),
                "compression",
            ),
            (
                serde_json::json!({"url": "https://x.example", "callTimeoutMs": 9000, "overallTimeoutMs": 1000}),
                "overallTimeoutMs",
            ),
        ] {
            let error = input(json.clone())
                .apply("up", new_settings(), &policy())
                .unwrap_err();
            assert!(error.contains(needle), "{json}: {error}");
        }
        assert!(serde_json::from_value::<UpstreamInput>(serde_json::json!({"urll": "x"})).is_err());
    }

    #[test]
    fn headers_need_the_operator_key() {
        let with_headers = input(serde_json::json!({"headers": {"Authorization": "Bearer x"}}));
        assert!(with_headers.sealed_headers(None, Uuid::nil()).is_err());
        let key = HeaderKey::from_base64("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap();
        let sealed = with_headers
            .sealed_headers(Some(&key), Uuid::nil())
            .unwrap()
            .unwrap();
        assert_eq!(sealed.names, vec!["Authorization".to_owned()]);
        assert!(sealed.sealed.is_some());
        let cleared = input(serde_json::json!({"headers": {}}));
        assert_eq!(
            cleared.sealed_headers(None, Uuid::nil()).unwrap(),
            Some(SealedHeaders::default())
        );
    }
}
