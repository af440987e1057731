//! Executor controllers (spec harness-sdk §3): what connects an agent session to
//! the environment it runs in, registered by a plugin, resolved from the
//! registry of the current invocation, and used through a handle that stops
//! working the moment its registry, its owner or its registration goes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::{HarnessRegistry, PluginApi, PluginStatus, RegistrationError};

/// The environment of one agent session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorBinding {
    pub session_key: String,
    pub agent_id: String,
    pub native_session_id: Option<String>,
    pub environment_id: String,
    pub remote_url: Option<String>,
    pub workspace_directory: PathBuf,
}

/// Connects (`ensure`) and releases (`retire`) exactly the environment of a
/// binding; both idempotent, neither creates or deletes agent sessions.
#[async_trait]
pub trait ExecutorController: Send + Sync {
    /// Absolute.
    fn workspace_directory(&self) -> &Path;
    async fn ensure(
        &self,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError>;
    async fn retire(
        &self,
        binding: &ExecutorBinding,
        ctx: &ExecutorContext,
    ) -> Result<(), ExecutorError>;
    /// Its plugin is reloaded: a controller that keeps a program running
    /// stops it, so that the next call starts it anew.
    async fn restart(&self) {}
}

/// Why an executor operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecutorError {
    /// The handle's registry, owner or registration is gone: resolve again.
    #[error("executor controller of plugin `{plugin}` is no longer available: {why}")]
    NoLongerAvailable { plugin: String, why: &'static str },
    /// The operation was asked about after it completed.
    #[error("executor operation of plugin `{plugin}` has already completed")]
    Completed { plugin: String },
    #[error("executor controller of plugin `{plugin}`: {message}")]
    Failed { plugin: String, message: String },
}

/// Why a controller could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("plugin `{0}` has registered no executor controller in this registry")]
    Missing(String),
    #[error("plugin `{0}` is disabled")]
    Disabled(String),
    #[error("plugin `{0}` is unavailable: its grants were revoked")]
    Revoked(String),
    #[error("this registry is retired; resolve from the current one")]
    Retired,
}

/// A registered controller and the registration it came with.
#[derive(Clone)]
pub(crate) struct Slot {
    pub(crate) controller: Arc<dyn ExecutorController>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").finish_non_exhaustive()
    }
}

impl PluginApi<'_> {
    /// Registers the plugin's executor controller (spec §3 rule 9): its
    /// workspace directory must be absolute, and a plugin has one.
    pub fn register_executor_controller(
        &mut self,
        controller: Arc<dyn ExecutorController>,
    ) -> Result<(), RegistrationError> {
        let plugin = self.plugin.id.clone();
        let result = if controller.workspace_directory().is_absolute() {
            match self.registry.controllers.entry(plugin) {
                std::collections::btree_map::Entry::Occupied(e) => {
                    Err(RegistrationError::SecondController {
                        plugin: e.key().clone(),
                    })
                }
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Slot { controller });
                    Ok(())
                }
            }
        } else {
            Err(RegistrationError::RelativeWorkspace {
                plugin,
                path: controller.workspace_directory().display().to_string(),
            })
        };
        if let Err(e) = &result {
            self.refused.push(e.clone());
        }
        result
    }
}

impl HarnessRegistry {
    /// The controller `plugin_id` registered in this registry (spec §3 rule 10):
    /// there is no other registry to fall back to.
    pub fn resolve_executor_controller(
        &self,
        plugin_id: &str,
    ) -> Result<ExecutorHandle, ResolveError> {
        if self.retired.is_cancelled() {
            return Err(ResolveError::Retired);
        }
        let plugin = self
            .plugins
            .get(plugin_id)
            .ok_or_else(|| ResolveError::Missing(plugin_id.to_owned()))?;
        match plugin.status.get() {
            PluginStatus::Enabled => {}
            PluginStatus::Disabled => return Err(ResolveError::Disabled(plugin_id.to_owned())),
            PluginStatus::Revoked => return Err(ResolveError::Revoked(plugin_id.to_owned())),
        }
        let slot = self
            .controllers
            .get(plugin_id)
            .ok_or_else(|| ResolveError::Missing(plugin_id.to_owned()))?;
        Ok(ExecutorHandle {
            plugin: plugin_id.to_owned(),
            generation: self.generation,
            controller: Arc::clone(&slot.controller),
            // The registration as it is now: a reload moves it on.
            serial: plugin.serial.load(Ordering::SeqCst),
            current_serial: Arc::clone(&plugin.serial),
            retired: self.retired.clone(),
            revoked: plugin.revoked.clone(),
        })
    }
}

