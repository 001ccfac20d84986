//! What the load goes to: the MCP endpoint and the API keys the virtual
//! clients hold, and the check that keeps a load test on this machine
//! unless the operator says otherwise.

use std::net::IpAddr;
use std::path::Path;

use anyhow::{Context as _, bail};

/// A running mneme: its MCP endpoint and one key per tenant (or several
/// keys of one tenant). Virtual client `i` holds `keys[i % keys.len()]`.
#[derive(Clone)]
pub struct Target {
    pub url: String,
    pub keys: Vec<String>,
}

impl std::fmt::Debug for Target {
    // Keys are credentials: never print them, not even in a panic message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl Target {
    /// The key virtual client `client` holds (round robin over the keys).
    pub fn key_for(&self, client: usize) -> &str {
        &self.keys[client % self.keys.len()]
    }
}

/// Refuses a target that is not on this machine unless `allow_remote`: a
/// load test is a denial of service for whoever else uses the server, so
/// pointing it elsewhere must be deliberate.
pub fn check_loopback(url: &str, allow_remote: bool) -> anyhow::Result<()> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("{url:?} is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        bail!("{url:?} is not an http(s) URL");
    }
    let host = parsed
        .host_str()
        .with_context(|| format!("{url:?} names no host"))?;
    if allow_remote || is_loopback_host(host) {
        return Ok(());
    }
    bail!(
        "{host} is not a loopback address; a load test against another machine \
         needs --allow-remote (and the consent of whoever runs it)"
    )
}

/// `localhost`, a name under `.localhost` (RFC 6761 keeps both on the
/// machine), 127.0.0.0/8 or `::1` (with or without the URL's brackets).
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => false,
    }
}

/// One key per line; blank lines and lines starting with `#` are skipped.
pub fn read_keys_file(path: &Path) -> anyhow::Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_keys(&text))
}

fn parse_keys(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_targets_pass() {
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://127.0.0.2/mcp",
            "http://[::1]:8080/mcp",
            "http://localhost/mcp",
            "http://LOCALHOST:9000/mcp",
            "https://mneme.localhost/mcp",
            "http://[::ffff:127.0.0.1]/mcp",
        ] {
            check_loopback(url, false).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn remote_targets_need_allow_remote() {
        for url in [
            "http://10.0.0.1/mcp",
            "http://192.168.1.5:8080/mcp",
            "https://mneme.example.com/mcp",
            "http://[2001:db8::1]/mcp",
            "http://localhost.example.com/mcp",
            "http://0.0.0.0:8080/mcp",
        ] {
            let error = check_loopback(url, false).expect_err(url).to_string();
            assert!(error.contains("--allow-remote"), "{url}: {error}");
            check_loopback(url, true).unwrap_or_else(|e| panic!("{url}: {e}"));
        }
    }

    #[test]
    fn malformed_targets_are_refused_even_with_allow_remote() {
        for url in ["127.0.0.1:8080/mcp", "ftp://127.0.0.1/mcp", "not a url"] {
            assert!(check_loopback(url, true).is_err(), "{url}");
        }
    }

    #[test]
    fn keys_file_skips_blanks_and_comments() {
        let keys = parse_keys("# tenant a\nmn_a_1\n\n  mn_b_2  \n#mn_c_3\n");
        assert_eq!(keys, ["mn_a_1", "mn_b_2"]);
    }

    #[test]
    fn clients_take_keys_round_robin() {
        let target = Target {
            url: "http://127.0.0.1/mcp".into(),
            keys: vec!["mn_a".into(), "mn_b".into(), "mn_c".into()],
        };
        let held: Vec<&str> = (0..7).map(|i| target.key_for(i)).collect();
        assert_eq!(
            held,
            ["mn_a", "mn_b", "mn_c", "mn_a", "mn_b", "mn_c", "mn_a"]
        );
        assert!(!format!("{target:?}").contains("mn_"), "{target:?}");
    }
}
