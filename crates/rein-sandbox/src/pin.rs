//! A task's workspace pinned by identity. A workspace is checked when the task
//! is given it; what a later step gets must be that same directory, not
//! whatever the path names by then. Someone who can write to a directory on
//! the way (a parent owned by another user, another task's step working in
//! it) could otherwise move the workspace away and leave a symlink to `/`
//! in its place, and the next step would bind `/`, writable, as the
//! workspace.
//!
//! So the directory is identified once — device, inode, owner — and recorded
//! with the task ([`rein_protocol::WorkspacePin`]); every later use opens the
//! stored path with no symlink followed anywhere along it (`openat2` with
//! `RESOLVE_NO_SYMLINKS`) and compares what it opened with the record
//! ([`Pinned::open`]). The open descriptor is then what is used: the sandbox
//! binds it (bubblewrap's `--bind-fd`), Landlock's rule is made from it, the
//! command's working directory is set from it (`fchdir`), and rein's own
//! file tools work beneath it (`RESOLVE_BENEATH`), so nothing between the
//! check and the use can swap it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{Mode, fstat};
pub use rein_protocol::WorkspacePin;

/// The descriptor number a trampoline hands the pinned workspace to
/// bubblewrap under (`--bind-fd 3`).
pub const PINNED_FD: i32 = 3;

/// A workspace: its path (resolved when the task was given it) and which
/// directory that was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub path: PathBuf,
    pub pin: WorkspacePin,
}

/// Why the directory at a workspace's path is not the one the task was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Changed {
    #[error(
        "the workspace {} now leads through a symlink: a directory on its path was replaced since the task was given it",
        .path.display()
    )]
    Symlink { path: PathBuf },
    #[error("the workspace {} is gone ({detail})", .path.display())]
    Gone { path: PathBuf, detail: String },
    #[error(
        "the workspace {} is another directory than the task was given (device {}, inode {} then; device {}, inode {} now): it was moved or replaced",
        .path.display(), .was.0, .was.1, .now.0, .now.1
    )]
    Replaced {
        path: PathBuf,
        was: (u64, u64),
        now: (u64, u64),
    },
    #[error("the workspace {} cannot be opened: {detail}", .path.display())]
    Unreadable { path: PathBuf, detail: String },
}

/// Opens the directory at `path` as a handle (`O_PATH`), following no
/// symlink anywhere along it.
fn open_dir(path: &Path) -> Result<OwnedFd, Changed> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(nix::fcntl::AT_FDCWD, path, how).map_err(|e| match e {
        Errno::ELOOP => Changed::Symlink {
            path: path.to_owned(),
        },
        Errno::ENOENT | Errno::ENOTDIR => Changed::Gone {
            path: path.to_owned(),
            detail: e.desc().to_owned(),
        },
        other => Changed::Unreadable {
            path: path.to_owned(),
            detail: other.desc().to_owned(),
        },
    })
}

/// Opens the directory at `path` as [`open_dir`] does and, if `expected`
/// (device, inode) is given, checks it is that directory.
pub fn open_expecting(path: &Path, expected: Option<(u64, u64)>) -> Result<OwnedFd, Changed> {
    let fd = open_dir(path)?;
    if let Some(was) = expected {
        let now = identify(path, &fd)?;
        if (now.device, now.inode) != was {
            return Err(Changed::Replaced {
                path: path.to_owned(),
                was,
                now: (now.device, now.inode),
            });
        }
    }
    Ok(fd)
}

fn identify(path: &Path, fd: &OwnedFd) -> Result<WorkspacePin, Changed> {
    let stat = fstat(fd).map_err(|e| Changed::Unreadable {
        path: path.to_owned(),
        detail: e.desc().to_owned(),
    })?;
    Ok(WorkspacePin {
        device: stat.st_dev,
        inode: stat.st_ino,
        owner_uid: stat.st_uid,
        owner_gid: stat.st_gid,
    })
}

impl Pinned {
    /// Pins the directory at `path` as it is now (the path resolved, with no
    /// symlink left in it).
    pub fn pin(path: &Path) -> Result<Pinned, Changed> {
        let fd = open_dir(path)?;
        Ok(Pinned {
            path: path.to_owned(),
            pin: identify(path, &fd)?,
        })
    }

    /// Pins the directory `path` leads to now, symlinks followed (a scratch
    /// directory of rein's own, as for a trial command).
    pub fn pin_resolved(path: &Path) -> Result<Pinned, String> {
        let real = crate::guard::real_path(path).map_err(|e| e.to_string())?;
        Pinned::pin(&real).map_err(|e| e.to_string())
    }

