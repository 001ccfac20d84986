//! The REST facade over the tool registry, for scripts and ChatGPT GPT
//! Actions: `POST /v1/tools/{name}` with the tool's arguments as the JSON
//! body (a tenant's upstream tools, `prefix__tool`, answer too, with their
//! MCP result), `GET /openapi.json` describing the tools the caller may use, and
//! `GET /memories/{id}`, the address `search` and `fetch` results cite.
//! Same authentication, same checks and same handlers as MCP.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use mneme_core::{Error, ErrorCode, Principal};
use serde_json::{Map, Value, json};

use crate::App;
use crate::error::ApiError;
use crate::tools::{REGISTRY, ToolContext, ToolSpec};

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/v1/tools/{name}", post(call_tool))
        .route("/openapi.json", get(openapi))
        .route("/memories/{id}", get(memory))
}

fn context(app: &App, principal: Principal) -> ToolContext {
    ToolContext {
        backends: app.backends.clone(),
        surfacer: app.surfacer.clone(),
        proxy: app.proxy.clone(),
        principal,
        progress: None,
        public_url: app.public_url.as_str().into(),
    }
}

/// One memory, as the `fetch` tool returns it.
async fn memory(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Response {
    let mut arguments = Map::new();
    arguments.insert("id".into(), Value::String(id));
    match REGISTRY
        .call("fetch", context(&app, principal), arguments)
        .await
    {
        Ok(result) => (StatusCode::OK, Json(result)).into_response(),
        Err(error) => ApiError(error).into_response(),
    }
}

async fn call_tool(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arguments = match arguments_of(&headers, &body) {
        Ok(arguments) => arguments,
        Err((status, error)) => {
            let mut response = ApiError(error).into_response();
            *response.status_mut() = status;
            return response;
        }
    };
    if REGISTRY.get(&name).is_none() {
        // A tenant's upstream tool answers with its MCP result as JSON
        // (`content`, `structuredContent`, `isError`), shaped and
        // surfaced like on `/mcp`.
        return match app
            .proxy
            .call(&app.surfacer, &principal, &name, arguments)
            .await
        {
            Some(Ok(result)) => (StatusCode::OK, Json(result)).into_response(),
            Some(Err(error)) => ApiError(error).into_response(),
            None => ApiError(Error::new(
                ErrorCode::NotFound,
                format!("unknown tool `{name}`"),
            ))
            .into_response(),
        };
    }
    match REGISTRY
        .call(&name, context(&app, principal), arguments)
        .await
    {
        Ok(result) => (StatusCode::OK, Json(result)).into_response(),
        Err(error) => ApiError(error).into_response(),
    }
}

/// A tool's arguments from a request body: a JSON object, read as strictly
/// as on `/mcp` (a repeated name is refused); an empty body is no
/// arguments. Refusals speak the error vocabulary rather than axum's
/// plain-text rejections.
fn arguments_of(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Map<String, Value>, (StatusCode, Error)> {
    if body.trim_ascii().is_empty() {
        return Ok(Map::new());
    }
    if !is_json(headers) {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Error::invalid_argument(
                "send the tool's arguments as a JSON object with `Content-Type: application/json`",
            ),
        ));
    }
    let refused = |message: String| (StatusCode::BAD_REQUEST, Error::invalid_argument(message));
    match mneme_core::json::from_slice(body) {
        Ok(Value::Object(arguments)) => Ok(arguments),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(refused(
            "the request body must be a JSON object of tool arguments".into(),
        )),
        Err(error) => Err(refused(format!(
            "the request body is not valid JSON: {error}"
        ))),
    }
}

/// `application/json`, or a `+json` type, with any parameters.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(content_type) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media_type = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    media_type == "application/json"
        || (media_type.starts_with("application/") && media_type.ends_with("+json"))
}

