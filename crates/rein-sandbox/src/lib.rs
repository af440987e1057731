//! `rein-sandbox`: where a task's commands may act.
//!
//! Layout: [`guard`] decides which directories a task may be given (its
//! workspace, the directories it may read): never `/`, a system directory or
//! rein's own data; [`workspace`] confines paths to a task's workspace (`..`, absolute
//! paths elsewhere and symlinks out are refused, naming the path); [`pin`]
//! holds a task's workspace to the directory it was given (device and inode,
//! checked by opening the path with no symlink followed, and then used by
//! its open handle); [`confinement`] is what a sandboxed command may reach
//! beyond its workspace (the system's read-only directories, the files
//! among them kept hidden, the step's limits), whichever sandbox runs it;
//! [`bwrap`] runs
//! commands under bubblewrap with the workspace writable, the system read-only,
//! the rest of the file system absent, no network unless allowed, a fresh PID
//! namespace and a memory limit, after a real probe that says whether it can;
//! [`landlock`] is the fallback where bubblewrap cannot run: Landlock rules a
//! trampoline process applies to itself before it becomes the command; [`policy`]
//! holds the permission rules (allow / ask / deny for commands, paths and network)
//! and says which rule decided; [`process`] makes step processes die with rein
//! (the parent-death signal, set before `exec`) and stops what a killed rein
//! left behind, found by its recorded process group; [`supervise`] keeps the
//! trampoline as the step's supervisor, a subreaper that kills the step's
//! whole tree when the command ends, rein dies, rein's heartbeat stops, or
//! rein stops the step.
//! This crate decides nothing about people: asking for approval is the engine's.

pub mod bwrap;
pub mod confinement;
pub mod guard;
pub mod landlock;
pub mod pin;
pub mod policy;
pub mod process;
pub mod supervise;
pub mod workspace;

pub use bwrap::{Reach, Sandbox, SandboxKind, Trampoline, Unavailable};
pub use confinement::Confinement;
pub use guard::{Protected, Refused};
pub use pin::{Changed, Pinned, WorkspacePin};
pub use policy::{
    Access, AskTrigger, Decision, PermissionRule, Policy, PolicyError, Verdict, simple_commands,
};
pub use workspace::{PathError, resolve};
