//! The JSON Schemas checked into `schemas/` must match the types. Regenerate them
//! with `REIN_UPDATE_SCHEMAS=1 cargo test -p rein-protocol --test all -- suite::schemas::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

#[test]
fn checked_in_schemas_match_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas");
    let update = std::env::var_os("REIN_UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (name, schema) in rein_protocol::schema::all() {
        let path = dir.join(format!("{name}.json"));
        let value = rein_protocol::schema::canonical(serde_json::to_value(&schema).unwrap());
        let text = serde_json::to_string_pretty(&value).unwrap() + "\n";
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "schemas out of date: {stale:?}; run REIN_UPDATE_SCHEMAS=1 cargo test -p rein-protocol --test all -- suite::schemas::"
    );
}

#[test]
fn the_task_state_schema_names_every_field_the_spec_requires() {
    // The schema names every field the spec requires of a TaskState.
    let schema = serde_json::to_value(schemars::schema_for!(rein_protocol::TaskState)).unwrap();
    let text = schema.to_string();
    for field in [
        "session_id",
        "description",
        "status",
        "checkpoints",
        "current_checkpoint",
        "task_history",
        "completed_steps",
        "pending_steps",
        "blocked_reason",
        "workspace_path",
        "container_id",
        "last_active_at",
        "created_at",
        "updated_at",
    ] {
        assert!(
            text.contains(&format!("\"{field}\"")),
            "TaskState schema lacks {field}"
        );
    }
    for t in rein_protocol::CheckpointType::ALL {
        assert!(
            text.contains(&format!("\"{}\"", t.as_str())),
            "schema lacks checkpoint type {}",
            t.as_str()
        );
    }
}