/// OpenAPI 3.1 for the caller's tools: the registry's, then those of the
/// tenant's upstreams the caller may call.
async fn openapi(
    State(app): State<App>,
    Extension(principal): Extension<Principal>,
) -> Json<Value> {
    let mut document = openapi_document(&app.public_url, REGISTRY.visible(&principal));
    add_upstream_tools(&mut document, &app.proxy.list_tools(&principal).await);
    Json(document)
}

/// Adds `POST /v1/tools/{prefix__tool}` for upstream tools. Their answer is
/// the MCP result as JSON; their schema definitions are namespaced by the
/// tool's name, since two upstreams may name theirs alike.
fn add_upstream_tools(document: &mut Value, tools: &[rmcp::model::Tool]) {
    let mut components = Map::new();
    let mut paths = Map::new();
    for tool in tools {
        let input = hoist_definitions_as(
            &Value::Object((*tool.input_schema).clone()),
            &mut components,
            &format!("{}.", tool.name),
        );
        let error = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
        paths.insert(
            format!("/v1/tools/{}", tool.name),
            json!({"post": {
                "operationId": tool.name,
                "summary": tool.title.clone().unwrap_or_else(|| tool.name.to_string()),
                "description": tool.description,
                "x-mneme-upstream": true,
                "requestBody": {"required": true, "content": {"application/json": {"schema": input}}},
                "responses": {
                    "200": {"description": "the upstream tool's MCP result", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/UpstreamResult"}}}},
                    "400": error, "401": error, "403": error, "404": error, "429": error, "503": error
                }
            }}),
        );
    }
    if tools.is_empty() {
        return;
    }
    components.insert(
        "UpstreamResult".into(),
        json!({
            "type": "object",
            "required": ["content"],
            "properties": {
                "content": {"type": "array", "items": {"type": "object"}},
                "structuredContent": {},
                "isError": {"type": "boolean"}
            }
        }),
    );
    if let Some(existing) = document["paths"].as_object_mut() {
        existing.extend(paths);
    }
    if let Some(existing) = document["components"]["schemas"].as_object_mut() {
        existing.extend(components);
    }
}

/// Moves a schema's `$defs` into `components` (OpenAPI resolves `$ref`
/// against the whole document, not the schema).
fn hoist_definitions(schema: &Value, components: &mut Map<String, Value>) -> Value {
    hoist_definitions_as(schema, components, "")
}

/// [`hoist_definitions`] with `namespace` in front of each component name.
fn hoist_definitions_as(
    schema: &Value,
    components: &mut Map<String, Value>,
    namespace: &str,
) -> Value {
    fn rewrite(value: &mut Value, namespace: &str) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(reference)) = map.get_mut("$ref")
                    && let Some(name) = reference.strip_prefix("#/$defs/")
                {
                    *reference = format!("#/components/schemas/{namespace}{name}");
                }
                map.values_mut().for_each(|v| rewrite(v, namespace));
            }
            Value::Array(items) => items.iter_mut().for_each(|v| rewrite(v, namespace)),
            _ => {}
        }
    }
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
        if let Some(Value::Object(definitions)) = map.remove("$defs") {
            for (name, mut definition) in definitions {
                rewrite(&mut definition, namespace);
                components.insert(format!("{namespace}{name}"), definition);
            }
        }
    }
    rewrite(&mut schema, namespace);
    schema
}

