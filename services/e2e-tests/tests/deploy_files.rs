//! The deployment files hold together without a Docker daemon or a
//! Prometheus at hand: the Dockerfile's stages, copies, binaries and user;
//! the entrypoint's services; compose's services and settings; the alert
//! rules' shape. Every `MNEME_*` setting they set must exist in
//! `docs/CONFIG.md`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Yaml {
    YamlLoader::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("{path} is not YAML: {e}"))
        .remove(0)
}

/// Every `MNEME_*` name in `text`.
fn settings_named(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|word| word.starts_with("MNEME_") && word.len() > "MNEME_".len())
        .map(str::to_owned)
        .collect()
}

fn documented_settings() -> BTreeSet<String> {
    settings_named(&read("docs/CONFIG.md"))
}

/// Package names of the workspace's crates.
fn packages() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for dir in ["services", "services/lib"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let manifest = entry.unwrap().path().join("Cargo.toml");
            if let Ok(text) = std::fs::read_to_string(manifest)
                && let Some(name) = text
                    .lines()
                    .find_map(|l| l.strip_prefix("name = \""))
                    .and_then(|rest| rest.strip_suffix('"'))
            {
                names.insert(name.to_owned());
            }
        }
    }
    names
}

#[test]
fn the_dockerfile_builds_every_service_into_one_non_root_image() {
    let dockerfile = read("deploy/docker/Dockerfile");
    // Instructions joined across continuation lines, comments dropped.
    let mut instructions: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                if !current.trim().is_empty() {
                    instructions.push(std::mem::take(&mut current));
                }
                current.clear();
            }
        }
    }
    const KNOWN: &[&str] = &[
        "FROM",
        "ARG",
        "RUN",
        "COPY",
        "WORKDIR",
        "ENV",
        "EXPOSE",
        "USER",
        "ENTRYPOINT",
        "CMD",
        "LABEL",
        "HEALTHCHECK",
    ];
    let mut stages: Vec<String> = Vec::new();
    let mut built: BTreeSet<String> = BTreeSet::new();
    let mut user = None;
    let mut entrypoint = None;
    for instruction in &instructions {
        let (keyword, rest) = instruction
            .split_once(' ')
            .unwrap_or((instruction.as_str(), ""));
        assert!(KNOWN.contains(&keyword), "unknown instruction `{keyword}`");
        match keyword {
            "FROM" => {
                let words: Vec<&str> = rest.split_whitespace().collect();
                if let [_, alias, name] = words[..] {
                    assert!(alias.eq_ignore_ascii_case("as"), "{instruction}");
                    assert!(!stages.contains(&name.to_owned()), "stage {name} twice");
                    stages.push(name.to_owned());
                }
            }
            "COPY" => {
                if let Some(from) = rest
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix("--from="))
                {
                    assert!(
                        stages.contains(&from.to_owned()),
                        "COPY --from={from} names no earlier stage"
                    );
                } else {
                    let source = rest.split_whitespace().next().unwrap();
                    if source != "." {
                        assert!(root().join(source).exists(), "COPY of missing {source}");
                    }
                }
            }
            "RUN" if rest.contains("cargo build") => {
                // The packages of the `cargo build` command itself.
                built = rest
                    .split("&&")
                    .find(|command| command.contains("cargo build"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .windows(2)
                    .filter(|pair| pair[0] == "-p")
                    .map(|pair| pair[1].to_owned())
                    .collect();
            }
            "USER" => user = Some(rest.to_owned()),
            "ENTRYPOINT" => entrypoint = Some(rest.to_owned()),
            "ENV" => {
                for setting in settings_named(rest) {
                    assert!(
                        documented_settings().contains(&setting),
                        "the image sets {setting}, which docs/CONFIG.md does not describe"
                    );
                }
            }
            _ => {}
        }
    }
    let services: BTreeSet<String> = [
        "mneme",
        "mneme-gateway",
        "mneme-recall",
        "mneme-remember",
        "mneme-consolidator",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(built, services, "the image builds every service");
    assert!(services.is_subset(&packages()));
    let user = user.expect("the image names its user");
    assert!(
        !user.starts_with("root") && !user.starts_with("0"),
        "runs as {user}"
    );
    assert!(
        entrypoint
            .expect("an entrypoint")
            .contains("mneme-entrypoint")
    );

    // The entrypoint starts each service's own binary.
    let script = read("deploy/docker/entrypoint.sh");
    for service in ["gateway", "recall", "remember", "consolidator"] {
        assert!(script.contains(service), "entrypoint.sh: {service}");
        assert!(packages().contains(&format!("mneme-{service}")));
    }
    assert!(script.contains("exec \"/usr/local/bin/mneme-$service\""));
}

#[test]
fn compose_runs_the_data_stores_the_migrations_and_every_service() {
    let compose = yaml("deploy/docker/compose.yaml");
    let services = compose["services"].as_hash().expect("services");
    let names: BTreeSet<&str> = services.keys().filter_map(Yaml::as_str).collect();
    for wanted in [
        "postgres",
        "redis",
        "migrate",
        "gateway",
        "recall",
        "remember",
        "consolidator",
    ] {
        assert!(names.contains(wanted), "compose runs {wanted}");
    }
    // `<<: *mneme` merges the shared service definition (resolved here:
    // YAML 1.2 parsers keep merge keys as they are).
    let field = |service: &str, key: &str| -> Yaml {
        let node = &compose["services"][service];
        match &node[key] {
            Yaml::BadValue => node["<<"][key].clone(),
            value => value.clone(),
        }
    };
    let command = |service: &str| field(service, "command")[0].as_str().map(str::to_owned);
    assert_eq!(command("migrate").as_deref(), Some("migrate"));
    for service in ["gateway", "recall", "remember", "consolidator"] {
        assert_eq!(command(service).as_deref(), Some(service));
        let environment = field(service, "environment");
        assert!(
            environment["MNEME_INTERNAL_TOKEN"].as_str().is_some(),
            "{service} shares the internal token"
        );
    }
    for setting in settings_named(&read("deploy/docker/compose.yaml")) {
        assert!(
            documented_settings().contains(&setting),
            "compose sets {setting}, which docs/CONFIG.md does not describe"
        );
    }
    let init = read("deploy/docker/initdb.sql");
    for role in [
        "mneme_service",
        "mneme_owner",
        "mneme_app",
        "EXTENSION IF NOT EXISTS vector",
    ] {
        assert!(init.contains(role), "initdb.sql: {role}");
    }
}

#[test]
fn alert_rules_have_a_severity_a_summary_and_a_runbook() {
    let rules = yaml("deploy/prometheus/alerts.yaml");
    let rules = rules["groups"][0]["rules"].as_vec().expect("rules");
    assert!(rules.len() >= 8);
    let mut names = BTreeSet::new();
    for rule in rules {
        let name = rule["alert"].as_str().expect("an alert name");
        assert!(names.insert(name), "{name} twice");
        assert!(
            rule["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
            "{name}"
        );
        assert!(
            matches!(
                rule["labels"]["severity"].as_str(),
                Some("critical" | "warning")
            ),
            "{name}"
        );
        assert!(rule["annotations"]["summary"].as_str().is_some(), "{name}");
        assert!(
            rule["annotations"]["runbook_url"]
                .as_str()
                .is_some_and(|url| url.starts_with("docs/OPERATIONS.md#")),
            "{name}"
        );
    }
}
