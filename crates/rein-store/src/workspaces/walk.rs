//! One save's walk of a workspace: what it reads, and what it remembers for
//! the next save of the same task so that the next one reads only what
//! changed.
//!
//! - A directory is listed again only when its own stamp moved: adding,
//!   removing or renaming an entry sets its modification and change times,
//!   so while the stamp is the one it had when it was listed (and both its
//!   times had settled by then: more than a second old, as the clock of a
//!   file system ticks coarsely), its names are the same. Each name is
//!   still looked at (`fstatat`) at every save: a file's bytes change
//!   without its directory's times moving.
//! - A directory whose entries all came out as before keeps its tree: it is
//!   neither encoded nor hashed nor offered to the database again.
//! - Subdirectories are walked on every core (a rayon pool of its own, whose
//!   threads have room for a tree [`MAX_DEPTH`] deep). The database
//!   is written by the thread that holds the save's transaction: the walk
//!   hands it each new object through a bounded channel, so a first save of
//!   a large workspace holds a few objects in memory, not all of them.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Mutex, OnceLock};

use nix::fcntl::{AtFlags, OFlag, readlinkat};
use nix::sys::stat::{FileStat, SFlag, fstat, fstatat};
use rayon::prelude::*;
use rein_core::saved::Excludes;
use sha2::{Digest, Sha256};

use super::{Entry, Hash, INLINE_MAX, Stamp, encode_tree, kind, open_in};

/// How deep directories are kept: one nested deeper is left out (and said
/// so), so that a step making a directory in a directory ten thousand
/// times over cannot exhaust the walk's stack.
pub(super) const MAX_DEPTH: usize = 256;

/// What is said of the directories below [`MAX_DEPTH`].
const TOO_DEEP: &str = "(directories nested more than 256 deep)";

/// The walk's threads: one a core (or `RAYON_NUM_THREADS`), each with room
/// for the recursion of a tree [`MAX_DEPTH`] deep.
pub(super) fn pool() -> Result<&'static rayon::ThreadPool, String> {
    static POOL: OnceLock<Result<rayon::ThreadPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("rein-keep-{i}"))
            .stack_size(32 << 20)
            .build()
            .map_err(|e| format!("cannot start the threads that keep workspaces: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// What the last save saw of one directory.
#[derive(Debug, Default)]
pub(super) struct DirMemo {
    /// The directory's own stamp when it was listed, if its times had
    /// settled by then: while its stamp is this one, its names are those
    /// of `children`.
    pub(super) listed: Option<Stamp>,
    /// Every name it held, in byte order, with what was remembered of it.
    pub(super) children: Vec<Child>,
    /// The tree of its kept entries, as that save stored it.
    pub(super) tree: Option<Hash>,
}

/// A name in a directory and what was remembered of it.
#[derive(Debug, Default)]
pub(super) struct Child {
    pub(super) name: Vec<u8>,
    /// Its entry in the directory's tree; none if it was left out.
    pub(super) entry: Option<Entry>,
    /// A regular file's stamp when it was read, if its times had settled
    /// (its object and size are those of its entry).
    pub(super) file: Option<Stamp>,
    /// A directory's own memo.
    pub(super) dir: Option<Box<DirMemo>>,
}

/// A new object for the keeper's database.
pub(super) enum Object {
    /// A small file's bytes, or a tree.
    Inline { hash: Hash, data: Vec<u8> },
    /// A large file, copied to `temp` while it was hashed (`rel` names it
    /// in the workspace, for errors).
    Large {
        hash: Hash,
        size: u64,
        temp: PathBuf,
        rel: PathBuf,
    },
}

/// What a walk counted.
#[derive(Debug, Default)]
pub(super) struct Totals {
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) left_out: u64,
    pub(super) matched: BTreeSet<String>,
}

/// One save's walk, shared by the threads that walk its directories.
pub(super) struct Walk<'a> {
    pub(super) objects: &'a Path,
    pub(super) excludes: &'a Excludes,
    pub(super) cap: u64,
    /// Seconds since the epoch before which times are trusted.
    pub(super) settled: i64,
    pub(super) sink: SyncSender<Object>,
    /// Set by the database's side when it failed: the walk stops.
    pub(super) stop: &'a AtomicBool,
    files: AtomicU64,
    bytes: AtomicU64,
    left: Mutex<(u64, BTreeSet<String>)>,
    temps: AtomicU64,
}

