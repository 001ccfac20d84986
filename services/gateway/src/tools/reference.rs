//! The tool reference of `docs/TOOLS.md`, generated from the registry so
//! the documentation cannot drift from what `tools/list` serves: names,
//! descriptions, access, annotations, arguments and results come from the
//! same [`ToolSpec`]s and JSON schemas. Each tool's section ends with its
//! example arguments, in which `"<fragment id>"` and `"<other fragment
//! id>"` stand for ids of stored memories (the e2e test
//! `tool_examples` calls every tool with them, ids substituted).

use std::fmt::Write;

use rmcp::model::JsonObject;
use serde_json::Value;

use super::{REGISTRY, ToolSpec};

/// Markdown for every registered tool, in name order.
pub fn tools_markdown() -> String {
    let mut out = String::new();
    for tool in REGISTRY.tools.values() {
        section(&mut out, tool);
    }
    out
}

fn section(out: &mut String, tool: &ToolSpec) {
    let _ = writeln!(out, "### `{}`: {}\n", tool.name, tool.title);
    let _ = writeln!(out, "{}\n", tool.description);
    let mut traits = vec![format!("needs `{}`", tool.permission.as_str())];
    if tool.requires_admin {
        traits.push("admin keys only".into());
    }
    traits.push(
        if tool.read_only {
            "read-only"
        } else if tool.destructive {
            "destructive"
        } else {
            "writes"
        }
        .into(),
    );
    traits.push(
        if tool.idempotent {
            "idempotent"
        } else {
            "not idempotent"
        }
        .into(),
    );
    traits.push(format!("risk `{}`", tool.risk.as_str()));
    let _ = writeln!(out, "*{}.*\n", traits.join(", "));
    fields(out, "Argument", &tool.input_schema, true);
    fields(out, "Result field", &tool.output_schema, false);
    if let Some(example) = &tool.example {
        let json = serde_json::to_string_pretty(example).unwrap_or_default();
        let _ = writeln!(out, "Example:\n\n```json\n{json}\n```\n");
    }
}

/// A table of an object schema's properties.
fn fields(out: &mut String, heading: &str, schema: &JsonObject, show_required: bool) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        let _ = writeln!(out, "No {}s.\n", heading.to_lowercase());
        return;
    };
    if properties.is_empty() {
        let _ = writeln!(out, "No {}s.\n", heading.to_lowercase());
        return;
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if show_required {
        let _ = writeln!(out, "| {heading} | Type | Required | Description |");
        let _ = writeln!(out, "|---|---|---|---|");
    } else {
        let _ = writeln!(out, "| {heading} | Type | Description |");
        let _ = writeln!(out, "|---|---|---|");
    }
    for (name, property) in properties {
        let kind = type_of(property, schema);
        let description = describe(property, schema);
        if show_required {
            let needed = if required.contains(&name.as_str()) {
                "yes"
            } else {
                ""
            };
            let _ = writeln!(out, "| `{name}` | {kind} | {needed} | {description} |");
        } else {
            let _ = writeln!(out, "| `{name}` | {kind} | {description} |");
        }
    }
    out.push('\n');
}

/// The definition a `$ref` points to, in the root schema's `$defs`.
fn resolve<'a>(value: &'a Value, root: &'a JsonObject) -> &'a Value {
    let reference = value
        .get("$ref")
        .or_else(|| {
            // `Option<Enum>` is `anyOf: [{$ref}, {type: null}]`, or `allOf`.
            ["anyOf", "allOf", "oneOf"].iter().find_map(|key| {
                value
                    .get(*key)?
                    .as_array()?
                    .iter()
                    .find_map(|v| v.get("$ref"))
            })
        })
        .and_then(Value::as_str);
    reference
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| root.get("$defs")?.get(name))
        .unwrap_or(value)
}

fn type_of(property: &Value, root: &JsonObject) -> String {
    let resolved = resolve(property, root);
    if let Some(values) = enum_values(resolved) {
        return values
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(" \\| ");
    }
    let types: Vec<&str> = match resolved.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let types: Vec<&str> = types.into_iter().filter(|t| *t != "null").collect();
    match types.as_slice() {
        ["array"] => {
            let item = resolved
                .get("items")
                .map(|i| type_of(i, root))
                .unwrap_or_else(|| "any".into());
            format!("array of {item}")
        }
        [] if resolved.get("anyOf").is_some() => {
            let variants: Vec<String> = resolved["anyOf"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v.get("type") != Some(&Value::String("null".into())))
                .map(|v| type_of(v, root))
                .collect();
            variants.join(" or ")
        }
        [] => "object".into(),
        many => many.join(" or "),
    }
}

/// The allowed values of a string enum (`enum`, or `oneOf` of constants).
fn enum_values(schema: &Value) -> Option<Vec<String>> {
    if let Some(Value::Array(values)) = schema.get("enum") {
        return Some(
            values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        );
    }
    let variants = schema.get("oneOf")?.as_array()?;
    variants
        .iter()
        .map(|v| {
            v.get("const")
                .or_else(|| v.get("enum")?.get(0))?
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

fn describe(property: &Value, root: &JsonObject) -> String {
    let own = property.get("description").and_then(Value::as_str);
    let text = own
        .or_else(|| {
            resolve(property, root)
                .get("description")
                .and_then(Value::as_str)
        })
        .unwrap_or("");
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_tools_md_is_generated_from_the_registry() {
        let docs =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/TOOLS.md"))
                .expect("docs/TOOLS.md exists");
        assert!(
            docs.contains(&tools_markdown()),
            "docs/TOOLS.md is out of date: regenerate its reference with `mneme tools docs`"
        );
    }

    #[test]
    fn every_argument_and_result_field_is_described_with_a_type() {
        let markdown = tools_markdown();
        for line in markdown.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            assert!(
                !cells[1].trim().is_empty(),
                "a field without a type: {line}"
            );
        }
        assert!(markdown.contains("### `recall`: Recall"));
        assert_eq!(
            markdown.matches("Example:\n\n```json\n{").count(),
            REGISTRY.tools.len(),
            "every tool's section shows its example"
        );
        assert!(markdown.contains("| `type` | `fact` \\| `decision`"));
    }

    /// Agents choose arguments from their descriptions in `inputSchema`: an
    /// argument without one leaves the model to guess what it does.
    #[test]
    fn every_argument_says_what_it_does() {
        let markdown = tools_markdown();
        let mut in_arguments = false;
        let mut bare = Vec::new();
        for line in markdown.lines() {
            if line.starts_with("| Argument ") || line.starts_with("| Result field ") {
                in_arguments = line.starts_with("| Argument ");
                continue;
            }
            if in_arguments && line.starts_with("| `") {
                let description = line.trim_end_matches('|').rsplit(" | ").next();
                if description.is_none_or(|d| d.trim().is_empty()) {
                    bare.push(line.split(" | ").next().unwrap_or(line).to_owned());
                }
            }
        }
        assert!(bare.is_empty(), "arguments without a description: {bare:?}");
    }
}
