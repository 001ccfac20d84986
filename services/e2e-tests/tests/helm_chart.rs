//! The Helm chart (`helm/mneme`) holds together without a cluster: Helm
//! itself renders it offline for several value sets (`helm/tools/render.py`
//! on the PyPI package `helm-python-sdk`, which bundles Helm's Go SDK), the
//! manifests validate against the Kubernetes API schemas of the oldest
//! version the chart supports and of the newest the pinned
//! `kubernetes-validate` knows (strict: unknown fields fail), yamllint
//! passes on them and on the values files, `helm lint --strict` passes, and
//! bad values are refused by `values.schema.json` before anything renders.
//! The assertions tie the manifests to the code: the probes hit the
//! endpoints the services serve, the gateway dials Services that exist on
//! the ports the backends listen on, the PrometheusRule is
//! `deploy/prometheus/alerts.yaml`, every `MNEME_*` setting is documented.
//!
//! The tools come from `MNEME_INSTALL_TEST_TOOLS=1 deploy/local/setup.sh`,
//! which exports their directory as `MNEME_TEST_HELM_TOOLS`; without them
//! the tests fail, never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use yaml_rust2::{Yaml, YamlLoader};

/// The chart's `kubeVersion` floor and the newest version the pinned
/// kubernetes-validate ships schemas for.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.27.0", "1.37.0"];
/// Kinds whose schemas come from CRDs (Prometheus Operator), not from
/// Kubernetes: kubernetes-validate cannot know them, so these tests check
/// their shape themselves.
const CRD_KINDS: [&str; 2] = ["ServiceMonitor", "PrometheusRule"];
const NAMESPACE: &str = "mneme";
const COMPONENTS: [&str; 4] = ["gateway", "recall", "remember", "consolidator"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Directory of the Python packages (helm_python, kubernetes_validate,
/// yamllint); fails the test with what to do when they are missing.
fn tools() -> String {
    let dir = std::env::var("MNEME_TEST_HELM_TOOLS").unwrap_or_else(|_| {
        panic!(
            "MNEME_TEST_HELM_TOOLS is not set: run `MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh` \
             and `source ~/.local/share/mneme/env` (./deploy/local/test.sh does both)"
        )
    });
    let check = Command::new("python3")
        .args(["-c", "import helm_python, kubernetes_validate, yamllint"])
        .env("PYTHONPATH", &dir)
        .output()
        .expect("python3 runs");
    assert!(
        check.status.success(),
        "the Helm test tools are missing from MNEME_TEST_HELM_TOOLS={dir}: run \
         `MNEME_INSTALL_TEST_TOOLS=1 ./deploy/local/setup.sh`\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    dir
}

/// Runs `python3 <args>` with the tools on PYTHONPATH and `stdin` as input.
fn python(args: &[&str], stdin: &str) -> std::process::Output {
    let mut child = Command::new("python3")
        .args(args)
        .current_dir(root())
        .env("PYTHONPATH", tools())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("python3 finishes")
}

/// `helm template` of the chart with these values files (paths relative
/// to the repository), as `Ok(manifests)` or `Err(Helm's message)`.
fn render(values: &[&str], extra: &[&str]) -> Result<String, String> {
    let mut args = vec![
        "helm/tools/render.py",
        "helm/mneme",
        "--release",
        "mneme",
        "--namespace",
        NAMESPACE,
    ];
    for file in values {
        args.extend(["-f", file]);
    }
    args.extend(extra);
    let out = python(&args, "");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("UTF-8 manifests"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Writes `values` (YAML) to a file of its own and renders the defaults
/// plus the credentials, overridden by it.
fn render_with(name: &str, values: &str) -> Result<String, String> {
    let file = TempFile::new(name, values);
    render(&["helm/mneme/ci/default-values.yaml", file.path()], &[])
}

/// A file in the temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("mneme-helm-{}-{name}.yaml", std::process::id()));
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Validates a rendered stream with kubernetes-validate (strict, every
/// version in KUBERNETES_VERSIONS) and yamllint; only CRD kinds may lack a
/// schema.
fn validate(what: &str, manifests: &str) {
    // A file, not stdin: kubernetes-validate reads its input once per version.
    let file = TempFile::new(
        &what.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
        manifests,
    );
    let mut args = vec!["-m", "kubernetes_validate", "--strict", "--quiet"];
    for version in KUBERNETES_VERSIONS {
        args.extend(["-k", version]);
    }
    args.push(file.path());
    let out = python(&args, "");
    let report = String::from_utf8_lossy(&out.stdout);
    for line in report.lines() {
        let unknown_crd = line.starts_with("WARN")
            && CRD_KINDS
                .iter()
                .any(|kind| line.contains(&format!("schema for kind {kind} ")));
        assert!(
            unknown_crd || line.trim().is_empty(),
            "{what}: kubernetes-validate: {line}\n{report}"
        );
    }
    assert!(
        out.status.success(),
        "{what}: kubernetes-validate failed\n{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    yamllint(what, manifests);
}

fn yamllint(what: &str, text: &str) {
    let out = python(
        &[
            "-m",
            "yamllint",
            "--strict",
            "-c",
            "helm/.yamllint",
            "-f",
            "parsable",
            "-",
        ],
        text,
    );
    assert!(
        out.status.success(),
        "{what}: yamllint\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The rendered manifests, parsed, checked by kubernetes-validate and
/// yamllint first.
struct Manifests(Vec<Yaml>);

impl Manifests {
    fn of(what: &str, values: &[&str]) -> Self {
        let text = render(values, &[]).unwrap_or_else(|e| panic!("{what} does not render: {e}"));
        validate(what, &text);
        let documents = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: not YAML: {e}"))
            .into_iter()
            .filter(|d| !d.is_null())
            .collect();
        Self(documents)
    }

    fn all(&self, kind: &str) -> Vec<&Yaml> {
        self.0
            .iter()
            .filter(|d| d["kind"].as_str() == Some(kind))
            .collect()
    }

    fn names(&self, kind: &str) -> BTreeSet<&str> {
        self.all(kind)
            .into_iter()
            .map(|d| d["metadata"]["name"].as_str().expect("a name"))
            .collect()
    }

    fn get(&self, kind: &str, name: &str) -> &Yaml {
        self.0
            .iter()
            .find(|d| {
                d["kind"].as_str() == Some(kind) && d["metadata"]["name"].as_str() == Some(name)
            })
            .unwrap_or_else(|| panic!("no {kind} {name}; have {:?}", self.names(kind)))
    }

    fn deployment(&self, prefix: &str, component: &str) -> &Yaml {
        self.get("Deployment", &format!("{prefix}-{component}"))
    }

    /// The settings of a component's ConfigMap.
    fn settings(&self, prefix: &str, component: &str) -> BTreeMap<String, String> {
        let map = &self.get("ConfigMap", &format!("{prefix}-{component}"))["data"];
        map.as_hash()
            .expect("data")
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_owned(),
                    v.as_str().expect("string values").to_owned(),
                )
            })
            .collect()
    }
}

fn container(deployment: &Yaml) -> &Yaml {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container per pod");
    &containers[0]
}

fn strings(node: &Yaml) -> Vec<&str> {
    node.as_vec()
        .map(|v| v.iter().filter_map(Yaml::as_str).collect())
        .unwrap_or_default()
}

/// The container port of that name.
fn container_port(container: &Yaml, name: &str) -> i64 {
    container["ports"]
        .as_vec()
        .expect("ports")
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .and_then(|p| p["containerPort"].as_i64())
        .unwrap_or_else(|| panic!("no container port {name}"))
}

/// Names of the Secrets and keys a pod reads, with whether each is optional.
fn secret_refs(container: &Yaml) -> Vec<(String, String, bool)> {
    container["env"]
        .as_vec()
        .expect("env")
        .iter()
        .filter_map(|e| {
            let r = &e["valueFrom"]["secretKeyRef"];
            Some((
                r["name"].as_str()?.to_owned(),
                r["key"].as_str()?.to_owned(),
                r["optional"].as_bool().unwrap_or(false),
            ))
        })
        .collect()
}

/// Every `MNEME_*` name in `text`.
fn settings_named(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        .filter(|word| word.starts_with("MNEME_") && word.len() > "MNEME_".len())
        .map(str::to_owned)
        .collect()
}

/// The pod of every service and the migration runs locked down: non-root,
/// read-only root file system, no capabilities, RuntimeDefault seccomp, a
/// writable /tmp only, requests and limits for CPU and memory.
fn assert_locked_down(what: &str, pod: &Yaml) {
    let spec = &pod["spec"];
    assert_eq!(
        spec["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true),
        "{what}"
    );
    assert_eq!(
        spec["securityContext"]["runAsUser"].as_i64(),
        Some(10001),
        "{what}: the image's user"
    );
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"].as_str(),
        Some("RuntimeDefault"),
        "{what}"
    );
    assert_eq!(
        spec["automountServiceAccountToken"].as_bool(),
        Some(false),
        "{what}"
    );
    let container = &spec["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(
        security["readOnlyRootFilesystem"].as_bool(),
        Some(true),
        "{what}"
    );
    assert_eq!(
        security["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{what}"
    );
    assert_eq!(
        strings(&security["capabilities"]["drop"]),
        ["ALL"],
        "{what}"
    );
    let mounts = container["volumeMounts"].as_vec().expect("mounts");
    assert_eq!(mounts.len(), 1, "{what}: only /tmp is writable");
    assert_eq!(mounts[0]["mountPath"].as_str(), Some("/tmp"), "{what}");
    let volume = &spec["volumes"][0];
    assert_eq!(volume["name"], mounts[0]["name"], "{what}");
    assert!(
        !volume["emptyDir"].is_badvalue(),
        "{what}: /tmp is an emptyDir"
    );
    for bound in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                !container["resources"][bound][resource].is_badvalue(),
                "{what}: {bound}.{resource}"
            );
        }
    }
}

#[test]
fn the_charts_alert_rules_are_deploy_prometheus_alerts_yaml() {
    // A chart cannot read files outside its directory, so it keeps a copy;
    // this is what keeps the two one source of truth.
    assert!(
        read("helm/mneme/files/alerts.yaml") == read("deploy/prometheus/alerts.yaml"),
        "helm/mneme/files/alerts.yaml differs from deploy/prometheus/alerts.yaml: \
         cp deploy/prometheus/alerts.yaml helm/mneme/files/alerts.yaml"
    );
}

#[test]
fn the_defaults_render_every_service_wired_probed_and_locked_down() {
    let m = Manifests::of(
        "defaults + credentials",
        &["helm/mneme/ci/default-values.yaml"],
    );
    let chart = YamlLoader::load_from_str(&read("helm/mneme/Chart.yaml"))
        .unwrap()
        .remove(0);
    let app_version = chart["appVersion"].as_str().expect("appVersion");

    // The probes use what the services serve: the gateway's HTTP routes and
    // the backends' grpc.health.v1 (reporting "" as SERVING).
    let health = read("services/gateway/src/health.rs");
    assert!(health.contains(r#".route("/health""#) && health.contains(r#".route("/ready""#));
    let grpc_server = read("services/lib/proto/src/server.rs");
    assert!(grpc_server.contains("tonic_health::server::health_reporter()"));
    let metrics = read("services/lib/telemetry/src/metrics.rs");
    assert!(metrics.contains(r#""/metrics""#));

    let deployments: BTreeSet<String> = COMPONENTS.iter().map(|c| format!("mneme-{c}")).collect();
    assert_eq!(
        m.names("Deployment"),
        deployments.iter().map(String::as_str).collect()
    );
    for component in COMPONENTS {
        let deployment = m.deployment("mneme", component);
        let pod = &deployment["spec"]["template"];
        let container = container(deployment);
        assert_locked_down(component, pod);
        // One image for all; the first argument picks the service
        // (deploy/docker/entrypoint.sh).
        assert_eq!(
            container["image"].as_str(),
            Some(format!("mneme:{app_version}").as_str())
        );
        assert_eq!(strings(&container["args"]), [component]);
        assert_eq!(
            container["envFrom"][0]["configMapRef"]["name"].as_str(),
            Some(format!("mneme-{component}").as_str())
        );
        let settings = m.settings("mneme", component);
        let metrics_port = container_port(container, "metrics");
        assert_eq!(
            settings["MNEME_METRICS_ADDR"],
            format!("0.0.0.0:{metrics_port}")
        );
        assert!(
            pod["metadata"]["annotations"]["checksum/config"]
                .as_str()
                .is_some(),
            "{component}: a settings change rolls the pods"
        );

        let (alive, ready) = (&container["livenessProbe"], &container["readinessProbe"]);
        assert_eq!(
            container["startupProbe"]["failureThreshold"]
                .as_i64()
                .map(|n| n > 1),
            Some(true)
        );
        match component {
            "gateway" => {
                let port = container_port(container, "http");
                assert_eq!(settings["MNEME_HTTP_ADDR"], format!("0.0.0.0:{port}"));
                for probe in [&container["startupProbe"], alive] {
                    assert_eq!(probe["httpGet"]["path"].as_str(), Some("/health"));
                    assert_eq!(probe["httpGet"]["port"].as_str(), Some("http"));
                }
                assert_eq!(ready["httpGet"]["path"].as_str(), Some("/ready"));
                // Drains: serves during the preStop sleep, then
                // MNEME_SHUTDOWN_GRACE_SECS (20 s) within the grace period.
                let grace = pod["spec"]["terminationGracePeriodSeconds"]
                    .as_i64()
                    .unwrap();
                assert!(grace > 5 + 20, "grace period {grace}");
            }
            "recall" | "remember" => {
                let port = container_port(container, "grpc");
                let setting = format!("MNEME_{}_GRPC_ADDR", component.to_uppercase());
                assert_eq!(settings[&setting], format!("0.0.0.0:{port}"));
                for probe in [&container["startupProbe"], alive, ready] {
                    assert_eq!(probe["grpc"]["port"].as_i64(), Some(port), "{component}");
                }
            }
            _ => {
                for probe in [&container["startupProbe"], alive, ready] {
                    assert_eq!(probe["tcpSocket"]["port"].as_str(), Some("metrics"));
                }
            }
        }

        // Credentials come from the chart's Secret; the required ones must
        // be in it, the optional ones may be absent.
        let secret = m.get("Secret", "mneme");
        for (name, key, optional) in secret_refs(container) {
            assert_eq!(name, "mneme", "{component}: {key}");
            assert!(
                optional || !secret["stringData"][key.as_str()].is_badvalue(),
                "{component} needs {key}, which the Secret lacks"
            );
        }
        assert!(
            secret_refs(container)
                .iter()
                .any(|(_, key, _)| key == "MNEME_INTERNAL_TOKEN")
        );
    }

    // The gateway dials the backends' headless Services (every ready pod's
    // address), on the port each backend listens on.
    let gateway = m.settings("mneme", "gateway");
    for backend in ["recall", "remember"] {
        let url = &gateway[&format!("MNEME_{}_URL", backend.to_uppercase())];
        let service = format!("mneme-{backend}-headless");
        let port = container_port(container(m.deployment("mneme", backend)), "grpc");
        assert_eq!(
            url,
            &format!("http://{service}.{NAMESPACE}.svc.cluster.local:{port}")
        );
        let service = m.get("Service", &service);
        assert_eq!(service["spec"]["clusterIP"].as_str(), Some("None"));
        let grpc = &service["spec"]["ports"][0];
        assert_eq!(
            (grpc["port"].as_i64(), grpc["targetPort"].as_str()),
            (Some(port), Some("grpc"))
        );
        assert_eq!(
            service["spec"]["selector"]["app.kubernetes.io/component"].as_str(),
            Some(backend)
        );
    }
    // The gateway's own Service carries HTTP alone (its type may be
    // LoadBalancer; metrics stay private).
    let ports = m.get("Service", "mneme-gateway")["spec"]["ports"].clone();
    assert_eq!(ports.as_vec().map(Vec::len), Some(1));
    assert_eq!(ports[0]["targetPort"].as_str(), Some("http"));
    assert_eq!(gateway["MNEME_PUBLIC_URL"], "https://mneme.example.com");
    assert_eq!(
        gateway["MNEME_TRUSTED_PROXY_HOPS"], "0",
        "no Ingress, no trusted proxy"
    );

    // Autoscaling owns the replica count of the gateway and the backends
    // (two at least); the consolidator runs one pod.
    for component in ["gateway", "recall", "remember"] {
        assert!(m.deployment("mneme", component)["spec"]["replicas"].is_badvalue());
        let hpa = m.get("HorizontalPodAutoscaler", &format!("mneme-{component}"));
        assert_eq!(
            hpa["spec"]["scaleTargetRef"]["name"].as_str(),
            Some(format!("mneme-{component}").as_str())
        );
        assert_eq!(hpa["spec"]["minReplicas"].as_i64(), Some(2));
        assert_eq!(
            hpa["spec"]["metrics"].as_vec().map(Vec::len),
            Some(1),
            "CPU only"
        );
        assert_eq!(
            hpa["spec"]["metrics"][0]["resource"]["name"].as_str(),
            Some("cpu")
        );
    }
    assert_eq!(
        m.deployment("mneme", "consolidator")["spec"]["replicas"].as_i64(),
        Some(1)
    );
    assert_eq!(m.names("PodDisruptionBudget").len(), 4);

    // The migration runs as a pre-install/pre-upgrade hook, after its own
    // hook Secret (the chart's Secret does not exist yet at that point).
    let job = m.get("Job", "mneme-migrate");
    let hooks = &job["metadata"]["annotations"];
    assert_eq!(
        hooks["helm.sh/hook"].as_str(),
        Some("pre-install,pre-upgrade")
    );
    assert_locked_down("migrate", &job["spec"]["template"]);
    let migrate = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(strings(&migrate["args"]), ["migrate"]);
    assert_eq!(
        secret_refs(migrate),
        [(
            "mneme-migrate".to_owned(),
            "MNEME_MIGRATE_DATABASE_URL".to_owned(),
            false
        )]
    );
    let hook_secret = m.get("Secret", "mneme-migrate");
    assert_eq!(
        hook_secret["metadata"]["annotations"]["helm.sh/hook"].as_str(),
        Some("pre-install,pre-upgrade")
    );
    let weight = |d: &Yaml| -> i64 {
        d["metadata"]["annotations"]["helm.sh/hook-weight"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        weight(hook_secret) < weight(job),
        "the Secret is created before the Job"
    );
    assert!(!hook_secret["stringData"]["MNEME_MIGRATE_DATABASE_URL"].is_badvalue());

    for kind in [
        "Ingress",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
    ] {
        assert!(m.all(kind).is_empty(), "{kind} is off by default");
    }

    // Every setting the chart sets is one the services know.
    let documented = settings_named(&read("docs/CONFIG.md"));
    let text = render(&["helm/mneme/ci/full-values.yaml"], &[]).unwrap()
        + &render(&["helm/mneme/ci/default-values.yaml"], &[]).unwrap();
    for setting in settings_named(&text) {
        assert!(
            documented.contains(&setting),
            "the chart sets {setting}, which docs/CONFIG.md does not describe"
        );
    }
}

#[test]
fn everything_enabled_renders_ingress_monitoring_network_policies_and_an_existing_secret() {
    let m = Manifests::of("everything enabled", &["helm/mneme/ci/full-values.yaml"]);

    // Credentials from Secrets the operator manages: the chart makes none.
    assert!(
        m.all("Secret").is_empty(),
        "no chart Secret with existingSecret"
    );
    for component in COMPONENTS {
        let container = container(m.deployment("mneme", component));
        assert!(
            container["image"]
                .as_str()
                .unwrap()
                .ends_with(&format!("@sha256:{}", "0".repeat(64)))
        );
        for (name, _, _) in secret_refs(container) {
            assert_eq!(name, "mneme-credentials");
        }
    }
    let job = m.get("Job", "mneme-migrate");
    let migrate = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(secret_refs(migrate)[0].0, "mneme-migration-credentials");
    assert_eq!(
        job["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some("mneme-migrate")
    );

    // Ingress with TLS in front of the gateway's Service.
    let ingress = m.get("Ingress", "mneme-gateway");
    assert_eq!(
        strings(&ingress["spec"]["tls"][0]["hosts"]),
        ["mneme.example.com"]
    );
    assert_eq!(
        ingress["spec"]["tls"][0]["secretName"].as_str(),
        Some("mneme-tls")
    );
    let backend = &ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"];
    assert_eq!(backend["name"].as_str(), Some("mneme-gateway"));
    let service = m.get("Service", "mneme-gateway");
    let port_name = backend["port"]["name"].as_str().unwrap();
    assert!(
        service["spec"]["ports"]
            .as_vec()
            .unwrap()
            .iter()
            .any(|p| p["name"].as_str() == Some(port_name))
    );
    let gateway = m.settings("mneme", "gateway");
    assert_eq!(
        gateway["MNEME_PUBLIC_URL"], "https://mneme.example.com",
        "derived from the TLS host"
    );
    assert_eq!(
        gateway["MNEME_TRUSTED_PROXY_HOPS"], "1",
        "the ingress controller is one hop"
    );
    assert_eq!(
        gateway["MNEME_SESSION_TTL_SECS"], "2592000",
        "whole numbers stay integers"
    );
    assert_eq!(
        gateway["MNEME_ALLOWED_ORIGINS"],
        "https://claude.ai,https://chatgpt.com"
    );
    assert!(
        !m.settings("mneme", "recall")
            .contains_key("MNEME_ALLOWED_ORIGINS"),
        "component settings stay in their component"
    );

    // The ServiceMonitor scrapes exactly one Service per component, on its
    // metrics port, under a job name the alert rules match (job=~"mneme.*").
    let monitor = m.get("ServiceMonitor", "mneme");
    let job_label = monitor["spec"]["jobLabel"].as_str().expect("jobLabel");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"].as_str(),
        Some("metrics")
    );
    assert_eq!(
        monitor["metadata"]["labels"]["release"].as_str(),
        Some("prometheus")
    );
    let scraped: Vec<&Yaml> = m
        .all("Service")
        .into_iter()
        .filter(|s| !s["metadata"]["labels"][job_label].is_badvalue())
        .collect();
    let mut scraped_components: Vec<&str> = scraped
        .iter()
        .map(|s| {
            s["spec"]["selector"]["app.kubernetes.io/component"]
                .as_str()
                .unwrap()
        })
        .collect();
    scraped_components.sort_unstable();
    let mut expected = COMPONENTS.to_vec();
    expected.sort_unstable();
    assert_eq!(scraped_components, expected);
    for service in scraped {
        assert!(
            service["metadata"]["labels"][job_label]
                .as_str()
                .unwrap()
                .starts_with("mneme")
        );
        assert!(
            service["spec"]["ports"]
                .as_vec()
                .unwrap()
                .iter()
                .any(|p| p["name"].as_str() == Some("metrics"))
        );
        for (key, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_hash()
            .unwrap()
        {
            assert_eq!(&service["metadata"]["labels"][key.as_str().unwrap()], value);
        }
    }

    // The PrometheusRule carries deploy/prometheus/alerts.yaml's groups.
    let rule = m.get("PrometheusRule", "mneme");
    let alerts = YamlLoader::load_from_str(&read("deploy/prometheus/alerts.yaml"))
        .unwrap()
        .remove(0);
    assert_eq!(rule["spec"]["groups"], alerts["groups"]);
    assert!(rule["spec"]["groups"][0]["rules"].as_vec().unwrap().len() >= 8);

    // NetworkPolicies: the gateway from the ingress controller, the backends
    // from the gateway, metrics from Prometheus; egress to DNS, the stores,
    // the backends (gateway) and the configured destinations.
    assert_eq!(
        m.names("NetworkPolicy").len(),
        5,
        "{:?}",
        m.names("NetworkPolicy")
    );
    let policy = |component: &str| m.get("NetworkPolicy", &format!("mneme-{component}"));
    let from_ports = |component: &str| -> Vec<(String, String)> {
        policy(component)["spec"]["ingress"]
            .as_vec()
            .unwrap()
            .iter()
            .flat_map(|rule| {
                let from = &rule["from"][0];
                let peer = from["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                    .as_str()
                    .or(from["podSelector"]["matchLabels"]["app.kubernetes.io/component"].as_str())
                    .unwrap_or("?")
                    .to_owned();
                rule["ports"]
                    .as_vec()
                    .unwrap()
                    .iter()
                    .map(move |p| (peer.clone(), p["port"].as_str().unwrap_or("?").to_owned()))
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_owned(), b.to_owned());
    assert_eq!(
        from_ports("gateway"),
        [pair("ingress-nginx", "http"), pair("monitoring", "metrics")]
    );
    for backend in ["recall", "remember"] {
        assert_eq!(
            from_ports(backend),
            [pair("gateway", "grpc"), pair("monitoring", "metrics")]
        );
    }
    assert_eq!(from_ports("consolidator"), [pair("monitoring", "metrics")]);
    assert!(
        policy("migrate")["spec"]["ingress"]
            .as_vec()
            .unwrap()
            .is_empty()
    );
    let egress_ports = |component: &str| -> BTreeSet<i64> {
        policy(component)["spec"]["egress"]
            .as_vec()
            .unwrap()
            .iter()
            .flat_map(|rule| {
                rule["ports"]
                    .as_vec()
                    .unwrap()
                    .iter()
                    .filter_map(|p| p["port"].as_i64())
            })
            .collect()
    };
    assert_eq!(
        egress_ports("gateway"),
        [53, 443, 4317, 5432, 6379, 26379, 50051, 50052].into()
    );
    assert_eq!(
        egress_ports("recall"),
        [53, 443, 4317, 5432, 6379, 26379].into()
    );
    assert_eq!(
        egress_ports("migrate"),
        [53, 443, 4317, 5432].into(),
        "the migration needs no Redis"
    );
    let postgres = &policy("recall")["spec"]["egress"][1];
    assert_eq!(
        postgres["to"][0]["ipBlock"]["cidr"].as_str(),
        Some("10.20.0.0/24")
    );
    for kind in ["Ingress", "Egress"] {
        for component in COMPONENTS {
            assert!(strings(&policy(component)["spec"]["policyTypes"]).contains(&kind));
        }
    }

    // Autoscaling on CPU and on the request rate from a custom-metrics adapter.
    let hpa = m.get("HorizontalPodAutoscaler", "mneme-gateway");
    let metrics = hpa["spec"]["metrics"].as_vec().unwrap();
    assert_eq!(metrics[1]["type"].as_str(), Some("Pods"));
    assert_eq!(
        metrics[1]["pods"]["metric"]["name"].as_str(),
        Some("mneme_http_requests_per_second")
    );
    assert_eq!(
        hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"].as_i64(),
        Some(300)
    );
    assert!(
        !m.get("HorizontalPodAutoscaler", "mneme-consolidator")
            .is_badvalue()
    );
    assert_eq!(
        m.get("PodDisruptionBudget", "mneme-remember")["spec"]["minAvailable"].as_i64(),
        Some(1)
    );
}

#[test]
fn managed_values_render_fixed_replicas_cluster_ip_backends_and_every_credential() {
    let m = Manifests::of(
        "managed stores, fixed replicas",
        &["helm/mneme/ci/managed-values.yaml"],
    );
    for (component, replicas) in [
        ("gateway", 3),
        ("recall", 2),
        ("remember", 2),
        ("consolidator", 2),
    ] {
        let deployment = m.deployment("memory", component);
        assert_eq!(
            deployment["spec"]["replicas"].as_i64(),
            Some(replicas),
            "{component}"
        );
        assert_eq!(
            deployment["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
            Some("default")
        );
        assert!(deployment["spec"]["template"]["spec"]["topologySpreadConstraints"].is_badvalue());
    }
    assert!(m.all("HorizontalPodAutoscaler").is_empty());
    assert!(m.all("Job").is_empty(), "migrations are off");
    assert!(m.all("ServiceAccount").is_empty());
    assert_eq!(m.names("PodDisruptionBudget").len(), 3);

    let gateway = m.settings("memory", "gateway");
    assert_eq!(gateway["MNEME_PUBLIC_URL"], "https://memory.example.com");
    assert_eq!(gateway["MNEME_TRUSTED_PROXY_HOPS"], "2");
    for backend in ["recall", "remember"] {
        let url = &gateway[&format!("MNEME_{}_URL", backend.to_uppercase())];
        let service = m.get("Service", &format!("memory-{backend}"));
        let port = service["spec"]["ports"][0]["port"].as_i64().unwrap();
        assert_eq!(
            url,
            &format!("http://memory-{backend}.{NAMESPACE}.svc.cluster.local:{port}")
        );
        assert_eq!(service["spec"]["type"].as_str(), Some("ClusterIP"));
    }

    // The chart's Secret holds every credential given, and each pod reads them.
    let secret = m.get("Secret", "memory");
    let keys: BTreeSet<&str> = secret["stringData"]
        .as_hash()
        .unwrap()
        .keys()
        .filter_map(Yaml::as_str)
        .collect();
    let refs: BTreeSet<String> = secret_refs(container(m.deployment("memory", "recall")))
        .into_iter()
        .map(|(_, key, _)| key)
        .collect();
    assert_eq!(keys.len(), 9, "{keys:?}");
    assert_eq!(keys, refs.iter().map(String::as_str).collect());
    assert!(
        secret["stringData"]["MNEME_REDIS_URL"]
            .as_str()
            .unwrap()
            .starts_with("redis-cluster://")
    );
}

#[test]
fn long_release_names_still_make_valid_resource_names() {
    let release = "a-release-name-long-enough-to-push-every-resource-name-past-sixty-three";
    let text =
        render(&["helm/mneme/ci/full-values.yaml"], &["--release", release]).expect("renders");
    let documents = YamlLoader::load_from_str(&text).unwrap();
    assert!(documents.len() > 20);
    for document in documents.iter().filter(|d| !d.is_null()) {
        let name = document["metadata"]["name"].as_str().expect("a name");
        // Service names are DNS-1035 labels: at most 63 characters of
        // lowercase letters, digits and '-', starting with a letter.
        assert!(
            name.len() <= 63
                && name.starts_with(|c: char| c.is_ascii_lowercase())
                && !name.ends_with('-')
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{} name `{name}` is not a valid DNS label",
            document["kind"].as_str().unwrap()
        );
    }
}

#[test]
fn an_upgrade_runs_the_migration_hook_again() {
    let text = render(&["helm/mneme/ci/default-values.yaml"], &["--upgrade"]).expect("renders");
    validate("upgrade", &text);
    assert!(text.contains("helm.sh/hook: pre-install,pre-upgrade"));
    assert!(text.contains("name: mneme-migrate"));
}

#[test]
fn bad_values_are_refused_before_anything_renders() {
    let bare = render(&[], &[]).expect_err("the defaults alone lack credentials");
    assert!(bare.contains("postgresql.url is required"), "{bare}");

    for (case, values, message) in [
        (
            "a string count",
            "gateway:\n  replicaCount: \"two\"\n",
            "/gateway/replicaCount",
        ),
        (
            "an unknown top-level key",
            "replicaCount: 2\n",
            "'replicaCount' not allowed",
        ),
        (
            "an unknown component key",
            "recall:\n  replicas: 2\n",
            "'replicas' not allowed",
        ),
        (
            "a misspelt section",
            "ingres:\n  enabled: true\n",
            "'ingres' not allowed",
        ),
        (
            "a wrong enum",
            "gateway:\n  backendService: roundRobin\n",
            "/gateway/backendService",
        ),
        (
            "a secret among the settings",
            "config:\n  MNEME_DATABASE_URL: postgres://x\n",
            "MNEME_DATABASE_URL",
        ),
        (
            "a setting that is not MNEME_*",
            "config:\n  RUST_LOG: debug\n",
            "RUST_LOG",
        ),
        (
            "a short internal token",
            "secrets:\n  internalToken: short\n",
            "/secrets/internalToken",
        ),
        (
            "an unknown Redis scheme",
            "redis:\n  url: memcached://cache:11211\n",
            "/redis/url",
        ),
        (
            "a probe key typo",
            "gateway:\n  probes:\n    liveness:\n      periodSecond: 5\n",
            "'periodSecond' not allowed",
        ),
        (
            "inline credentials beside an existing Secret",
            "secrets:\n  existingSecret: mine\n",
            "postgresql.url is set, but so is secrets.existingSecret",
        ),
    ] {
        let error = render_with(&case.replace(' ', "-"), values)
            .expect_err(&format!("{case} must not render"));
        assert!(
            error.contains(message),
            "{case}: expected `{message}` in\n{error}"
        );
    }
    // The same checks accept the good values (so the refusals above are
    // the bad values' doing).
    render_with("good", "gateway:\n  replicaCount: 3\n").expect("good values render");
}

#[test]
fn the_validators_reject_a_broken_manifest() {
    // kubernetes-validate in strict mode and yamllint must actually fail on
    // bad input, or the tests above would prove nothing.
    let good = render(&["helm/mneme/ci/default-values.yaml"], &[]).unwrap();
    for (case, broken) in [
        (
            "unknown field",
            good.replacen(
                "revisionHistoryLimit: 5",
                "revisionHistoryLimit: 5\n  replicaz: 3",
                1,
            ),
        ),
        (
            "wrong type",
            good.replacen(
                "terminationGracePeriodSeconds: 35",
                "terminationGracePeriodSeconds: soon",
                1,
            ),
        ),
    ] {
        assert_ne!(broken, good, "{case}");
        let out = python(
            &[
                "-m",
                "kubernetes_validate",
                "--strict",
                "--quiet",
                "-k",
                KUBERNETES_VERSIONS[0],
                "-",
            ],
            &broken,
        );
        assert!(
            !out.status.success(),
            "kubernetes-validate accepted a manifest with a {case}"
        );
    }
    let out = python(
        &["-m", "yamllint", "--strict", "-c", "helm/.yamllint", "-"],
        &good.replacen("kind: Deployment", "kind: Deployment   ", 1),
    );
    assert!(!out.status.success(), "yamllint accepted trailing spaces");
}

#[test]
fn helm_lint_and_yamllint_pass_and_every_value_is_documented() {
    for values in ["default", "full", "managed"] {
        let file = format!("helm/mneme/ci/{values}-values.yaml");
        let out = python(
            &["helm/tools/render.py", "helm/mneme", "--lint", "-f", &file],
            "",
        );
        assert!(
            out.status.success(),
            "helm lint --strict with {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        yamllint(&file, &read(&file));
    }
    let values = read("helm/mneme/values.yaml");
    yamllint("values.yaml", &values);
    yamllint("Chart.yaml", &read("helm/mneme/Chart.yaml"));

    // Every key of values.yaml down to three levels has a comment right
    // above it, unless it sits inside an object the chart passes to
    // Kubernetes as it is (resources, security contexts, …): those are
    // documented by their parent.
    let schema: serde_json::Value =
        serde_json::from_str(&read("helm/mneme/values.schema.json")).expect("schema is JSON");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#");
    let resolve = |node: &serde_json::Value| -> serde_json::Value {
        match node["$ref"].as_str() {
            Some(reference) => {
                let name = reference
                    .strip_prefix("#/definitions/")
                    .expect("local $ref");
                schema["definitions"][name].clone()
            }
            None => node.clone(),
        }
    };
    let mut path: Vec<String> = Vec::new();
    let mut previous = "";
    let mut in_list_at: Option<usize> = None;
    for line in values.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.is_empty() {
            continue;
        }
        if let Some(list) = in_list_at {
            if indent > list || (indent == list && trimmed.starts_with('-')) {
                previous = line;
                continue;
            }
            in_list_at = None;
        }
        if trimmed.starts_with('#') {
            previous = line;
            continue;
        }
        if trimmed.starts_with('-') {
            in_list_at = Some(indent);
            previous = line;
            continue;
        }
        let key = trimmed.split(':').next().unwrap().to_owned();
        path.truncate(indent / 2);
        // The schema node of the parent, through the path.
        let mut parent = schema.clone();
        let mut passthrough = false;
        for step in &path {
            let node = resolve(&parent);
            match node["properties"].get(step) {
                Some(child) => parent = child.clone(),
                None => {
                    passthrough = true;
                    break;
                }
            }
        }
        let parent = resolve(&parent);
        if !passthrough && parent.get("properties").is_some() {
            assert!(
                parent["properties"].get(&key).is_some(),
                "values.yaml: {}.{key} is not in values.schema.json",
                path.join(".")
            );
            if indent <= 4 {
                assert!(
                    previous.trim_start().starts_with('#'),
                    "values.yaml: `{}{key}` has no comment above it",
                    path.iter().map(|p| format!("{p}.")).collect::<String>()
                );
            }
        }
        path.push(key);
        previous = line;
    }
}
