//! The plan file's JSON Schema (`schemas/PlanFile.json`) and the reference
//! made from it (`docs/src/plans/reference.md`) must match the code.
//! Regenerate both with
//! `REIN_UPDATE_SCHEMAS=1 cargo test -p rein-core --test all -- suite::plan_reference::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;

/// The schema `node` points at, and the name of the definition it is.
fn resolve<'a>(root: &'a Value, node: &'a Value) -> (&'a Value, Option<&'a str>) {
    match node["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/$defs/"))
    {
        Some(name) => (&root["$defs"][name], Some(name)),
        None => (node, None),
    }
}

/// The values of an enumeration, if `node` is one.
fn values(node: &Value) -> Option<Vec<String>> {
    if let Some(e) = node["enum"].as_array() {
        return Some(
            e.iter()
                .map(|v| format!("`{}`", v.as_str().unwrap_or("?")))
                .collect(),
        );
    }
    let one_of = node["oneOf"].as_array()?;
    one_of
        .iter()
        .map(|v| v["const"].as_str().map(|c| format!("`{c}`")))
        .collect()
}

/// How a type reads in the reference.
fn kind(root: &Value, node: &Value) -> String {
    let (node, name) = resolve(root, node);
    if let Some(values) = values(node) {
        return values.join(" \\| ");
    }
    if let Some(branches) = node["anyOf"].as_array() {
        let parts: Vec<String> = branches
            .iter()
            .filter(|b| b["type"] != "null")
            .map(|b| kind(root, b))
            .collect();
        return parts.join(" or ");
    }
    if let Some(properties) = node["properties"].as_object() {
        return match name {
            Some(name) => format!("[{name}](#{})", name.to_lowercase()),
            // A table keyed by an enumeration: its keys, and what each holds.
            None => {
                let keys: Vec<String> = properties.keys().map(|k| format!("`{k}`")).collect();
                let each = properties.values().next().map(|v| kind(root, v));
                format!(
                    "table of {} by {}",
                    each.unwrap_or_default(),
                    keys.join(", ")
                )
            }
        };
    }
    let types: Vec<&str> = match &node["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    };
    match types.first().copied() {
        Some("array") => format!("array of {}", kind(root, &node["items"])),
        Some("object") if node["additionalProperties"].is_object() => {
            format!("table of {}", kind(root, &node["additionalProperties"]))
        }
        Some("object") => "table".to_owned(),
        Some("integer") => "integer".to_owned(),
        Some(t) => t.to_owned(),
        None => "any".to_owned(),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// One table: a row per key of an object schema.
fn table(root: &Value, node: &Value, out: &mut String) {
    let required: Vec<&str> = node["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("| key | type | required | what |\n|---|---|---|---|\n");
    for (key, schema) in node["properties"].as_object().unwrap() {
        let what = schema["description"]
            .as_str()
            .or_else(|| resolve(root, schema).0["description"].as_str())
            .unwrap_or("");
        writeln!(
            out,
            "| `{key}` | {} | {} | {} |",
            kind(root, schema),
            if required.contains(&key.as_str()) {
                "yes"
            } else {
                ""
            },
            one_line(what)
        )
        .unwrap();
    }
}

fn reference(schema: &Value) -> String {
    let mut out = String::from(
        "# Plan file reference\n\n\
         Generated from the plan file's JSON Schema, which `rein plan schema` prints\n\
         (and `schemas/PlanFile.json` holds); a test fails when either drifts from\n\
         the code. A key a table does not take is refused, each one named with the\n\
         nearest key it does take, all at once (`rein plan check PLAN`).\n\n\
         ## The plan\n\n",
    );
    table(schema, schema, &mut out);
    for (name, def) in schema["$defs"].as_object().unwrap() {
        if def["properties"].is_object() {
            write!(out, "\n## {name}\n\n").unwrap();
            if let Some(d) = def["description"].as_str() {
                write!(out, "{}\n\n", one_line(d)).unwrap();
            }
            table(schema, def, &mut out);
        }
    }
    out
}

#[test]
fn the_plan_schema_and_its_reference_match_the_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let schema = rein_core::plan::plan_file_schema().to_value();
    let files = [
        (
            root.join("schemas/PlanFile.json"),
            serde_json::to_string_pretty(&schema).unwrap() + "\n",
        ),
        (root.join("docs/src/plans/reference.md"), reference(&schema)),
    ];
    let update = std::env::var_os("REIN_UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (path, text) in files {
        if update {
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} out of date; run REIN_UPDATE_SCHEMAS=1 cargo test -p rein-core --test all -- suite::plan_reference::"
    );
}

#[test]
fn every_misspelt_key_of_a_plan_is_named_at_once_with_its_nearest_key() {
    let text = "description = 't'\nmax_paralel = 2\n\
                [[steps]]\nid = 'a'\nrun = 'true'\n\
                [[steps]]\nid = 'build'\nrun = 'true'\ndepend_on = ['a']\ntimout = '1s'\nzzz = 1\n\
                [recovery]\ntransient = { action = 'retry', max_retry = 3 }\n\
                [mcp_servers.fs]\ncomand = 'x'\n";
    let (message, errors) = rein_core::plan::parse_plan(text, Path::new(".")).unwrap_err();
    assert_eq!(errors.unwrap().0.len(), 6, "{message}");
    for line in [
        "the plan: unknown key `max_paralel`; did you mean `max_parallel`?",
        "steps[1] (`build`): unknown key `depend_on`; did you mean `depends_on`?",
        "steps[1] (`build`): unknown key `timout`; did you mean `timeout`?",
        "steps[1] (`build`): unknown key `zzz` (`rein plan schema` prints every key a plan takes)",
        "recovery.transient: unknown key `max_retry`; did you mean `max_retries`?",
        "mcp_servers.fs: unknown key `comand`; did you mean `command`?",
    ] {
        assert!(
            message.contains(&format!("\n  - {line}")),
            "{line} not in {message}"
        );
    }
    // A plan with no unknown key is parsed as before.
    let fine = "description = 't'\n[[steps]]\nid = 'a'\nrun = 'true'\ndepends_on = []\n";
    assert!(rein_core::plan::parse_plan(fine, Path::new(".")).is_ok());
}
