//! The tool registry: every tool mneme offers, described once.
//!
//! A [`ToolSpec`] holds a tool's name, texts, JSON schemas, required
//! permission, annotations and risk metadata, plus its handler. Everything
//! that exposes or guards tools reads this one registry: MCP `tools/list`
//! and `tools/call` (`crate::mcp`), the REST facade `POST /v1/tools/{name}`
//! and `/openapi.json` (`crate::rest`), and the access check
//! ([`Registry::authorize`]): a tool that is not registered cannot be
//! called by anybody (default deny).
//!
//! Tool implementations live in one submodule per concern: [`remember`],
//! [`recall`], [`edit`] (forget, amend, link), [`session`] (context,
//! reflect, tool_feedback), [`explore`] (stats, graph, history, traces),
//! [`connector`] (ChatGPT's search and fetch), [`guide`], [`admin`]
//! (memory_consolidate), [`surfacing`] (ratings and statistics of
//! surfaced memories) and [`proxy`] (`stm_proxy_read_more`, the further
//! chunks of long upstream results). Each turns JSON
//! arguments into a gRPC request and the reply into JSON. [`kinds`] holds
//! the enumerations they share.

mod admin;
mod connector;
mod edit;
mod explore;
mod guide;
pub(crate) mod kinds;
mod proxy;
mod recall;
pub(crate) mod reference;
pub(crate) mod remember;
mod session;
mod surfacing;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};

use mneme_core::{Error, Permission, Principal};
use rmcp::handler::server::common::{schema_for_input, schema_for_output};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::backends::Backends;

/// How much harm a mistaken call can do (shown to clients in `_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Risk {
    /// Reads only.
    Safe,
    /// Writes, but nothing is lost.
    Caution,
    /// Deletes or overwrites.
    Destructive,
}

impl Risk {
    fn as_str(self) -> &'static str {
        match self {
            Risk::Safe => "safe",
            Risk::Caution => "caution",
            Risk::Destructive => "destructive",
        }
    }
}

/// Reports progress of long tool calls (MCP progress notifications).
pub(crate) trait ProgressSink: Send + Sync {
    fn report(&self, done: u64, total: Option<u64>, message: Option<String>) -> BoxFuture<'_, ()>;
}

/// What a tool handler receives besides its arguments.
#[derive(Clone)]
pub(crate) struct ToolContext {
    pub(crate) backends: Backends,
    /// The surfacing engine (feedback and stats of surfaced memories).
    pub(crate) surfacer: Arc<crate::surfacing::Surfacer>,
    /// The MCP proxy (progressive results of upstream tools).
    pub(crate) proxy: Arc<crate::proxy::Proxy>,
    pub(crate) principal: Principal,
    pub(crate) progress: Option<Arc<dyn ProgressSink>>,
    /// The gateway's public base URL, for links in results.
    pub(crate) public_url: Arc<str>,
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
type Handler =
    Box<dyn Fn(ToolContext, JsonObject) -> BoxFuture<'static, Result<Value, Error>> + Send + Sync>;

/// One tool.
pub(crate) struct ToolSpec {
    pub(crate) name: &'static str,
    pub(crate) title: &'static str,
    pub(crate) description: &'static str,
    pub(crate) permission: Permission,
    pub(crate) risk: Risk,
    pub(crate) read_only: bool,
    pub(crate) destructive: bool,
    pub(crate) idempotent: bool,
    /// Listed and callable only for keys with the `admin` permission.
    pub(crate) requires_admin: bool,
    pub(crate) beta: bool,
    pub(crate) input_schema: Arc<JsonObject>,
    pub(crate) output_schema: Arc<JsonObject>,
    /// Realistic arguments, shown in `docs/TOOLS.md`. Ids of memories are
    /// written as the placeholders [`EXAMPLE_FRAGMENT_ID`] and
    /// [`EXAMPLE_OTHER_FRAGMENT_ID`].
    pub(crate) example: Option<Value>,
    /// Whether arguments parse as this tool's argument type.
    #[cfg(test)]
    check_arguments: fn(JsonObject) -> Result<(), Error>,
    handler: Handler,
}

/// Stands for the id of a memory in tool examples.
pub(crate) const EXAMPLE_FRAGMENT_ID: &str = "<fragment id>";
/// Stands for the id of a second memory in tool examples.
pub(crate) const EXAMPLE_OTHER_FRAGMENT_ID: &str = "<other fragment id>";
/// Stands for the `surfacing_id` of a block of surfaced memories.
pub(crate) const EXAMPLE_SURFACING_ID: &str = "<surfacing id>";

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The path of the first string (value or key) in `value` holding a NUL
/// character, which PostgreSQL text cannot store.
fn nul_path(value: &Value, path: &str) -> Option<String> {
    match value {
        Value::String(s) if s.contains('\0') => Some(path.to_owned()),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| nul_path(v, &format!("{path}[{i}]"))),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            let path = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            if k.contains('\0') {
                Some(path)
            } else {
                nul_path(v, &path)
            }
        }),
        _ => None,
    }
}

