//! Workspaces as they were, kept content-addressed under the data directory
//! (`saved/`): [`SavedWorkspaces`] implements rein-core's
//! [`WorkspaceHistory`].
//!
//! - An object is a file's bytes or a directory's listing (a tree), named by
//!   its SHA-256. Objects up to 64 KiB live in `saved/objects.db` (SQLite:
//!   small files packed into pages, not a disk block each: a table with a
//!   row id keeps a row of up to a page in the page, where a table keyed by
//!   the hash itself would spill any row over a quarter page); larger files
//!   under `saved/objects/`, written whole to a temporary name and renamed.
//! - A tree lists its entries by name: a file's mode, size and object, a
//!   directory's tree, a link's target. A directory that did not change has
//!   the same tree, so a point stores only the trees on the paths that did.
//! - A point is (task, log position, root tree). Saving one is one
//!   transaction: a kill leaves either the whole point or none of it, and
//!   at worst a temporary file, removed at the next open.
//! - A workspace is read through the descriptor of the directory the task
//!   was given (opened against its pin by the caller), and everything in it
//!   through descriptors opened beneath it with no symbolic link followed
//!   (`openat2`, `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, `O_NOFOLLOW`): a
//!   step that swaps a file or a directory for a link while it is kept
//!   cannot make rein read what the link names. A link is kept as a link.
//! - What a file's bytes hash to is remembered per task with the file's
//!   size, times and inode, so an unchanged file is not read again. A file
//!   changed in the last second is always read: its time may not have moved
//!   since it was remembered (the file system's clock ticks coarsely). A
//!   directory's names are remembered the same way, by its own stamp, and a
//!   directory whose entries all came out as before keeps its tree (see
//!   [`walk`]).
//! - Releasing a task's points deletes what no other point reaches.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::SystemTime;

use async_trait::async_trait;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::{FileStat, SFlag, fstat};
use rein_core::saved::{Excludes, Restored, WorkspaceHistory};
use rein_protocol::{SavedWorkspace, SnapshotRules, TaskId};
use rusqlite::{Connection, OptionalExtension, params};

mod walk;

use walk::{DirMemo, Walk};

/// Files up to this size are kept in the database.
const INLINE_MAX: u64 = 64 * 1024;

type Hash = [u8; 32];

/// What a file looked like when its hash was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
}

impl Stamp {
    fn of(st: &FileStat) -> Stamp {
        Stamp {
            len: u64::try_from(st.st_size).unwrap_or(0),
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            ino: st.st_ino,
        }
    }
}

/// Opens `name` in `dir` without following any symbolic link, nor leaving
/// `dir`: a file a step swapped for a link since the listing is not read
/// through it.
fn open_in(dir: &OwnedFd, name: &OsStr, flags: OFlag) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    openat2(dir.as_fd(), name, how)
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// What a task's last save saw of its workspace (or what a restore wrote
/// into it): the next save reads only what changed since.
#[derive(Default)]
struct Cache {
    root: Option<DirMemo>,
}

/// The keeper of workspaces as they were.
#[derive(Clone)]
pub struct SavedWorkspaces {
    inner: Arc<Inner>,
}

struct Inner {
    objects: PathBuf,
    conn: Mutex<Connection>,
    caches: Mutex<Caches>,
}

/// The remembered stamps of the tasks saved most recently, each with when it
/// was last used: a server that runs task after task keeps at most
/// [`CACHED_TASKS`] of them, and a task whose were let go reads its files
/// again at its next save.
#[derive(Default)]
struct Caches {
    by_task: HashMap<TaskId, (u64, Arc<Mutex<Cache>>)>,
    uses: u64,
}

/// How many tasks' remembered stamps are kept.
const CACHED_TASKS: usize = 64;

impl std::fmt::Debug for SavedWorkspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedWorkspaces")
            .field("objects", &self.inner.objects)
            .finish()
    }
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        name: String,
        mode: u32,
        size: u64,
        hash: Hash,
    },
    Dir {
        name: String,
        mode: u32,
        tree: Hash,
    },
    Link {
        name: String,
        target: String,
    },
}

/// A tree's bytes: a version mark, then each entry as its kind (`f`, `d`,
/// `l`) and its name (a length byte and UTF-8: a name is at most 255
/// bytes), then a file's mode (u16, little-endian), size (LEB128) and hash
/// (32 bytes), a directory's mode and tree, a link's target (a u16 length
/// and UTF-8). About 45 bytes a file.
const TREE_MARK: &[u8] = b"rein-tree-1\n";