fn openapi_document<'a>(public_url: &str, tools: impl Iterator<Item = &'a ToolSpec>) -> Value {
    let mut components = Map::new();
    components.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}}
            }}
        }),
    );
    let mut paths = Map::new();
    for tool in tools {
        let input = hoist_definitions(
            &Value::Object((*tool.input_schema).clone()),
            &mut components,
        );
        let output = hoist_definitions(
            &Value::Object((*tool.output_schema).clone()),
            &mut components,
        );
        let error = json!({"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
        paths.insert(
            format!("/v1/tools/{}", tool.name),
            json!({"post": {
                "operationId": tool.name,
                "summary": tool.title,
                "description": tool.description,
                "x-mneme-permission": tool.permission.as_str(),
                "requestBody": {"required": true, "content": {"application/json": {"schema": input}}},
                "responses": {
                    "200": {"description": "the tool's result", "content": {"application/json": {"schema": output}}},
                    "400": error, "401": error, "403": error, "404": error, "429": error, "503": error
                }
            }}),
        );
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "mneme", "version": env!("CARGO_PKG_VERSION"),
                 "description": "Long-term memory tools. The same tools are available over MCP at /mcp."},
        "servers": [{"url": public_url}],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "description": "An mneme API key (mn_…)"}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        headers
    }

    /// The status, error code and message of a refusal.
    fn refusal(result: Result<Map<String, Value>, (StatusCode, Error)>) -> (u16, String, String) {
        let (status, error) = result.expect_err("refused");
        (
            status.as_u16(),
            error.code.as_str().to_owned(),
            error.message,
        )
    }

    #[test]
    fn bodies_become_arguments_or_refusals_in_the_error_vocabulary() {
        let json = headers("application/json; charset=utf-8");
        let arguments = arguments_of(&json, br#"{"text": "redis"}"#).unwrap();
        assert_eq!(arguments["text"], "redis");
        assert!(arguments_of(&HeaderMap::new(), b"").unwrap().is_empty());
        assert!(arguments_of(&json, b" \n").unwrap().is_empty());
        assert!(arguments_of(&json, b"null").unwrap().is_empty());
        assert!(arguments_of(&headers("application/merge-patch+json"), b"{}").is_ok());

        let form = headers("application/x-www-form-urlencoded");
        let (status, code, message) = refusal(arguments_of(&form, b"text=redis"));
        assert_eq!((status, code.as_str()), (415, "invalid_argument"));
        assert!(message.contains("application/json"), "{message}");
        let (status, _, _) = refusal(arguments_of(&HeaderMap::new(), b"{}"));
        assert_eq!(status, 415);

        for (body, says) in [
            (&br#"{"text": "redis""#[..], "not valid JSON"),
            (br#"{"text": "a", "text": "b"}"#, "twice"),
            (b"[1]", "JSON object"),
        ] {
            let (status, code, message) = refusal(arguments_of(&json, body));
            assert_eq!((status, code.as_str()), (400, "invalid_argument"));
            assert!(message.contains(says), "{message}");
        }
    }

    #[test]
    fn definitions_move_to_components_and_references_follow() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"kind": {"$ref": "#/$defs/Kind"}},
            "$defs": {"Kind": {"type": "string", "enum": ["a", "b"]}}
        });
        let mut components = Map::new();
        let hoisted = hoist_definitions(&schema, &mut components);
        assert_eq!(
            hoisted["properties"]["kind"]["$ref"],
            "#/components/schemas/Kind"
        );
        assert!(hoisted.get("$defs").is_none() && hoisted.get("$schema").is_none());
        assert_eq!(components["Kind"]["enum"], json!(["a", "b"]));

        // Upstream tools' definitions are namespaced: two may name theirs alike.
        let hoisted = hoist_definitions_as(&schema, &mut components, "gh__search.");
        assert_eq!(
            hoisted["properties"]["kind"]["$ref"],
            "#/components/schemas/gh__search.Kind"
        );
        assert!(components.contains_key("gh__search.Kind") && components.contains_key("Kind"));
    }

    #[test]
    fn the_document_has_one_operation_per_tool_and_no_dangling_references() {
        let document = openapi_document("https://m.example", REGISTRY.tools());
        let paths = document["paths"].as_object().unwrap();
        assert_eq!(paths.len(), REGISTRY.tools().count());
        let text = document.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").expect(target);
            assert!(
                document["components"]["schemas"].get(name).is_some(),
                "{target}"
            );
        }
    }
}