/// Parses tool arguments; failures are argument errors the caller can fix.
fn parse_arguments<A: DeserializeOwned>(arguments: JsonObject) -> Result<A, Error> {
    let arguments = Value::Object(arguments);
    if let Some(path) = nul_path(&arguments, "") {
        return Err(Error::invalid_argument(format!(
            "`{path}` contains a NUL character (\\u0000), which is not allowed"
        )));
    }
    serde_json::from_value(arguments)
        .map_err(|e| Error::invalid_argument(format!("invalid arguments: {e}")))
}

impl ToolSpec {
    /// A tool taking `A` and returning `R`; the schemas are derived from
    /// the two types. Defaults to a read-only, safe tool needing `read`.
    fn new<A, R, F, Fut>(
        name: &'static str,
        title: &'static str,
        description: &'static str,
        handler: F,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        R: Serialize + JsonSchema + 'static,
        F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<R, Error>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        Self {
            name,
            title,
            description,
            permission: Permission::Read,
            risk: Risk::Safe,
            read_only: true,
            destructive: false,
            idempotent: true,
            requires_admin: false,
            beta: false,
            input_schema: schema_for_input::<A>().expect("tool arguments are JSON objects"),
            output_schema: schema_for_output::<R>(),
            example: None,
            #[cfg(test)]
            check_arguments: |arguments| parse_arguments::<A>(arguments).map(drop),
            handler: Box::new(move |context, arguments| {
                let handler = Arc::clone(&handler);
                Box::pin(async move {
                    let arguments: A = parse_arguments(arguments)?;
                    let result = handler(context, arguments).await?;
                    mneme_core::json::to_value(&result).map_err(|error| {
                        tracing::error!(%error, "tool result does not serialise");
                        Error::internal()
                    })
                })
            }),
        }
    }

    /// Realistic arguments for the documentation (a JSON object).
    fn example(mut self, arguments: Value) -> Self {
        self.example = Some(arguments);
        self
    }

    /// A tool that writes without destroying anything.
    fn writes(mut self, idempotent: bool) -> Self {
        self.permission = Permission::Write;
        self.risk = Risk::Caution;
        self.read_only = false;
        self.idempotent = idempotent;
        self
    }

    /// A tool that deletes or overwrites.
    fn destroys(mut self, idempotent: bool) -> Self {
        self = self.writes(idempotent);
        self.risk = Risk::Destructive;
        self.destructive = true;
        self
    }

    /// The MCP description of the tool.
    pub(crate) fn to_mcp(&self) -> Tool {
        let annotations = ToolAnnotations::from_raw(
            Some(self.title.to_owned()),
            Some(self.read_only),
            Some(self.destructive),
            Some(self.idempotent),
            Some(false),
        );
        let mut tool = Tool::new_with_raw(
            self.name,
            Some(self.description.into()),
            self.input_schema.clone(),
        );
        tool.title = Some(self.title.to_owned());
        tool.output_schema = Some(self.output_schema.clone());
        tool.annotations = Some(annotations);
        let meta = json!({
            "mneme": {
                "permission": self.permission.as_str(),
                "riskLevel": self.risk.as_str(),
                "requiresAdmin": self.requires_admin,
                "idempotent": self.idempotent,
                "beta": self.beta,
            }
        });
        tool.meta = serde_json::from_value(meta).ok();
        tool
    }
}

/// A named set of tools a session may be restricted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Only reading tools.
    RecallOnly,
    /// Only writing tools.
    WriteOnly,
    /// Everything (the guide text adapts).
    Onboarding,
    /// Read-only inspection; for admin keys only.
    Audit,
}

impl Mode {
    pub(crate) fn parse(name: &str) -> Result<Self, Error> {
        match name {
            "recall-only" => Ok(Self::RecallOnly),
            "write-only" => Ok(Self::WriteOnly),
            "onboarding" => Ok(Self::Onboarding),
            "audit" => Ok(Self::Audit),
            other => Err(Error::invalid_argument(format!(
                "unknown mode `{other}` (expected recall-only, write-only, onboarding or audit)"
            ))),
        }
    }

