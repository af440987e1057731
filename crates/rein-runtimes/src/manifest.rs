//! What every harness a plugin manifest declares shares, whatever protocol it
//! speaks ([`crate::plugin`]'s JSON-RPC, [`crate::acp`]'s ACP): how the
//! manifest's command is started, and the harness methods its declaration
//! answers.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A manifest's program, ready to start: a relative program path (and the
/// working directory) is the manifest's directory; stdin, stdout and stderr
/// are pipes; the child is killed if rein drops it. Returns the program's path
/// too, for error messages.
pub(crate) fn manifest_command(
    dir: &Path,
    command: &[String],
    env: &std::collections::BTreeMap<String, String>,
) -> (tokio::process::Command, PathBuf) {
    let program = command.first().map(String::as_str).unwrap_or_default();
    let path = if program.contains('/') && !Path::new(program).is_absolute() {
        dir.join(program)
    } else {
        PathBuf::from(program)
    };
    let mut cmd = tokio::process::Command::new(&path);
    cmd.args(command.get(1..).unwrap_or_default())
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    (cmd, path)
}

/// The parts of [`rein_core::harness::AgentHarness`] a manifest's harness declaration (`decl`)
/// answers, for the harnesses plugins register.
macro_rules! declared_harness {
    () => {
        fn id(&self) -> &str {
            &self.decl.id
        }

        fn label(&self) -> &str {
            &self.decl.label
        }

        fn auto_selection_provider_ids(&self) -> Option<Vec<String>> {
            self.decl.auto_selection_provider_ids.clone()
        }

        fn auth_bootstrap_harness(&self) -> bool {
            self.decl.auth_bootstrap == rein_protocol::plugin::AuthBootstrap::Harness
        }

        fn workspace_environment(&self) -> Option<rein_protocol::WorkspaceEnvironment> {
            self.decl.workspace_environment.clone()
        }

        fn delegated_execution_plugin_ids(&self) -> Vec<String> {
            self.decl.delegated_execution_plugin_ids.clone()
        }

        fn resolve_isolated_completion_runtime(
            &self,
            owner: rein_core::harness::isolated::CompletionOwner,
        ) -> rein_core::harness::isolated::CompletionRuntime {
            use rein_core::harness::isolated::{CompletionOwner, CompletionRuntime};
            use rein_protocol::plugin::RuntimeChoice;
            let declared = self.decl.isolated_completion_runtime.unwrap_or_default();
            let choice = match owner {
                CompletionOwner::Host => declared.host,
                CompletionOwner::Harness => declared.harness,
            };
            match choice {
                RuntimeChoice::Rein => CompletionRuntime::Rein,
                RuntimeChoice::OwnRuntime => CompletionRuntime::OwnRuntime,
            }
        }
    };
}
pub(crate) use declared_harness;
