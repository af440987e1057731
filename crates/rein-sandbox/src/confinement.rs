//! What a sandboxed command may reach beyond its workspace, whichever
//! sandbox runs it (bubblewrap or Landlock): the system directories it may
//! read, the files among them that stay hidden, and the step's own
//! [`Confinement`].

use std::path::PathBuf;
use std::time::Duration;

/// System directories a command may read (those that exist on this host).
pub(crate) const READ_ONLY: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];

/// Files under the read-only directories that stay hidden (masked with /dev/null).
pub(crate) const MASKED: &[&str] = &["/etc/shadow", "/etc/gshadow", "/etc/sudoers"];

/// What a sandboxed command may do beyond its workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// Whether it may open network connections (it shares the host's network).
    pub network: bool,
    /// Most bytes of address space each of its processes may map.
    pub memory_bytes: Option<u64>,
    /// More directories it may read (read-only), e.g. a toolchain outside /usr.
    pub read_only: Vec<PathBuf>,
    /// Most processes it may have at once. Counted per sandbox (each runs in a
    /// user namespace of its own); it does not bind a command run as root,
    /// which the caller avoids with `run_as`.
    pub processes: Option<u64>,
    /// The user and group to run as (uid, gid) instead of the caller's: a root
    /// caller runs a command as the owner of its workspace.
    pub run_as: Option<(u32, u32)>,
    /// Directories that stay out of reach whatever else is mounted (rein's
    /// data directory): under bubblewrap an empty tmpfs covers each one that a
    /// mounted directory would show, with the workspace bound again on top if
    /// it lies inside. Landlock cannot carve a sub-tree out of a rule, so
    /// there it is the workspace checks ([`crate::guard`]) that keep them out.
    pub hidden: Vec<PathBuf>,
    /// rein writes to the command's stdin while it runs it; the supervisor
    /// kills the command's tree when nothing comes for this long (see
    /// [`crate::supervise`]); the command itself reads `/dev/null`.
    pub heartbeat: Option<Duration>,
}