fn encode_tree<'e>(entries: impl IntoIterator<Item = &'e Entry>) -> Vec<u8> {
    fn name(out: &mut Vec<u8>, s: &str) {
        let bytes = &s.as_bytes()[..s.len().min(255)];
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
    }
    fn mode(out: &mut Vec<u8>, m: u32) {
        out.extend_from_slice(&((m & 0o7777) as u16).to_le_bytes());
    }
    let entries = entries.into_iter();
    let mut out = Vec::with_capacity(TREE_MARK.len() + entries.size_hint().0 * 48);
    out.extend_from_slice(TREE_MARK);
    for entry in entries {
        match entry {
            Entry::File {
                name: n,
                mode: m,
                size,
                hash,
            } => {
                out.push(b'f');
                name(&mut out, n);
                mode(&mut out, *m);
                let mut size = *size;
                loop {
                    let byte = (size & 0x7f) as u8;
                    size >>= 7;
                    if size == 0 {
                        out.push(byte);
                        break;
                    }
                    out.push(byte | 0x80);
                }
                out.extend_from_slice(hash);
            }
            Entry::Dir {
                name: n,
                mode: m,
                tree,
            } => {
                out.push(b'd');
                name(&mut out, n);
                mode(&mut out, *m);
                out.extend_from_slice(tree);
            }
            Entry::Link { name: n, target } => {
                out.push(b'l');
                name(&mut out, n);
                let bytes = &target.as_bytes()[..target.len().min(usize::from(u16::MAX))];
                out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
                out.extend_from_slice(bytes);
            }
        }
    }
    out
}

fn decode_tree(bytes: &[u8]) -> Option<Vec<Entry>> {
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Option<&[u8]> {
            let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
            self.0 = rest;
            Some(head)
        }
        fn byte(&mut self) -> Option<u8> {
            Some(self.take(1)?[0])
        }
        fn name(&mut self) -> Option<String> {
            let len = self.byte()?;
            String::from_utf8(self.take(usize::from(len))?.to_vec()).ok()
        }
        fn mode(&mut self) -> Option<u32> {
            Some(u32::from(u16::from_le_bytes(
                self.take(2)?.try_into().ok()?,
            )))
        }
        fn size(&mut self) -> Option<u64> {
            let mut size = 0u64;
            for shift in (0..64).step_by(7) {
                let byte = self.byte()?;
                size |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    return Some(size);
                }
            }
            None
        }
        fn hash(&mut self) -> Option<Hash> {
            self.take(32)?.try_into().ok()
        }
    }
    let mut r = Reader(bytes.strip_prefix(TREE_MARK)?);
    let mut out = Vec::new();
    while let Some(kind) = r.byte() {
        let name = r.name()?;
        out.push(match kind {
            b'f' => Entry::File {
                name,
                mode: r.mode()?,
                size: r.size()?,
                hash: r.hash()?,
            },
            b'd' => Entry::Dir {
                name,
                mode: r.mode()?,
                tree: r.hash()?,
            },
            b'l' => {
                let len = u16::from_le_bytes(r.take(2)?.try_into().ok()?);
                Entry::Link {
                    name,
                    target: String::from_utf8(r.take(usize::from(len))?.to_vec()).ok()?,
                }
            }
            _ => return None,
        });
    }
    Some(out)
}