/// A resolved controller, good for the registry generation it came from (spec
/// §3 rule 11). Resolve one per operation; never keep one across turns.
#[derive(Clone)]
pub struct ExecutorHandle {
    plugin: String,
    generation: u64,
    controller: Arc<dyn ExecutorController>,
    serial: u64,
    current_serial: Arc<AtomicU64>,
    retired: CancellationToken,
    revoked: CancellationToken,
}

impl std::fmt::Debug for ExecutorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorHandle")
            .field("plugin", &self.plugin)
            .field("generation", &self.generation)
            .finish()
    }
}

impl ExecutorHandle {
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn workspace_directory(&self) -> &Path {
        self.controller.workspace_directory()
    }

    /// Whether the handle still stands for a live registration.
    fn live(&self) -> Result<(), ExecutorError> {
        let why = if self.retired.is_cancelled() {
            "its registry was retired or replaced"
        } else if self.revoked.is_cancelled() {
            "its owner was revoked"
        } else if self.current_serial.load(Ordering::SeqCst) != self.serial {
            "its registration was replaced"
        } else {
            return Ok(());
        };
        Err(ExecutorError::NoLongerAvailable {
            plugin: self.plugin.clone(),
            why,
        })
    }

    /// Connects (or reconnects) the binding's environment.
    pub async fn ensure(
        &self,
        binding: &ExecutorBinding,
        cancel: &CancellationToken,
    ) -> Result<(), ExecutorError> {
        self.operate(Op::Ensure, binding, cancel).await
    }

    /// Releases the binding's environment.
    pub async fn retire(
        &self,
        binding: &ExecutorBinding,
        cancel: &CancellationToken,
    ) -> Result<(), ExecutorError> {
        self.operate(Op::Retire, binding, cancel).await
    }

    /// One operation under its own context (spec §3 rule 13): cancelled when the
    /// caller cancels, the registry retires or the owner is revoked; current
    /// before and after the call, and no longer once it has completed.
    async fn operate(
        &self,
        op: Op,
        binding: &ExecutorBinding,
        cancel: &CancellationToken,
    ) -> Result<(), ExecutorError> {
        self.live()?;
        let ctx = ExecutorContext {
            cancel: CancellationToken::new(),
            completed: Arc::new(AtomicBool::new(false)),
            handle: self.clone(),
        };
        let watch = {
            let (token, caller) = (ctx.cancel.clone(), cancel.clone());
            let (retired, revoked) = (self.retired.clone(), self.revoked.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = caller.cancelled() => {}
                    () = retired.cancelled() => {}
                    () = revoked.cancelled() => {}
                    () = token.cancelled() => return,
                }
                token.cancel();
            })
        };
        let result = async {
            ctx.assert_current()?;
            let outcome = match op {
                Op::Ensure => self.controller.ensure(binding, &ctx).await,
                Op::Retire => self.controller.retire(binding, &ctx).await,
            };
            ctx.assert_current()?;
            outcome
        }
        .await;
        ctx.completed.store(true, Ordering::SeqCst);
        ctx.cancel.cancel();
        let _ = watch.await;
        result
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Ensure,
    Retire,
}

/// What a controller is given with each operation: its cancellation, and
/// whether the operation is still current.
#[derive(Debug, Clone)]
pub struct ExecutorContext {
    /// Fires when the caller cancels, the registry retires or the owner is revoked.
    pub cancel: CancellationToken,
    completed: Arc<AtomicBool>,
    handle: ExecutorHandle,
}

impl ExecutorContext {
    /// Fails once the operation has completed, or its handle is no longer
    /// available; a controller checks it before acting.
    pub fn assert_current(&self) -> Result<(), ExecutorError> {
        if self.completed.load(Ordering::SeqCst) {
            return Err(ExecutorError::Completed {
                plugin: self.handle.plugin.clone(),
            });
        }
        self.handle.live()
    }
}
