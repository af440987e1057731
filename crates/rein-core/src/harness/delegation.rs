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

/// What rein keeps of `session` in the rule's terms: its key (the `ses_…` id
/// harnesses are given), its store path (the task it is kept beside), its
/// runtime's own id, and the owner (the plugin of the harness that served it).
/// Sessions in rein keep the route they were opened on: a session with a
/// route is model-locked.
pub fn stored_session(
    registry: &HarnessRegistry,
    session: &rein_protocol::AgentSessionInfo,
) -> Result<StoredSession, String> {
    let runtime = session
        .runtime
        .as_deref()
        .filter(|r| *r != rein_protocol::BUILTIN_RUNTIME);
    let Some(runtime) = runtime else {
        return Err(format!(
            "session {} is run by rein's built-in runtime, which is no plugin's and lists no delegates: only a session a plugin's harness served can be handed to another plugin",
            session.id
        ));
    };
    let Some(owner) = registry.get(runtime) else {
        return Err(format!(
            "session {} was served by harness `{runtime}`, which is not registered here: name its plugin with --plugin MANIFEST",
            session.id
        ));
    };
    Ok(StoredSession {
        key: session.id.to_string(),
        store_path: session.task_id.to_string(),
        session_id: session.native_session_id.clone().unwrap_or_default(),
        model_selection_locked: session.route.is_some(),
        agent_harness_id: Some(runtime.to_owned()),
        agent_harness_runtime_override: session.pinned_runtime.clone(),
        owner_plugin_id: owner.plugin.id.clone(),
    })
}

/// The loaded plugin `plugin`, or what to do about one that is not.
pub(crate) fn loaded<'r>(
    registry: &'r HarnessRegistry,
    plugin: &str,
) -> Result<&'r super::PluginState, String> {
    registry
        .known(plugin)
        .map_err(|e| format!("{e}; name its manifest with --plugin MANIFEST"))
}

/// The harness of plugin `plugin` that runs the sessions handed to it: its
/// first by id. The plugin must be loaded and active.
pub fn delegate_harness<'r>(
    registry: &'r HarnessRegistry,
    plugin: &str,
) -> Result<&'r super::Registered, String> {
    let status = loaded(registry, plugin)?.status.get();
    if status != super::PluginStatus::Enabled {
        return Err(format!(
            "plugin `{plugin}` is {}: it runs no sessions",
            status.as_str()
        ));
    }
    registry
        .harnesses()
        .filter(|r| r.plugin.id == plugin)
        .min_by(|a, b| a.harness.id().cmp(b.harness.id()))
        .ok_or_else(|| format!("plugin `{plugin}` registers no harness to run a session's turns"))
}

/// Whether the session's hand-over to `plugin` holds now (rules 22–23,
/// asked again before each of its turns: a manifest or a pin may have
/// changed): the scope it runs under and the harness that runs it, or why not.
pub fn authorize_session<'r>(
    registry: &'r HarnessRegistry,
    session: &rein_protocol::AgentSessionInfo,
    plugin: &str,
    asked: &DelegateAsk,
) -> Result<(DelegatedScope, &'r super::Registered), String> {
    let stored = stored_session(registry, session)?;
    let runner = delegate_harness(registry, plugin)?;
    let run = DelegatedRun {
        delegate_plugin_id: plugin.to_owned(),
        key: asked
            .session_key
            .clone()
            .unwrap_or_else(|| stored.key.clone()),
        store_path: asked
            .store_path
            .clone()
            .unwrap_or_else(|| stored.store_path.clone()),
        session_id: asked
            .session_id
            .clone()
            .unwrap_or_else(|| stored.session_id.clone()),
    };
    let scope = authorize_delegated_run(registry, &stored, &run).map_err(|e| e.to_string())?;
    Ok((scope, runner))
}

/// The session's identity as a delegate names it; what is left out is taken
/// as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DelegateAsk {
    pub session_key: Option<String>,
    pub store_path: Option<String>,
    pub session_id: Option<String>,
}

impl From<&DelegatedScope> for rein_protocol::plugin::DelegatedScope {
    fn from(s: &DelegatedScope) -> Self {
        rein_protocol::plugin::DelegatedScope {
            owner_plugin_id: s.owner_plugin_id.clone(),
            owner_harness_id: s.harness_id.clone(),
            delegate_plugin_id: s.delegate_plugin_id.clone(),
        }
    }
}