    /// The workspace at `path` that was `pin`.
    pub fn new(path: PathBuf, pin: WorkspacePin) -> Pinned {
        Pinned { path, pin }
    }

    /// A handle on the pinned directory, if the path still leads to it with
    /// no symlink on the way; else what changed.
    pub fn open(&self) -> Result<OwnedFd, Changed> {
        open_expecting(&self.path, Some((self.pin.device, self.pin.inode)))
    }

    /// Whether the path still leads to the pinned directory.
    pub fn verify(&self) -> Result<(), Changed> {
        self.open().map(drop)
    }

    /// The user and group that own it, as recorded: whom a root rein runs
    /// its commands as (`None` when that is root itself, or rein is not root).
    pub fn run_as(&self) -> Option<(u32, u32)> {
        (nix::unistd::geteuid().is_root() && self.pin.owner_uid != 0)
            .then_some((self.pin.owner_uid, self.pin.owner_gid))
    }

    /// The pin as a trampoline takes it (`--pin DEV:INO`).
    pub fn arg(&self) -> String {
        format!("{}:{}", self.pin.device, self.pin.inode)
    }

    /// Reads the file at `relative` (a path inside the workspace, as
    /// [`crate::resolve`] makes it relative) beneath the pinned directory.
    pub fn read(&self, relative: &Path) -> std::io::Result<Vec<u8>> {
        let dir = self.open().map_err(other)?;
        let fd = beneath(&dir, relative, OFlag::O_RDONLY, Mode::empty())?;
        let mut file = std::fs::File::from(fd);
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)?;
        Ok(bytes)
    }

    /// Writes `bytes` to the file at `relative`, making the directories on
    /// its way, all beneath the pinned directory.
    pub fn write(&self, relative: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let dir = self.open().map_err(other)?;
        let (parent, name) = split(relative)?;
        let mut at = dir;
        for part in parent.components() {
            let Component::Normal(part) = part else {
                continue;
            };
            match nix::sys::stat::mkdirat(&at, part, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(e.into()),
            }
            at = beneath(
                &at,
                Path::new(part),
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                Mode::empty(),
            )?;
        }
        let fd = beneath(
            &at,
            Path::new(name),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC,
            Mode::from_bits_truncate(0o644),
        )?;
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, bytes)
    }

    /// The names in the directory at `relative` (directories end in `/`),
    /// sorted, beneath the pinned directory.
    pub fn list(&self, relative: &Path) -> std::io::Result<Vec<String>> {
        let dir = self.open().map_err(other)?;
        let fd = beneath(
            &dir,
            relative,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )?;
        let mut listing = nix::dir::Dir::from_fd(fd)?;
        let mut names: Vec<String> = listing
            .iter()
            .filter_map(Result::ok)
            .filter(|e| ![&b"."[..], b".."].contains(&e.file_name().to_bytes()))
            .map(|e| {
                let dir = e.file_type() == Some(nix::dir::Type::Directory);
                let name = OsStr::from_bytes(e.file_name().to_bytes()).to_string_lossy();
                format!("{name}{}", if dir { "/" } else { "" })
            })
            .collect();
        names.sort();
        Ok(names)
    }
}

fn other(changed: Changed) -> std::io::Error {
    std::io::Error::other(changed.to_string())
}

