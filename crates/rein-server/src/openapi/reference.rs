//! `docs/src/api/reference.md`: the API's operations as a table a person reads, made from
//! the same definitions as the router, and naming the schemas of the OpenAPI
//! document (`docs/src/api/openapi.json`) that each one takes and answers.

use super::*;

/// A schema as the reference names it: the component it refers to.
fn named(schema: &Value) -> String {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str());
    match reference {
        Some(r) => format!("`{}`", r.rsplit('/').next().unwrap_or(r)),
        None => match schema["type"].as_str() {
            Some(t) => format!("`{t}`"),
            None => "JSON".to_owned(),
        },
    }
}

/// A request or response body's content, by media type.
fn body(content: &Value) -> String {
    let Some(media) = content.as_object() else {
        return "nothing".to_owned();
    };
    media
        .iter()
        .map(|(media, what)| match media.as_str() {
            "application/json" => named(&what["schema"]),
            "text/event-stream" => format!(
                "Server-Sent Events of {}",
                named(&what["schema"]["properties"]["data"]["contentSchema"])
            ),
            other => format!("`{other}`"),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

/// The intro both renderings share, in Markdown.
const INTRO: &str = "Roles go viewer < operator < admin; `none` needs no credentials. Every \
error is JSON `{error: {code, message}}` (`Error`). Besides the errors \
listed: 405 for a method a path does not take (with `Allow`), 415 for a \
body that is not JSON (or a plan's TOML), 429 past one client's \
connection cap or its failed sign-ins (with `Retry-After`).";

/// The columns of a row.
const COLUMNS: [&str; 9] = [
    "operation",
    "method",
    "path",
    "role",
    "what",
    "query",
    "request",
    "success",
    "errors",
];

/// One row per operation, in the order of [`endpoints::ALL`], each cell
/// Markdown-ish text (backquotes around code).
fn rows(doc: &Value) -> Vec<[String; 9]> {
    endpoints::ALL
        .iter()
        .map(|o| {
            let documented = &doc["paths"][o.path][o.method.lower()];
            let query: Vec<String> = documented["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "query")
                .filter_map(|p| p["name"].as_str().map(|n| format!("`{n}`")))
                .collect();
            let request = match o.request {
                Some(_) => body(&documented["requestBody"]["content"]),
                None => String::new(),
            };
            let success = &documented["responses"][o.success.to_string()]["content"];
            [
                o.name.to_owned(),
                o.method.as_str().to_owned(),
                format!("`{}`", o.path),
                o.role.map_or("none", |r| r.as_str()).to_owned(),
                o.summary().to_owned(),
                query.join(", "),
                request,
                format!("{} {}", o.success, body(success)),
                o.errors
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            ]
        })
        .collect()
}

/// The reference in Markdown: one row per operation, in the order of
/// [`endpoints::ALL`].
pub fn reference() -> String {
    let mut out = format!(
        "# API reference\n\n\
         Generated from the operations' definitions (`rein-protocol`'s `endpoints`);\n\
         the schemas named here are those of [`openapi.json`](openapi.json). Regenerate both\n\
         with `REIN_UPDATE_OPENAPI=1 cargo test -p rein-server --test all -- suite::openapi::`.\n\
         A running `rein serve` serves this table at `/docs/api`, with each schema.\n\n\
         {INTRO}\n\n| {} |\n|{}\n",
        COLUMNS.join(" | "),
        "---|".repeat(COLUMNS.len()),
    );
    for row in rows(&document()) {
        out.push_str("| ");
        out.push_str(&row.map(|cell| cell.replace('|', "\\|")).join(" | "));
        out.push_str(" |\n");
    }
    out
}

/// `text` as HTML, its backquoted parts as `<code>` (maud escapes the rest).
fn html_text(text: &str) -> maud::Markup {
    maud::html! {
        @for (i, part) in text.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

/// The page's style: everything it shows comes with it.
const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:1.5rem;color:#1b1f24}\
table{border-collapse:collapse;width:100%}th,td{border:1px solid #d0d7de;padding:.3rem .45rem;vertical-align:top;text-align:left}\
th{background:#f6f8fa;position:sticky;top:0}tr:target{background:#fff8c5}\
code{font:12px ui-monospace,monospace;background:#f6f8fa;padding:0 .2rem;border-radius:3px}\
pre{background:#f6f8fa;padding:.6rem;overflow:auto;font-size:12px}summary{cursor:pointer}";

/// The reference as one HTML page with no external assets, served at
/// `/docs/api`: the table, then each component schema of the document,
/// folded.
pub fn html() -> String {
    let doc = document();
    let schemas: Vec<(&String, String)> = doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, schema)| {
            (
                name,
                serde_json::to_string_pretty(schema).unwrap_or_default(),
            )
        })
        .collect();
    let page = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "rein admin API" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                h1 { "rein admin API" }
                p {
                    (html_text(INTRO))
                    " The document itself is at " a href="/openapi.json" { code { "/openapi.json" } }
                    "; the schemas follow the table."
                }
                table {
                    thead { tr { @for c in COLUMNS { th { (c) } } } }
                    tbody {
                        @for row in rows(&doc) {
                            tr id=(row[0]) { @for cell in &row { td { (html_text(cell)) } } }
                        }
                    }
                }
                h2 { "Schemas" }
                @for (name, text) in &schemas {
                    details id={"schema-" (name)} { summary { code { (name) } } pre { (text) } }
                }
            }
        }
    };
    page.into_string() + "\n"
}
