//! `docs/api.md`: the API's operations as a table a person reads, made from
//! the same definitions as the router, and naming the schemas of the OpenAPI
//! document (`docs/openapi.json`) that each one takes and answers.

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

/// The reference in Markdown: one row per operation, in the order of
/// [`endpoints::ALL`].
pub fn reference() -> String {
    let doc = document();
    let mut out = String::from(
        "# The admin API\n\n\
         Generated from the operations' definitions (`rein-protocol`'s `endpoints`);\n\
         the schemas named here are those of `docs/openapi.json`. Regenerate both\n\
         with `REIN_UPDATE_OPENAPI=1 cargo test -p rein-server --test all -- suite::openapi::`.\n\n\
         Roles go viewer < operator < admin; `none` needs no credentials. Every\n\
         error is JSON `{error: {code, message}}` (`Error`). Besides the errors\n\
         listed: 405 for a method a path does not take (with `Allow`), 415 for a\n\
         body that is not JSON (or a plan's TOML), 429 past one client's\n\
         connection cap or its failed sign-ins (with `Retry-After`).\n\n\
         | operation | method | path | role | what | query | request | success | errors |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for o in endpoints::ALL {
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
        let row = [
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
        ];
        out.push_str("| ");
        out.push_str(&row.map(|cell| cell.replace('|', "\\|")).join(" | "));
        out.push_str(" |\n");
    }
    out
}