    /// Whether the mode lets a session use a tool that is (not) read-only.
    fn allows(self, read_only: bool) -> bool {
        match self {
            Mode::RecallOnly | Mode::Audit => read_only,
            Mode::WriteOnly => !read_only,
            Mode::Onboarding => true,
        }
    }
}

/// The session's mode applied to a tool.
fn check_mode(name: &str, read_only: bool, principal: &Principal) -> Result<(), Error> {
    let mode = match principal.mode.as_deref() {
        Some(name) => Some(Mode::parse(name)?),
        None => None,
    };
    match mode {
        // Audit sessions are for administrators; for other keys the
        // mode is ignored, like an unknown preference.
        Some(Mode::Audit) if !principal.has(Permission::Admin) => Ok(()),
        Some(mode) if !mode.allows(read_only) => Err(Error::permission_denied(format!(
            "`{name}` is not available in this session's mode"
        ))),
        _ => Ok(()),
    }
}

/// The access check of an upstream's tool: `read` for tools annotated
/// read-only, `write` for every other (an unannotated tool may write), then
/// the session's mode, exactly as for mneme's own tools.
pub(crate) fn authorize_proxied(
    name: &str,
    read_only: bool,
    principal: &Principal,
) -> Result<(), Error> {
    principal.require(if read_only {
        Permission::Read
    } else {
        Permission::Write
    })?;
    check_mode(name, read_only, principal)
}

/// All tools, by name.
pub(crate) struct Registry {
    tools: BTreeMap<&'static str, ToolSpec>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

/// The registry, built once.
pub(crate) static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let mut tools = BTreeMap::new();
    let all = remember::tools()
        .into_iter()
        .chain(recall::tools())
        .chain(edit::tools())
        .chain(session::tools())
        .chain(explore::tools())
        .chain(connector::tools())
        .chain(guide::tools())
        .chain(admin::tools())
        .chain(surfacing::tools())
        .chain(proxy::tools());
    for spec in all {
        let name = spec.name;
        assert!(
            tools.insert(name, spec).is_none(),
            "tool `{name}` is registered twice"
        );
    }
    Registry { tools }
});

impl Registry {
    /// Every registered tool, in name order.
    #[cfg(test)]
    pub(crate) fn tools(&self) -> impl Iterator<Item = &ToolSpec> {
        self.tools.values()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.get(name)
    }

    /// Tools the principal may call, in name order.
    pub(crate) fn visible<'a>(
        &'a self,
        principal: &'a Principal,
    ) -> impl Iterator<Item = &'a ToolSpec> + 'a {
        self.tools
            .values()
            .filter(move |tool| Self::authorize(tool, principal).is_ok())
    }

    /// The access check: permission, admin-only tools, then the session's mode.
    pub(crate) fn authorize(tool: &ToolSpec, principal: &Principal) -> Result<(), Error> {
        principal.require(tool.permission)?;
        if tool.requires_admin {
            principal.require(Permission::Admin)?;
        }
        check_mode(tool.name, tool.read_only, principal)
    }

    /// Calls a tool for a principal: unknown tools and failed checks never
    /// reach a handler.
    pub(crate) async fn call(
        &self,
        name: &str,
        context: ToolContext,
        arguments: JsonObject,
    ) -> Result<Value, Error> {
        let tool = self
            .get(name)
            .ok_or_else(|| Error::invalid_argument(format!("unknown tool `{name}`")))?;
        Self::authorize(tool, &context.principal)?;
        let started = std::time::Instant::now();
        let result = (tool.handler)(context, without_client_context(arguments)).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) => error.code.as_str(),
        };
        crate::metrics::METRICS
            .tool_calls
            .with_label_values(&[tool.name, outcome])
            .observe(started.elapsed().as_secs_f64());
        result
    }
}

/// Drops `_`-prefixed arguments (`_keyId`, `_sessionId`, `_permissions`,
/// …). Some MCP servers pass the caller's identity to tools that way; here
/// identity comes only from authentication, and a client that sends such
/// fields must not be able to steer anything with them.
fn without_client_context(mut arguments: JsonObject) -> JsonObject {
    arguments.retain(|name, _| !name.starts_with('_'));
    arguments
}

#[cfg(test)]
mod tests {
    use mneme_core::principal::DEFAULT_AGENT_ID;
    use uuid::Uuid;

    use super::*;

    fn principal(permissions: &[Permission], mode: Option<&str>) -> Principal {
        Principal {
            tenant_id: Uuid::nil(),
            key_id: Uuid::nil(),
            group_key_ids: vec![],
            user_id: None,
            permissions: permissions.to_vec(),
            workspace: None,
            mode: mode.map(str::to_owned),
            session_id: None,
            agent_id: DEFAULT_AGENT_ID.into(),
        }
    }

