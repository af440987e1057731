//! The OpenAPI 3.1 document made from the API's operations: paths,
//! parameters, bodies, responses and the schemas they name.

use super::*;

/// The parameters of an operation: its path's `{id}`, then the fields of its
/// query type, each with its own schema (optional ones without the `null` a
/// query string cannot send), sorted by name.
pub(super) fn parameters(o: &Operation, g: &mut SchemaGenerator) -> Value {
    let mut out: Vec<Value> = Vec::new();
    if let Some(param) = o.param {
        for name in o
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        {
            out.push(json!({ "name": name, "in": "path", "required": true, "schema": param(g) }));
        }
    }
    let Some(query) = o.query else {
        return Value::Array(out);
    };
    let fields = query(g).to_value();
    let required: Vec<&str> = fields["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut named: Vec<Value> = Vec::new();
    for (name, schema) in fields["properties"].as_object().into_iter().flatten() {
        let mut schema = schema.clone();
        let description = schema
            .as_object_mut()
            .and_then(|o| {
                // An absent parameter is absent, not `null`.
                o.remove("default");
                o.remove("description")
            })
            .unwrap_or(Value::Null);
        if let Some(types) = schema.get("type").and_then(Value::as_array) {
            let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
            schema["type"] = match kept.as_slice() {
                [one] => one.clone(),
                _ => Value::Array(kept),
            };
        }
        named.push(json!({
            "name": name, "in": "query", "required": required.contains(&name.as_str()),
            "description": description, "schema": schema,
        }));
    }
    named.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    out.extend(named);
    Value::Array(out)
}

pub(super) fn content(body: Content, g: &mut SchemaGenerator) -> Option<Value> {
    match body {
        Content::Json(schema) => Some(json!({ "application/json": { "schema": schema(g) } })),
        Content::PlanOrToml => Some(json!({
            "application/json": { "schema": g.subschema_for::<SubmitTask>() },
            "application/toml": { "schema": { "type": "string", "description": "a plan file" } },
        })),
        Content::Text(media) => Some(json!({ media: { "schema": { "type": "string" } } })),
        // Each event as a client parses it (the schema applies to one event).
        Content::Events(data) => Some(json!({ "text/event-stream": { "schema": {
            "type": "object",
            "properties": {
                "id": { "type": "string", "description": "its position: send it back as Last-Event-ID to resume after it" },
                "event": { "type": "string", "description": "what happened (the event's or record's type; `stalled`: the task's runner is gone; `error`: the stream ends)" },
                "data": { "type": "string", "contentMediaType": "application/json", "contentSchema": data(g) },
            },
        } } })),
        Content::Empty => None,
    }
}

pub(super) fn operation(o: &Operation, g: &mut SchemaGenerator) -> Value {
    let path = o.path;
    let mut responses = Map::new();
    let success = match content(o.response, g) {
        Some(content) => json!({ "description": "ok", "content": content }),
        None => json!({ "description": "done" }),
    };
    responses.insert(o.success.to_string(), success);
    // A body that is not JSON (or TOML, where a plan file is taken) is a 415.
    let unsupported: &[u16] = if o.request.is_some() { &[415] } else { &[] };
    let error = json!({ "description": "error", "content": { "application/json": { "schema": g.subschema_for::<ErrorBody>() } } });
    for code in o.errors.iter().chain(unsupported) {
        responses.insert(code.to_string(), error.clone());
    }
    // A path whose `{id}` is followed by more names another route when a
    // client fills in an empty id and drops the empty segment
    // (`/admin/harness/evidence/items`: the bundle named `items`), and that
    // route may not take this method.
    if path.contains("}/") {
        let mut other = error.clone();
        other["description"] = json!(
            "the path, sent with an empty id and without its empty segment, names another route, which does not take this method"
        );
        responses.insert("405".to_owned(), other);
    }
    // Any request but a health probe may meet the cap on one client's
    // connections, and one that signs in, the throttle on failed sign-ins:
    // both 429 with `Retry-After` or a message naming the cap.
    if path != "/healthz" {
        let mut throttled = error.clone();
        throttled["description"] = json!(
            "too many connections from this client address, or too many failed sign-ins from it (then with Retry-After)"
        );
        throttled["headers"] = json!({ "Retry-After": {
            "description": "seconds to wait, with too many failed sign-ins",
            "schema": { "type": "integer", "minimum": 1 },
        } });
        responses.insert("429".to_owned(), throttled);
    }
    let mut out = json!({
        "operationId": o.name,
        "summary": o.summary(),
        "parameters": parameters(o, g),
        "responses": responses,
    });
    if let Some(role) = o.role {
        out["security"] = json!([{ "bearer": [] }, { "session": [], "csrf": [] }]);
        out["x-rein-role"] = json!(role);
    } else {
        out["security"] = json!([]);
    }
    if let Some(content) = o.request.and_then(|body| content(body, g)) {
        out["requestBody"] = json!({ "required": true, "content": content });
    }
    out
}

/// The OpenAPI 3.1 document of the operations in [`endpoints::ALL`]: every
/// schema one of them refers to, under `components/schemas`.
pub fn document() -> Value {
    let mut g = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let mut paths = Map::new();
    for o in endpoints::ALL {
        let item = paths
            .entry(o.path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        item[o.method.lower()] = operation(o, &mut g);
    }
    let mut doc = json!({
        "openapi": "3.1.0",
        "info": { "title": "rein admin API", "version": env!("CARGO_PKG_VERSION") },
        "paths": paths,
        "components": {
            "schemas": g.take_definitions(true),
            "securitySchemes": {
                "bearer": { "type": "http", "scheme": "bearer" },
                "session": { "type": "apiKey", "in": "cookie", "name": crate::auth::SESSION_COOKIE },
                "csrf": { "type": "apiKey", "in": "header", "name": "X-CSRF-Token" },
            },
        },
    });
    // Before the keys are put in order: the split adds one.
    split_nullable_formats(&mut doc);
    for_generators(&mut doc);
    rein_protocol::schema::canonical(doc)
}