fn hex(hash: &Hash) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in hash {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// A kept tree's address, as events and callers name it: `sha256:<hex>`.
fn address(hash: &Hash) -> String {
    format!("sha256:{}", hex(hash))
}

fn unhex(text: &str) -> Result<Hash, String> {
    let text = text.strip_prefix("sha256:").unwrap_or(text);
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "`{text}` is not a kept tree's address (sha256:<64 hex digits>)"
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS objects (
        id   INTEGER PRIMARY KEY,
        hash BLOB NOT NULL UNIQUE,
        size INTEGER NOT NULL,
        data BLOB
    ) STRICT;
    CREATE TABLE IF NOT EXISTS points (
        task_id TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        root    BLOB NOT NULL,
        PRIMARY KEY (task_id, seq)
    ) STRICT, WITHOUT ROWID;
";

impl SavedWorkspaces {
    /// Opens (or makes) the keeper in `dir`, removing what a stopped save
    /// left half-written.
    pub fn open(dir: &Path) -> Result<SavedWorkspaces, String> {
        let objects = dir.join("objects");
        std::fs::create_dir_all(&objects)
            .map_err(|e| format!("cannot make {}: {e}", objects.display()))?;
        // Temporary copies are made at the top; a shard holds only objects.
        for entry in std::fs::read_dir(&objects)
            .map_err(|e| e.to_string())?
            .flatten()
        {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let path = dir.join("objects.db");
        let conn =
            Connection::open(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // Another process of the same data directory (a run beside `rein
        // tasks list`, two runs) may be writing: its lock is waited for.
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // Large pages: objects of about a kilobyte leave less of each page
        // unused (a new file only; an existing one keeps its size).
        let set_up = || {
            conn.pragma_update(None, "page_size", 16384)
                .and_then(|()| conn.pragma_update(None, "journal_mode", "WAL"))
                .and_then(|()| conn.pragma_update(None, "synchronous", "FULL"))
                .and_then(|()| conn.pragma_update(None, "wal_autocheckpoint", 64))
                .and_then(|()| conn.pragma_update(None, "journal_size_limit", 1 << 20))
                .and_then(|()| conn.execute_batch(SCHEMA))
        };
        // Two processes making the database at once: switching it to WAL
        // is refused at once to one of them (no waiting), so it tries again.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match set_up() {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if matches!(
                        e.code,
                        rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                    ) && std::time::Instant::now() < until =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(format!("cannot set up {}: {e}", path.display())),
            }
        }
        Ok(SavedWorkspaces {
            inner: Arc::new(Inner {
                objects,
                conn: Mutex::new(conn),
                caches: Mutex::new(Caches::default()),
            }),
        })
    }

    fn cache(&self, task: &TaskId) -> Arc<Mutex<Cache>> {
        let mut caches = self
            .inner
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        caches.uses += 1;
        let now = caches.uses;
        if !caches.by_task.contains_key(task) && caches.by_task.len() >= CACHED_TASKS {
            let oldest = caches
                .by_task
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                caches.by_task.remove(&oldest);
            }
        }
        let (used, cache) = caches.by_task.entry(task.clone()).or_default();
        *used = now;
        Arc::clone(cache)
    }

    /// The root of task `task`'s last point at or before `seq`.
    pub fn point_at(&self, task: &TaskId, seq: u64) -> Result<Option<(u64, String)>, String> {
        let conn = self.inner.lock();
        conn.query_row(
            "SELECT seq, root FROM points WHERE task_id = ?1 AND seq <= ?2 ORDER BY seq DESC LIMIT 1",
            params![task.as_str(), i64::try_from(seq).unwrap_or(i64::MAX)],
            |r| {
                let root: Vec<u8> = r.get(1)?;
                Ok((r.get::<_, i64>(0)?, root))
            },
        )
        .optional()
        .map_err(|e| e.to_string())
        .map(|found| {
            found.and_then(|(seq, root)| {
                let hash: Hash = root.try_into().ok()?;
                Some((u64::try_from(seq).unwrap_or(0), address(&hash)))
            })
        })
    }

    fn save_now(
        &self,
        task: &TaskId,
        seq: u64,
        dir: &OwnedFd,
        rules: &SnapshotRules,
    ) -> SavedWorkspace {
        let cache = self.cache(task);
        let mut cache = cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut conn = self.inner.lock();
        let excludes = match Excludes::new(&rules.exclude) {
            Ok(e) => e,
            Err(e) => return unavailable(e),
        };
        let tx = match conn.transaction() {
            Ok(tx) => tx,
            Err(e) => return unavailable(db(e)),
        };
        let settled = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX) - 1)
            .unwrap_or(0);
        // What was remembered is taken: it is put back only if this save
        // commits (on failure it may name objects rolled back).
        let memo = cache.root.take().unwrap_or_default();
        let stop = AtomicBool::new(false);
        let (sink, objects) = mpsc::sync_channel(64);
        let walk = Walk::new(
            &self.inner.objects,
            &excludes,
            rules.cap(),
            settled,
            sink,
            &stop,
        );
        let mut saved = SavedWorkspace::default();
        let mut written = Vec::new();
        let mut kept = Ok(());
        // The walk runs beside this thread, which alone holds the
        // transaction and stores each object the walk hands it. The handle
        // given may be a path handle (`O_PATH`): the walk opens the
        // directory for reading through it.
        let walked = std::thread::scope(|scope| {
            let walker = scope.spawn(move || walk::pool()?.install(|| walk.root(dir, memo)));
            for object in objects {
                if kept.is_ok() {
                    kept = self.keep(&tx, object, &mut saved, &mut written);
                    if kept.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                } else if let walk::Object::Large { temp, .. } = object {
                    let _ = std::fs::remove_file(temp);
                }
            }
            walker
                .join()
                .unwrap_or_else(|_| Err("the save stopped: its walk failed".into()))
        });
        let committed = kept.and(walked).and_then(|(root, memo, totals)| {
            tx.execute(
                "INSERT OR REPLACE INTO points (task_id, seq, root) VALUES (?1, ?2, ?3)",
                params![
                    task.as_str(),
                    i64::try_from(seq).unwrap_or(i64::MAX),
                    root.as_slice()
                ],
            )
            .map_err(db)?;
            tx.commit().map_err(db)?;
            Ok((root, memo, totals))
        });
        match committed {
            Ok((root, memo, totals)) => {
                cache.root = Some(memo);
                saved.root = Some(address(&root));
                saved.files = totals.files;
                saved.bytes = totals.bytes;
                saved.left_out = totals.left_out;
                saved.excluded = totals.matched.into_iter().collect();
                saved
            }
            Err(why) => {
                // Large objects this save wrote are not referenced by any
                // committed row: gone with the transaction.
                for file in written.drain(..) {
                    let _ = std::fs::remove_file(file);
                }
                unavailable(why)
            }
        }
    }

    /// Stores one object the walk found, unless the keeper has it: a large
    /// file's temporary copy is named by its hash, or dropped.
    fn keep(
        &self,
        tx: &rusqlite::Transaction<'_>,
        object: walk::Object,
        saved: &mut SavedWorkspace,
        written: &mut Vec<PathBuf>,
    ) -> Result<(), String> {
        let (hash, size, data) = match object {
            walk::Object::Inline { hash, data } => (hash, data.len() as u64, Some(data)),
            walk::Object::Large {
                hash,
                size,
                temp,
                rel,
            } => {
                let known = tx
                    .query_row(
                        "SELECT 1 FROM objects WHERE hash = ?1",
                        [hash.as_slice()],
                        |_| Ok(()),
                    )
                    .optional()
                    .map_err(db)?
                    .is_some();
                if known {
                    let _ = std::fs::remove_file(&temp);
                    return Ok(());
                }
                let name = hex(&hash);
                let shard = self.inner.objects.join(&name[..2]);
                let placed = std::fs::create_dir_all(&shard)
                    .and_then(|()| std::fs::rename(&temp, shard.join(&name[2..])))
                    .and_then(|()| std::fs::File::open(&shard)?.sync_all());
                if let Err(e) = placed {
                    let _ = std::fs::remove_file(&temp);
                    return Err(format!(
                        "cannot keep {} of the workspace: {e}",
                        rel.display()
                    ));
                }
                written.push(shard.join(&name[2..]));
                (hash, size, None)
            }
        };
        let added = tx
            .prepare_cached("INSERT OR IGNORE INTO objects (hash, size, data) VALUES (?1, ?2, ?3)")
            .and_then(|mut s| {
                s.execute(params![
                    hash.as_slice(),
                    i64::try_from(size).unwrap_or(i64::MAX),
                    data
                ])
            })
            .map_err(db)?;
        if added > 0 {
            saved.new_bytes += size;
        }
        Ok(())
    }

    fn restore_now(
        &self,
        root: &str,
        into: &Path,
        task: Option<&TaskId>,
    ) -> Result<Restored, String> {
        let root = unhex(root)?;
        match std::fs::read_dir(into) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(format!(
                        "{} is not empty: a kept workspace is written only into a new or empty directory",
                        into.display()
                    ));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(into)
                    .map_err(|e| format!("cannot make {}: {e}", into.display()))?;
            }
            Err(e) => return Err(format!("cannot read {}: {e}", into.display())),
        }
        let conn = self.inner.lock();
        let mut done = Restored::default();
        let mut memo = task.map(|_| DirMemo::default());
        self.write_tree(&conn, &root, into, &mut done, memo.as_mut())?;
        drop(conn);
        // What was written is remembered for the task's first save, as a
        // save remembers what it read (its times back-dated past the last
        // second, so a later change always moves them).
        if let (Some(task), Some(memo)) = (task, memo) {
            let cache = self.cache(task);
            cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .root = Some(memo);
        }
        Ok(done)
    }

    fn write_tree(
        &self,
        conn: &Connection,
        tree: &Hash,
        into: &Path,
        done: &mut Restored,
        mut memo: Option<&mut DirMemo>,
    ) -> Result<(), String> {
        for entry in read_tree(conn, tree)? {
            let name = match &entry {
                Entry::File { name, .. } | Entry::Dir { name, .. } | Entry::Link { name, .. } => {
                    name
                }
            };
            let path = into.join(name);
            let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
            match &entry {
                Entry::Dir { mode, tree, .. } => {
                    std::fs::create_dir(&path).map_err(failed)?;
                    let mut sub = memo.as_ref().map(|_| DirMemo::default());
                    self.write_tree(conn, tree, &path, done, sub.as_mut())?;
                    if let Some(memo) = memo.as_deref_mut() {
                        memo.children.push(walk::Child {
                            name: name.as_bytes().to_vec(),
                            entry: Some(entry.clone()),
                            file: None,
                            dir: sub.map(Box::new),
                        });
                    }
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                        .map_err(failed)?;
                }
                Entry::Link { target, .. } => {
                    std::os::unix::fs::symlink(target, &path).map_err(failed)?;
                    if let Some(memo) = memo.as_deref_mut() {
                        memo.children.push(walk::Child {
                            name: name.as_bytes().to_vec(),
                            entry: Some(entry.clone()),
                            ..walk::Child::default()
                        });
                    }
                }
                Entry::File {
                    mode, size, hash, ..
                } => {
                    let data: Option<Option<Vec<u8>>> = conn
                        .query_row(
                            "SELECT data FROM objects WHERE hash = ?1",
                            [hash.as_slice()],
                            |r| r.get(0),
                        )
                        .optional()
                        .map_err(|e| e.to_string())?;
                    match data {
                        Some(Some(bytes)) => std::fs::write(&path, &bytes).map_err(failed)?,
                        Some(None) => {
                            std::fs::copy(self.large(hash), &path).map_err(failed)?;
                        }
                        None => {
                            return Err(format!(
                                "the kept copy of {} is missing from the keeper",
                                path.display()
                            ));
                        }
                    }
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                        .map_err(failed)?;
                    if let Some(memo) = memo.as_deref_mut() {
                        let back = SystemTime::now() - std::time::Duration::from_secs(2);
                        let file = std::fs::File::options()
                            .write(true)
                            .open(&path)
                            .or_else(|_| std::fs::File::open(&path))
                            .map_err(failed)?;
                        // Read-only files keep their own time; they are
                        // read again at the first save.
                        let remembered = if file.set_modified(back).is_ok() {
                            let st = fstat(file.as_fd()).map_err(|e| failed(e.into()))?;
                            Some(Stamp::of(&st))
                        } else {
                            None
                        };
                        memo.children.push(walk::Child {
                            name: name.as_bytes().to_vec(),
                            entry: Some(entry.clone()),
                            file: remembered,
                            dir: None,
                        });
                    }
                    done.files += 1;
                    done.bytes += size;
                }
            }
        }
        Ok(())
    }

    fn large(&self, hash: &Hash) -> PathBuf {
        let name = hex(hash);
        self.inner.objects.join(&name[..2]).join(&name[2..])
    }

    fn release_now(&self, task: &TaskId) -> Result<u64, String> {
        self.inner
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .by_task
            .remove(task);
        let mut conn = self.inner.lock();
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        tx.execute("DELETE FROM points WHERE task_id = ?1", [task.as_str()])
            .map_err(|e| e.to_string())?;
        // Everything a remaining point reaches.
        let roots: Vec<Vec<u8>> = tx
            .prepare("SELECT DISTINCT root FROM points")
            .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect())
            .map_err(|e| e.to_string())?;
        let mut live: HashSet<Hash> = HashSet::new();
        let mut trees: Vec<Hash> = roots
            .into_iter()
            .filter_map(|r| r.try_into().ok())
            .collect();
        while let Some(tree) = trees.pop() {
            if !live.insert(tree) {
                continue;
            }
            for entry in read_tree(&tx, &tree)? {
                match entry {
                    Entry::Dir { tree, .. } => trees.push(tree),
                    Entry::File { hash, .. } => {
                        live.insert(hash);
                    }
                    Entry::Link { .. } => {}
                }
            }
        }
        let all: Vec<(Vec<u8>, i64, bool)> = tx
            .prepare("SELECT hash, size, data IS NULL FROM objects")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                    .collect()
            })
            .map_err(|e| e.to_string())?;
        let mut freed = 0;
        let mut files = Vec::new();
        for (hash, size, large) in all {
            let Ok(hash): Result<Hash, _> = hash.try_into() else {
                continue;
            };
            if live.contains(&hash) {
                continue;
            }
            tx.execute("DELETE FROM objects WHERE hash = ?1", [hash.as_slice()])
                .map_err(|e| e.to_string())?;
            freed += u64::try_from(size).unwrap_or(0);
            if large {
                files.push(self.large(&hash));
            }
        }
        tx.commit().map_err(|e| e.to_string())?;
        // Only once no row names them.
        for file in files {
            let _ = std::fs::remove_file(file);
        }
        Ok(freed)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn unavailable(why: String) -> SavedWorkspace {
    SavedWorkspace {
        unavailable: Some(why),
        ..SavedWorkspace::default()
    }
}