impl<'a> Walk<'a> {
    pub(super) fn new(
        objects: &'a Path,
        excludes: &'a Excludes,
        cap: u64,
        settled: i64,
        sink: SyncSender<Object>,
        stop: &'a AtomicBool,
    ) -> Walk<'a> {
        Walk {
            objects,
            excludes,
            cap,
            settled,
            sink,
            stop,
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            left: Mutex::new((0, BTreeSet::new())),
            temps: AtomicU64::new(0),
        }
    }

    /// Walks the workspace open as `root`: its tree, and what to remember.
    pub(super) fn root(
        self,
        root: &OwnedFd,
        memo: DirMemo,
    ) -> Result<(Hash, DirMemo, Totals), String> {
        let dir = open_in(root, OsStr::new("."), OFlag::O_RDONLY | OFlag::O_DIRECTORY)
            .map_err(|e| format!("cannot open the workspace: {e}"))?;
        let own = fstat(dir.as_fd()).map_err(|e| format!("cannot read the workspace: {e}"))?;
        let (hash, memo) = self.tree(&dir, Path::new(""), 0, Stamp::of(&own), memo)?;
        let (left_out, matched) = self
            .left
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let totals = Totals {
            files: self.files.into_inner(),
            bytes: self.bytes.into_inner(),
            left_out,
            matched,
        };
        Ok((hash, memo, totals))
    }

    fn send(&self, object: Object) -> Result<(), String> {
        if self.stop.load(Ordering::Relaxed) {
            return Err("the save stopped".into());
        }
        self.sink
            .send(object)
            .map_err(|_| "the save stopped".to_owned())
    }

    fn leave_out(&self, why: &str) {
        let mut left = self
            .left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        left.0 += 1;
        left.1.insert(why.to_owned());
    }

    /// Counts a file into a directory's `tally` (files, bytes), and checks
    /// the cap before a file is read: the whole walk's count so far and
    /// this directory's.
    fn count(&self, tally: &mut (u64, u64), len: u64, reading: bool) -> Result<(), String> {
        tally.0 += 1;
        tally.1 += len;
        if reading {
            self.within_cap(self.bytes.load(Ordering::Relaxed) + tally.1)?;
        }
        Ok(())
    }

    /// Adds a directory's tally to the walk's (once a directory: the
    /// threads do not contend on the counters file by file).
    fn add(&self, tally: (u64, u64)) -> Result<(), String> {
        self.files.fetch_add(tally.0, Ordering::Relaxed);
        let bytes = self.bytes.fetch_add(tally.1, Ordering::Relaxed) + tally.1;
        self.within_cap(bytes)
    }

    fn within_cap(&self, bytes: u64) -> Result<(), String> {
        if bytes > self.cap {
            return Err(format!(
                "the workspace holds more than snapshot.max_bytes ({} bytes); raise it or exclude what need not be kept",
                self.cap
            ));
        }
        Ok(())
    }

    /// Keeps the directory open as `dir` (at `rel` in the workspace, its
    /// stamp `own` taken through `dir` before it is listed): its tree's
    /// hash, and what to remember of it. Everything in it is read through
    /// descriptors opened beneath it, so what a step changes meanwhile is
    /// never followed out.
    fn tree(
        &self,
        dir: &OwnedFd,
        rel: &Path,
        depth: usize,
        own: Stamp,
        mut memo: DirMemo,
    ) -> Result<(Hash, DirMemo), String> {
        if self.stop.load(Ordering::Relaxed) {
            return Err("the save stopped".into());
        }
        let shown = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let read = |e: nix::Error| format!("cannot read {} in the workspace: {e}", shown.display());
        // The tree is made again only if an entry came out differently: a
        // new or changed one, or one of the last tree's gone.
        let mut changed = memo.tree.is_none();
        // Listed again unless its stamp is the one it was listed with (the
        // stamp was taken before the listing, so a change made while it was
        // being listed moved it). Otherwise its names are the remembered
        // ones, each with what was remembered of it.
        let relisted = memo.listed != Some(own);
        let mut children = std::mem::take(&mut memo.children);
        if relisted {
            let listing = dir
                .try_clone()
                .map_err(|e| format!("cannot read {}: {e}", shown.display()))?;
            let mut listing = nix::dir::Dir::from_fd(listing).map_err(read)?;
            let mut names: Vec<Vec<u8>> = Vec::new();
            for entry in listing.iter() {
                let name = entry.map_err(read)?.file_name().to_bytes().to_vec();
                if name != b"." && name != b".." {
                    names.push(name);
                }
            }
            names.sort();
            // Both in byte order: walked side by side.
            let mut old = children.into_iter().peekable();
            children = Vec::with_capacity(names.len());
            for name in names {
                while let Some(gone) = old.next_if(|o| o.name < name) {
                    changed |= gone.entry.is_some();
                }
                children.push(match old.next_if(|o| o.name == name) {
                    Some(known) => known,
                    None => Child {
                        name,
                        ..Child::default()
                    },
                });
            }
            changed |= old.any(|gone| gone.entry.is_some());
        }
        // Subdirectories: (their child, the tree they had).
        let mut subdirs: Vec<(usize, Option<Hash>)> = Vec::new();
        // Its files and their bytes, added to the walk's at the end.
        let mut tally = (0, 0);
        let mut gone = false;
        for (at, child) in children.iter_mut().enumerate() {
            let os = OsStr::from_bytes(&child.name);
            let st = match fstatat(dir.as_fd(), os, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Gone since the listing (or since it was last listed).
                Err(nix::Error::ENOENT) => {
                    changed |= child.entry.is_some();
                    child.name.clear();
                    gone = true;
                    continue;
                }
                Err(e) => return Err(read(e)),
            };
            let file = child.file.take();
            let dir_memo = child.dir.take();
            // A name kept before is UTF-8 (the same bytes).
            let left_out = if child.entry.is_none() && std::str::from_utf8(&child.name).is_err() {
                Some("(names that are not UTF-8)")
            } else if kind(&st) == SFlag::S_IFDIR && depth >= MAX_DEPTH {
                Some(TOO_DEEP)
            } else {
                self.excludes
                    .matching_any(|| rel.join(os), kind(&st) == SFlag::S_IFDIR)
            };
            if let Some(why) = left_out {
                self.leave_out(why);
                changed |= child.entry.take().is_some();
                continue;
            }
            let text = || String::from_utf8_lossy(&child.name).into_owned();
            let mode = st.st_mode & 0o7777;
            let entry = match kind(&st) {
                SFlag::S_IFLNK => {
                    let target = readlinkat(dir.as_fd(), os).map_err(read)?;
                    let entry = Entry::Link {
                        name: text(),
                        target: target.to_string_lossy().into_owned(),
                    };
                    changed |= child.entry.as_ref() != Some(&entry);
                    Some(entry)
                }
                SFlag::S_IFDIR => {
                    // Its tree is known once it is walked (below).
                    let (entry, had) = match child.entry.take() {
                        Some(kept @ Entry::Dir { mode: m, tree, .. }) if m == mode => {
                            (kept, Some(tree))
                        }
                        _ => {
                            changed = true;
                            let entry = Entry::Dir {
                                name: text(),
                                mode,
                                tree: [0; 32],
                            };
                            (entry, None)
                        }
                    };
                    subdirs.push((at, had));
                    child.dir = dir_memo;
                    Some(entry)
                }
                SFlag::S_IFREG => {
                    let known = match (file, &child.entry) {
                        (Some(stamp), Some(Entry::File { hash, size, .. })) => {
                            Some((stamp, *hash, *size))
                        }
                        _ => None,
                    };
                    let (hash, size, remembered) =
                        self.file(dir, os, rel, &st, known, &mut tally)?;
                    child.file = remembered;
                    match child.entry.take() {
                        Some(
                            kept @ Entry::File {
                                mode: m,
                                size: s,
                                hash: h,
                                ..
                            },
                        ) if (m, s, h) == (mode, size, hash) => Some(kept),
                        _ => {
                            changed = true;
                            Some(Entry::File {
                                name: text(),
                                mode,
                                size,
                                hash,
                            })
                        }
                    }
                }
                _ => {
                    self.leave_out("(sockets, pipes and devices)");
                    changed |= child.entry.is_some();
                    None
                }
            };
            child.entry = entry;
        }
        self.add(tally)?;
        // The subdirectories, on every core.
        let jobs: Vec<(usize, Option<Hash>, DirMemo)> = subdirs
            .into_iter()
            .map(|(at, had)| {
                let memo = children
                    .get_mut(at)
                    .and_then(|c| c.dir.take())
                    .map(|memo| *memo)
                    .unwrap_or_default();
                (at, had, memo)
            })
            .collect();
        let walked: Vec<(usize, Option<Hash>, Hash, DirMemo)> = jobs
            .into_par_iter()
            .map(|(at, had, memo)| {
                let name = OsStr::from_bytes(&children[at].name);
                let sub = rel.join(name);
                let failed =
                    |e: nix::Error| format!("cannot open {} in the workspace: {e}", sub.display());
                let sub_dir =
                    open_in(dir, name, OFlag::O_RDONLY | OFlag::O_DIRECTORY).map_err(failed)?;
                // The stamp of the directory opened (not of the name as it
                // was looked at: another directory renamed over it since
                // would otherwise be read with the first one's names).
                let own = fstat(sub_dir.as_fd()).map_err(failed)?;
                let (hash, memo) = self.tree(&sub_dir, &sub, depth + 1, Stamp::of(&own), memo)?;
                Ok((at, had, hash, memo))
            })
            .collect::<Result<_, String>>()?;
        for (at, had, hash, memo) in walked {
            changed |= had != Some(hash);
            if let Some(child) = children.get_mut(at) {
                if let Some(Entry::Dir { tree, .. }) = child.entry.as_mut() {
                    *tree = hash;
                }
                child.dir = Some(Box::new(memo));
            }
        }
        // Names gone since the listing are dropped (only now: the
        // subdirectories were found by their place).
        if gone {
            children.retain(|c| !c.name.is_empty());
        }
        // Its tree, unless every entry came out as before.
        let hash = match memo.tree {
            Some(hash) if !changed => hash,
            _ => {
                let body = encode_tree(children.iter().filter_map(|c| c.entry.as_ref()));
                let hash: Hash = Sha256::digest(&body).into();
                self.send(Object::Inline { hash, data: body })?;
                hash
            }
        };
        // Its names are trusted later only if both its times had settled
        // when they were read: a change time cannot be put back, so any
        // later change moves it past the one remembered.
        let listed = if relisted {
            (own.mtime.0 < self.settled && own.ctime.0 < self.settled).then_some(own)
        } else {
            memo.listed
        };
        Ok((
            hash,
            DirMemo {
                listed,
                children,
                tree: Some(hash),
            },
        ))
    }

    /// Keeps the regular file `name` of `dir` (at `rel`; listed as `st`):
    /// its object's hash, its size as read, and what to remember of it.
    fn file(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        rel: &Path,
        st: &FileStat,
        prior: Option<(Stamp, Hash, u64)>,
        tally: &mut (u64, u64),
    ) -> Result<(Hash, u64, Option<Stamp>), String> {
        let failed = |e: String| {
            format!(
                "cannot read {} in the workspace: {e}",
                rel.join(name).display()
            )
        };
        let stamp = Stamp::of(st);
        if let Some((was, hash, size)) = prior
            && was == stamp
        {
            self.count(tally, size, false)?;
            return Ok((hash, size, Some(stamp)));
        }
        // Not blocking on a pipe swapped in since the listing; what was
        // opened is read only if it is still a regular file.
        let fd = open_in(dir, name, OFlag::O_RDONLY | OFlag::O_NONBLOCK)
            .map_err(|e| failed(e.to_string()))?;
        let now = fstat(fd.as_fd()).map_err(|e| failed(e.to_string()))?;
        if kind(&now) != SFlag::S_IFREG {
            return Err(failed("it was replaced while it was being kept".into()));
        }
        let stamp = Stamp::of(&now);
        self.count(tally, stamp.len, true)?;
        let mut file = std::fs::File::from(fd);
        let (hash, size) = if stamp.len <= INLINE_MAX {
            let mut bytes = Vec::with_capacity(stamp.len as usize);
            file.read_to_end(&mut bytes)
                .map_err(|e| failed(e.to_string()))?;
            let hash: Hash = Sha256::digest(&bytes).into();
            let size = bytes.len() as u64;
            self.send(Object::Inline { hash, data: bytes })?;
            (hash, size)
        } else {
            self.large(&mut file, &rel.join(name), stamp.ino)?
        };
        // Remembered for the next save, unless it was modified too recently
        // to tell a later change by. (A change that puts an old modification
        // time back, as `cp -p` and `tar` do, still moves the change time,
        // which the stamp compares.)
        let remembered = (size == stamp.len && stamp.mtime.0 < self.settled).then_some(stamp);
        Ok((hash, size, remembered))
    }

    /// A large file copied to a temporary object while it is hashed; the
    /// database's side names it by its hash (or drops it, if the keeper
    /// has it already).
    fn large(&self, from: &mut std::fs::File, rel: &Path, ino: u64) -> Result<(Hash, u64), String> {
        let failed =
            |e: std::io::Error| format!("cannot keep {} of the workspace: {e}", rel.display());
        let n = self.temps.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .objects
            .join(format!("{}-{ino}-{n}.tmp", std::process::id()));
        let mut to = std::fs::File::create(&temp).map_err(failed)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        let copied = (|| -> std::io::Result<()> {
            loop {
                let n = from.read(&mut buffer)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buffer[..n]);
                to.write_all(&buffer[..n])?;
                size += n as u64;
            }
            to.sync_all()
        })();
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&temp);
            return Err(failed(e));
        }
        let hash: Hash = hasher.finalize().into();
        let sent = self.send(Object::Large {
            hash,
            size,
            temp: temp.clone(),
            rel: rel.to_owned(),
        });
        if let Err(e) = sent {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        Ok((hash, size))
    }
}
