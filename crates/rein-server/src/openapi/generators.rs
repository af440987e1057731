//! The document as client generators read it: booleans as schema objects,
//! common properties pushed into tagged variants, variants hoisted and named,
//! nullable formats split.

use super::*;

/// Keys whose value is a map of schemas, a list of schemas, or one schema.
pub(super) const SCHEMA_MAPS: [&str; 3] = ["properties", "patternProperties", "dependentSchemas"];

pub(super) const SCHEMA_LISTS: [&str; 4] = ["oneOf", "anyOf", "allOf", "prefixItems"];

pub(super) const SCHEMA_ONE: [&str; 9] = [
    "items",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "schema",
    "contentSchema",
];

/// The document spelled so that client generators read all of it
/// (openapi-python-client refused it, and dropped models, before): the same
/// set of values each schema allows, written three ways differently.
///
/// - A boolean schema (`true`, anything; `false`, nothing) where a schema
///   object is expected is written `{}` or `{"not": {}}`.
/// - An object schema with `properties` beside its `oneOf` gives those
///   properties (and what it requires) to each variant.
/// - Each inline object variant of a component's `oneOf` becomes a component
///   of its own, named after the component and the variant's tag (the
///   property it fixes with `const`: `HarnessEventTaskCreated`,
///   `StepActionCommand`), and is referred to.
pub(super) fn for_generators(doc: &mut Value) {
    booleans_as_objects(doc);
    push_down_common_properties(doc);
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let names: Vec<String> = schemas.keys().cloned().collect();
    for name in names {
        let Some(variants) = schemas
            .get_mut(&name)
            .and_then(|s| s.get_mut("oneOf"))
            .and_then(Value::as_array_mut)
            .map(std::mem::take)
        else {
            continue;
        };
        let mut refs = Vec::with_capacity(variants.len());
        for (i, variant) in variants.into_iter().enumerate() {
            if variant.get("properties").is_none() {
                refs.push(variant);
                continue;
            }
            let tag = variant["properties"].as_object().and_then(|props| {
                props
                    .values()
                    .find_map(|p| p.get("const").and_then(Value::as_str))
            });
            let mut hoisted = match tag {
                Some(tag) => format!("{name}{}", pascal(tag)),
                None => format!("{name}Variant{i}"),
            };
            while schemas.contains_key(&hoisted) {
                hoisted.push('_');
            }
            refs.push(json!({ "$ref": format!("#/components/schemas/{hoisted}") }));
            schemas.insert(hoisted, variant);
        }
        if let Some(schema) = schemas.get_mut(&name) {
            schema["oneOf"] = Value::Array(refs);
        }
    }
}

/// `snake_case` or `kebab-case` as `PascalCase`.
pub(super) fn pascal(tag: &str) -> String {
    tag.split(['_', '-', '.', ' '])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut chars = p.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// A boolean schema as the schema object that allows the same values.
pub(super) fn schema_object(value: &mut Value) {
    match value {
        Value::Bool(true) => *value = json!({}),
        Value::Bool(false) => *value = json!({ "not": {} }),
        _ => {}
    }
}

pub(super) fn booleans_as_objects(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if SCHEMA_MAPS.contains(&key.as_str()) {
                    if let Some(schemas) = inner.as_object_mut() {
                        schemas.values_mut().for_each(schema_object);
                    }
                } else if SCHEMA_LISTS.contains(&key.as_str()) {
                    if let Some(schemas) = inner.as_array_mut() {
                        schemas.iter_mut().for_each(schema_object);
                    }
                } else if SCHEMA_ONE.contains(&key.as_str()) {
                    schema_object(inner);
                }
            }
            map.values_mut().for_each(booleans_as_objects);
        }
        Value::Array(items) => items.iter_mut().for_each(booleans_as_objects),
        _ => {}
    }
}

pub(super) fn push_down_common_properties(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let variants_are_objects = map
                .get("oneOf")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().all(|v| v.get("properties").is_some()));
            if variants_are_objects && map.contains_key("properties") {
                let common = map.remove("properties").unwrap_or_default();
                let required = map.remove("required").unwrap_or_else(|| json!([]));
                let kind = map.remove("type");
                let extra = map.remove("additionalProperties");
                if let Some(variants) = map.get_mut("oneOf").and_then(Value::as_array_mut) {
                    for variant in variants {
                        let Some(v) = variant.as_object_mut() else {
                            continue;
                        };
                        let mut props = common.as_object().cloned().unwrap_or_default();
                        if let Some(own) = v.get("properties").and_then(Value::as_object) {
                            props.extend(own.clone());
                        }
                        v.insert("properties".into(), Value::Object(props));
                        let mut needed: Vec<Value> =
                            required.as_array().cloned().unwrap_or_default();
                        for r in v
                            .get("required")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            if !needed.contains(r) {
                                needed.push(r.clone());
                            }
                        }
                        v.insert("required".into(), Value::Array(needed));
                        if let Some(kind) = &kind {
                            v.entry("type").or_insert_with(|| kind.clone());
                        }
                        if let Some(extra) = &extra {
                            v.entry("additionalProperties")
                                .or_insert_with(|| extra.clone());
                        }
                    }
                }
            }
            map.values_mut().for_each(push_down_common_properties);
        }
        Value::Array(items) => items.iter_mut().for_each(push_down_common_properties),
        _ => {}
    }
}

/// `{"type": ["string", "null"], "format": F}` as `anyOf` a string of format
/// F or `null`: the same set of values, spelled so that a generator which
/// reads a format only beside a single type (schemathesis's does) does not
/// take an empty string for a valid date-time.
pub(super) fn split_nullable_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let nullable_string = map
                .get("type")
                .is_some_and(|t| *t == json!(["string", "null"]));
            if nullable_string && let Some(format) = map.remove("format") {
                map.remove("type");
                map.insert(
                    "anyOf".to_owned(),
                    json!([{ "type": "string", "format": format }, { "type": "null" }]),
                );
            }
            map.values_mut().for_each(split_nullable_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(split_nullable_formats),
        _ => {}
    }
}