    #[test]
    fn client_context_fields_never_reach_a_tool() {
        let arguments = serde_json::json!({
            "text": "deploys", "_keyId": "someone-else", "_permissions": ["admin"], "_sessionId": "s"
        });
        let kept = without_client_context(arguments.as_object().unwrap().clone());
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["text"]);
    }

    fn names(principal: &Principal) -> Vec<&'static str> {
        REGISTRY.visible(principal).map(|t| t.name).collect()
    }

    #[test]
    fn every_tool_declares_schemas_and_consistent_annotations() {
        for tool in REGISTRY.tools.values() {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&json!("object")),
                "{}",
                tool.name
            );
            assert_eq!(
                tool.output_schema.get("type"),
                Some(&json!("object")),
                "{}",
                tool.name
            );
            assert_eq!(
                tool.read_only,
                tool.permission == Permission::Read,
                "{}",
                tool.name
            );
            assert_eq!(
                tool.destructive,
                tool.risk == Risk::Destructive,
                "{}",
                tool.name
            );
            assert!(!tool.description.is_empty() && !tool.title.is_empty());
        }
    }

    /// Replaces the id placeholders of examples with real-looking ids.
    fn with_ids(value: &Value) -> Value {
        match value {
            Value::String(s) if s == EXAMPLE_FRAGMENT_ID || s == EXAMPLE_OTHER_FRAGMENT_ID => {
                Value::String(Uuid::now_v7().to_string())
            }
            Value::Array(items) => Value::Array(items.iter().map(with_ids).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), with_ids(v))).collect())
            }
            other => other.clone(),
        }
    }

    #[test]
    fn every_tool_has_an_example_that_parses_as_its_arguments() {
        for tool in REGISTRY.tools.values() {
            let example = tool
                .example
                .as_ref()
                .unwrap_or_else(|| panic!("`{}` has no example", tool.name));
            let Value::Object(arguments) = with_ids(example) else {
                panic!("the example of `{}` is not a JSON object", tool.name);
            };
            let known = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object);
            for name in arguments.keys() {
                assert!(
                    known.is_some_and(|p| p.contains_key(name)),
                    "the example of `{}` uses the undeclared argument `{name}`",
                    tool.name
                );
            }
            if let Err(error) = (tool.check_arguments)(arguments) {
                panic!(
                    "the example of `{}` does not parse: {}",
                    tool.name, error.message
                );
            }
        }
    }

    /// A misspelt filter silently ignored would answer a different question
    /// than the one asked (`search_traces` with `query` listed everything).
    #[test]
    fn every_tool_refuses_an_argument_it_does_not_declare() {
        for tool in REGISTRY.tools.values() {
            let Some(Value::Object(mut arguments)) = tool.example.as_ref().map(with_ids) else {
                panic!("`{}` has no example", tool.name);
            };
            arguments.insert("notAnArgument".into(), json!("x"));
            match (tool.check_arguments)(arguments) {
                Ok(()) => panic!("`{}` accepted an undeclared argument", tool.name),
                Err(error) => assert!(
                    error.message.contains("unknown field `notAnArgument`"),
                    "`{}`: {}",
                    tool.name,
                    error.message
                ),
            }
        }
    }

    #[test]
    fn permissions_decide_which_tools_are_visible() {
        let reader = names(&principal(&[Permission::Read], None));
        assert!(
            reader.contains(&"recall") && !reader.contains(&"remember"),
            "{reader:?}"
        );
        let writer = names(&principal(&[Permission::Write], None));
        assert!(
            writer.contains(&"remember") && !writer.contains(&"recall"),
            "{writer:?}"
        );
    }

    #[test]
    fn modes_are_enforced_for_every_tool() {
        let full = [Permission::Read, Permission::Write];
        let everything = [Permission::Read, Permission::Write, Permission::Admin];
        let recall_only = principal(&everything, Some("recall-only"));
        let write_only = principal(&everything, Some("write-only"));
        for tool in REGISTRY.tools.values() {
            assert_eq!(
                Registry::authorize(tool, &recall_only).is_ok(),
                tool.read_only,
                "{}",
                tool.name
            );
            assert_eq!(
                Registry::authorize(tool, &write_only).is_ok(),
                !tool.read_only,
                "{}",
                tool.name
            );
        }
        // Audit is an admin mode; other keys keep their normal tools.
        let not_admin = principal(&full, Some("audit"));
        assert!(names(&not_admin).contains(&"remember"));
        let admin = principal(&[Permission::Admin], Some("audit"));
        assert!(!names(&admin).contains(&"remember"));
    }
}