fn read_tree(conn: &Connection, tree: &Hash) -> Result<Vec<Entry>, String> {
    let data: Option<Vec<u8>> = conn
        .query_row(
            "SELECT data FROM objects WHERE hash = ?1",
            [tree.as_slice()],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| e.to_string())?
        .flatten();
    let data =
        data.ok_or_else(|| format!("tree sha256:{} is missing from the keeper", hex(tree)))?;
    decode_tree(&data).ok_or_else(|| format!("tree sha256:{} is damaged", hex(tree)))
}

fn db(e: rusqlite::Error) -> String {
    format!("the keeper's database: {e}")
}

#[async_trait]
impl WorkspaceHistory for SavedWorkspaces {
    async fn save(
        &self,
        task: &TaskId,
        seq: u64,
        workspace: OwnedFd,
        rules: &SnapshotRules,
    ) -> SavedWorkspace {
        let (me, task, rules) = (self.clone(), task.clone(), rules.clone());
        tokio::task::spawn_blocking(move || me.save_now(&task, seq, &workspace, &rules))
            .await
            .unwrap_or_else(|e| unavailable(format!("the save stopped: {e}")))
    }

    async fn restore(&self, root: &str, into: &Path) -> Result<Restored, String> {
        let (me, root, into) = (self.clone(), root.to_owned(), into.to_owned());
        tokio::task::spawn_blocking(move || me.restore_now(&root, &into, None))
            .await
            .map_err(|e| format!("the restore stopped: {e}"))?
    }

