//! The plan file's JSON Schema, and every key of a plan file that it does
//! not name, found at once, each with the nearest key it does name.

use super::*;
use serde_json::Value;

/// The JSON Schema of a plan file (`schemas/PlanFile.json`).
pub fn plan_file_schema() -> schemars::Schema {
    schemars::schema_for!(file::PlanFile)
}

/// The schema `node` points at, following a `$ref` into `$defs`.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> &'a Value {
    match node["$ref"].as_str() {
        Some(r) => r
            .strip_prefix("#/$defs/")
            .and_then(|name| root["$defs"].get(name))
            .map_or(node, |n| resolve(root, n)),
        None => node,
    }
}

/// The branches of a schema that says "one of these".
fn branches(node: &Value) -> Vec<&Value> {
    ["anyOf", "oneOf", "allOf"]
        .iter()
        .filter_map(|k| node[*k].as_array())
        .flatten()
        .collect()
}

/// The nearest of `known` to `key`, when it is near enough to be a typo.
fn nearest(key: &str, known: &[&str]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(key, k), *k))
        .filter(|(d, k)| {
            *d <= (k.len().max(key.len()) / 3).max(1) || k.starts_with(key) && key.len() >= 3
        })
        .min()
        .map(|(_, k)| k.to_owned())
}

/// Walks `value` against `schema`, reporting each key of a table whose
/// schema names its keys and `key` is not among them.
fn walk(root: &Value, schema: &Value, value: &toml::Value, at: &str, out: &mut Vec<PlanIssue>) {
    let schema = resolve(root, schema);
    match value {
        toml::Value::Table(table) => {
            let open = schema["additionalProperties"] == Value::Bool(true);
            if let (Some(properties), false) = (schema["properties"].as_object(), open) {
                let known: Vec<&str> = properties.keys().map(String::as_str).collect();
                for (key, v) in table {
                    match properties.get(key) {
                        Some(s) => walk(root, s, v, &join(at, key), out),
                        None => out.push(PlanIssue::UnknownKey {
                            at: if at.is_empty() {
                                "the plan".to_owned()
                            } else {
                                at.to_owned()
                            },
                            key: key.clone(),
                            suggestion: nearest(key, &known),
                        }),
                    }
                }
            } else if schema["additionalProperties"].is_object() {
                for (key, v) in table {
                    walk(
                        root,
                        &schema["additionalProperties"],
                        v,
                        &join(at, key),
                        out,
                    );
                }
            } else {
                // A table among several shapes: the branches that take tables.
                for branch in branches(schema) {
                    let b = resolve(root, branch);
                    if b["properties"].is_object() || b["additionalProperties"].is_object() {
                        walk(root, b, value, at, out);
                        break;
                    }
                }
            }
        }
        toml::Value::Array(items) => {
            let item = if schema["items"].is_object() {
                &schema["items"]
            } else {
                match branches(schema)
                    .into_iter()
                    .find(|b| resolve(root, b)["items"].is_object())
                {
                    Some(b) => &resolve(root, b)["items"],
                    None => return,
                }
            };
            for (i, v) in items.iter().enumerate() {
                let named = match v.get("id").and_then(toml::Value::as_str) {
                    Some(id) => format!("{at}[{i}] (`{id}`)"),
                    None => format!("{at}[{i}]"),
                };
                walk(root, item, v, &named, out);
            }
        }
        _ => {}
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// Every key of `plan` that the plan file's schema does not name.
pub(super) fn unknown_keys(plan: &toml::Value) -> Vec<PlanIssue> {
    static SCHEMA: std::sync::LazyLock<Value> =
        std::sync::LazyLock::new(|| plan_file_schema().to_value());
    let mut out = Vec::new();
    walk(&SCHEMA, &SCHEMA, plan, "", &mut out);
    out
}
