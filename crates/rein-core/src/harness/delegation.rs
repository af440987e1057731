//! Delegated execution (spec harness-sdk §5): a plugin the owner of a harness
//! trusts may run that owner's existing, model-locked sessions — exactly those,
//! scoped to the owner — and may change nothing about them.

use super::HarnessRegistry;

/// A session as stored, with who owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    pub key: String,
    pub store_path: String,
    pub session_id: String,
    pub model_selection_locked: bool,
    pub agent_harness_id: Option<String>,
    pub agent_harness_runtime_override: Option<String>,
    /// The plugin that owns the session's harness.
    pub owner_plugin_id: String,
}

/// What a delegate asks to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegatedRun {
    pub delegate_plugin_id: String,
    pub key: String,
    pub store_path: String,
    pub session_id: String,
}

/// A granted delegated run: it runs as the owner's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelegatedScope {
    pub owner_plugin_id: String,
    pub harness_id: String,
    pub delegate_plugin_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DelegationError {
    #[error(
        "plugin `{delegate}` may not run sessions of plugin `{owner}`: `{owner}` does not list it for delegated execution"
    )]
    NotTrusted { delegate: String, owner: String },
    #[error("delegated run refused: {differences}")]
    Mismatch { differences: String },
    #[error("owned by plugin {owner}")]
    OwnerOnly { owner: String },
}

/// Whether `run` may go ahead (spec §5 rules 22–23): the owner's harness trusts
/// the delegate, the run names the stored session exactly, the session is
/// model-locked, and its harness and runtime override are the owner's harness.
/// A refusal names everything that differed.
pub fn authorize_delegated_run(
    registry: &HarnessRegistry,
    stored: &StoredSession,
    run: &DelegatedRun,
) -> Result<DelegatedScope, DelegationError> {
    // The owner's harness: the one the session is locked to, if the owner registered it.
    let owner_harness = stored
        .agent_harness_id
        .as_deref()
        .and_then(|id| registry.get(id))
        .filter(|r| r.plugin.id == stored.owner_plugin_id);
    let trusted = owner_harness.is_some_and(|r| {
        r.harness
            .delegated_execution_plugin_ids()
            .contains(&run.delegate_plugin_id)
    });
    if !trusted {
        return Err(DelegationError::NotTrusted {
            delegate: run.delegate_plugin_id.clone(),
            owner: stored.owner_plugin_id.clone(),
        });
    }
    let harness_id = owner_harness.map_or("", |r| r.harness.id()).to_owned();
    let mut differences = Vec::new();
    for (what, asked, kept) in [
        ("session key", &run.key, &stored.key),
        ("store path", &run.store_path, &stored.store_path),
        ("session id", &run.session_id, &stored.session_id),
    ] {
        if asked != kept {
            differences.push(format!("{what} `{asked}` is not the stored `{kept}`"));
        }
    }
    if !stored.model_selection_locked {
        differences.push("the session's model selection is not locked".to_owned());
    }
    for (what, value) in [
        ("agent harness", &stored.agent_harness_id),
        ("runtime override", &stored.agent_harness_runtime_override),
    ] {
        if value.as_deref() != Some(harness_id.as_str()) {
            differences.push(format!(
                "its {what} is {} rather than the owner's harness `{harness_id}`",
                value
                    .as_deref()
                    .map_or("unset".to_owned(), |v| format!("`{v}`"))
            ));
        }
    }
    if !differences.is_empty() {
        return Err(DelegationError::Mismatch {
            differences: differences.join("; "),
        });
    }
    Ok(DelegatedScope {
        owner_plugin_id: stored.owner_plugin_id.clone(),
        harness_id,
        delegate_plugin_id: run.delegate_plugin_id.clone(),
    })
}

/// What may be done to a session besides running it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChange {
    Create,
    Patch,
    Reset,
    Delete,
    Archive,
    GatewayMutation,
}

/// Changing a session stays with its owner (spec §5 rule 24): anyone else,
/// delegates included, is refused with "owned by plugin OWNER".
pub fn authorize_session_change(
    stored: &StoredSession,
    actor_plugin_id: &str,
    change: SessionChange,
) -> Result<(), DelegationError> {
    let _ = change;
    if actor_plugin_id == stored.owner_plugin_id {
        Ok(())
    } else {
        Err(DelegationError::OwnerOnly {
            owner: stored.owner_plugin_id.clone(),
        })
    }
}