    async fn restore_for(
        &self,
        task: &TaskId,
        root: &str,
        into: &Path,
    ) -> Result<Restored, String> {
        let (me, task, root, into) = (self.clone(), task.clone(), root.to_owned(), into.to_owned());
        tokio::task::spawn_blocking(move || me.restore_now(&root, &into, Some(&task)))
            .await
            .map_err(|e| format!("the restore stopped: {e}"))?
    }

    async fn release(&self, task: &TaskId) -> Result<u64, String> {
        let (me, task) = (self.clone(), task.clone());
        tokio::task::spawn_blocking(move || me.release_now(&task))
            .await
            .map_err(|e| format!("the release stopped: {e}"))?
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_long_run_of_tasks_keeps_the_stamps_of_the_most_recent_few() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("f"), b"kept").unwrap();
        let keeper = SavedWorkspaces::open(&dir.path().join("saved")).unwrap();
        let tasks: Vec<TaskId> = (0..CACHED_TASKS + 6).map(|_| TaskId::new()).collect();
        let mut roots = BTreeSet::new();
        for task in &tasks {
            let fd: OwnedFd = std::fs::File::open(&ws).unwrap().into();
            let saved = keeper.save_now(task, 1, &fd, &SnapshotRules::default());
            roots.insert(saved.root.unwrap());
        }
        let caches = keeper.inner.caches.lock().unwrap();
        assert_eq!(caches.by_task.len(), CACHED_TASKS);
        // The oldest went first; the newest are there.
        assert!(!caches.by_task.contains_key(&tasks[0]));
        assert!(caches.by_task.contains_key(tasks.last().unwrap()));
        // Every task kept the same workspace, however its stamps fared.
        assert_eq!(roots.len(), 1);
    }
}