/// The directory part and the file name of `relative`.
fn split(relative: &Path) -> std::io::Result<(&Path, &OsStr)> {
    match (relative.parent(), relative.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{}` names no file", relative.display()),
        )),
    }
}

/// Opens `relative` beneath `dir`: symlinks are followed only while they
/// stay beneath it, `..` never leaves it, and an absolute path is refused.
fn beneath(dir: &impl AsFd, relative: &Path, flags: OFlag, mode: Mode) -> std::io::Result<OwnedFd> {
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(mode)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(dir.as_fd(), relative, how).map_err(|e| match e {
        Errno::EXDEV => std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("`{}` leads out of the workspace", relative.display()),
        ),
        other => other.into(),
    })
}

/// What a forked child does with the workspace's handle before it becomes
/// its program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InChild {
    /// Keep it open across `exec` (clear its close-on-exec flag), for a
    /// program told its number (bubblewrap's `--bind-fd`).
    KeepOpen,
    /// Make it the working directory (`fchdir`).
    Enter,
}

/// Has the child that `command` forks do `what` with `opened` (the
/// workspace opened as pinned, before the fork), or fail to start with
/// `ESTALE` if it could not be opened so (the caller checked it just before,
/// so this is a swap in between).
pub fn in_child(
    command: &mut tokio::process::Command,
    opened: Result<OwnedFd, Changed>,
    what: InChild,
) {
    // SAFETY: the closure runs in the child between fork and exec: one
    // system call (fcntl or fchdir) on a descriptor opened before the fork,
    // or an error made before it; nothing is allocated.
    #[allow(unsafe_code)]
    unsafe {
        match opened {
            Ok(fd) => command.pre_exec(move || match what {
                InChild::KeepOpen => keep_across_exec(fd.as_raw_fd()),
                InChild::Enter => nix::unistd::fchdir(&fd).map_err(std::io::Error::from),
            }),
            Err(_changed) => {
                command.pre_exec(|| Err(std::io::Error::from_raw_os_error(nix::libc::ESTALE)))
            }
        };
    }
}

/// Makes `fd` survive `exec` (clears its close-on-exec flag).
fn keep_across_exec(fd: i32) -> std::io::Result<()> {
    // SAFETY: fcntl on a descriptor number; it neither reads nor writes memory.
    #[allow(unsafe_code)]
    let done = unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) };
    if done == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Puts `fd` at [`PINNED_FD`], open across `exec`, for a program about to
/// become bubblewrap with `--bind-fd 3`.
pub fn hand_on(fd: OwnedFd) -> std::io::Result<()> {
    let raw = fd.as_raw_fd();
    if raw == PINNED_FD {
        std::mem::forget(fd);
        return keep_across_exec(PINNED_FD);
    }
    // SAFETY: dup2 onto a fixed number in a process that is about to exec;
    // the new descriptor is not close-on-exec.
    #[allow(unsafe_code)]
    let done = unsafe { nix::libc::dup2(raw, PINNED_FD) };
    if done == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_swapped_workspace_is_told_apart_naming_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let outer = dir.path().canonicalize().unwrap().join("outer");
        let inner = outer.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        let pinned = Pinned::pin(&inner).unwrap();
        pinned.verify().unwrap();
        // Swapped for a symlink to `/`.
        std::fs::rename(&inner, outer.join("inner.old")).unwrap();
        std::os::unix::fs::symlink("/", &inner).unwrap();
        let why = pinned.verify().unwrap_err();
        assert!(matches!(why, Changed::Symlink { .. }), "{why}");
        assert!(why.to_string().contains("symlink"), "{why}");
        // A symlink higher up is refused the same way.
        std::fs::remove_file(&inner).unwrap();
        std::fs::rename(outer.join("inner.old"), &inner).unwrap();
        pinned.verify().unwrap();
        std::fs::rename(&outer, dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("moved"), &outer).unwrap();
        assert!(matches!(pinned.verify(), Err(Changed::Symlink { .. })));
        // Swapped for another directory.
        std::fs::remove_file(&outer).unwrap();
        std::fs::create_dir_all(&inner).unwrap();
        let why = pinned.verify().unwrap_err();
        assert!(matches!(why, Changed::Replaced { .. }), "{why}");
        assert!(why.to_string().contains("moved or replaced"), "{why}");
        // Gone.
        std::fs::remove_dir_all(&outer).unwrap();
        assert!(matches!(pinned.verify(), Err(Changed::Gone { .. })));
    }

    #[test]
    fn file_tools_work_beneath_the_pinned_directory_only() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let pinned = Pinned::pin(&ws).unwrap();
        pinned.write(Path::new("a/b/c.txt"), b"hi").unwrap();
        assert_eq!(pinned.read(Path::new("a/b/c.txt")).unwrap(), b"hi");
        assert_eq!(pinned.list(Path::new("")).unwrap(), vec!["a/"]);
        assert_eq!(pinned.list(Path::new("a/b")).unwrap(), vec!["c.txt"]);
        // A symlink inside that stays inside is followed; one out is not
        // (absolute ones are followed by `resolve` first, which callers use).
        std::os::unix::fs::symlink("a", ws.join("in")).unwrap();
        assert_eq!(pinned.read(Path::new("in/b/c.txt")).unwrap(), b"hi");
        std::os::unix::fs::symlink("/etc", ws.join("out")).unwrap();
        let err = pinned.read(Path::new("out/hostname")).unwrap_err();
        assert!(err.to_string().contains("leads out"), "{err}");
        assert!(pinned.write(Path::new("out/x"), b"x").is_err());
        assert!(pinned.read(Path::new("../x")).is_err());
        // Once the workspace is swapped, nothing is read or written through it.
        std::fs::rename(&ws, dir.path().join("old")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("old"), &ws).unwrap();
        let err = pinned.write(Path::new("y"), b"y").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!dir.path().join("old/y").exists());
    }
}
