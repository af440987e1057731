//! Workspaces as they were, kept content-addressed under the data directory
//! (`saved/`): [`SavedWorkspaces`] implements rein-core's
//! [`WorkspaceHistory`].
//!
//! - An object is a file's bytes or a directory's listing (a tree), named by
//!   its SHA-256. Objects up to 64 KiB live in `saved/objects.db` (SQLite:
//!   small files packed into pages, not a disk block each); larger files
//!   under `saved/objects/`, written whole to a temporary name and renamed.
//! - A tree lists its entries by name: a file's mode, size and object, a
//!   directory's tree, a link's target. A directory that did not change has
//!   the same tree, so a point stores only the trees on the paths that did.
//! - A point is (task, log position, root tree). Saving one is one
//!   transaction: a kill leaves either the whole point or none of it, and
//!   at worst a temporary file, removed at the next open.
//! - What a file's bytes hash to is remembered per task with the file's
//!   size, times and inode, so an unchanged file is not read again. A file
//!   changed in the last second is always read: its time may not have moved
//!   since it was remembered (the file system's clock ticks coarsely).
//! - Releasing a task's points deletes what no other point reaches.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use rein_core::saved::{Restored, WorkspaceHistory};
use rein_protocol::{SavedWorkspace, SnapshotRules, TaskId};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

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
    fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
        }
    }
}

/// A task's remembered hashes, by path in its workspace.
type Cache = HashMap<PathBuf, (Stamp, Hash)>;

/// The keeper of workspaces as they were.
#[derive(Clone)]
pub struct SavedWorkspaces {
    inner: Arc<Inner>,
}

struct Inner {
    objects: PathBuf,
    conn: Mutex<Connection>,
    caches: Mutex<HashMap<TaskId, Arc<Mutex<Cache>>>>,
}

impl std::fmt::Debug for SavedWorkspaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedWorkspaces")
            .field("objects", &self.inner.objects)
            .finish()
    }
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// Name.
    n: String,
    /// `f` file, `d` directory, `l` symbolic link.
    k: char,
    /// Permission bits (files and directories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    m: Option<u32>,
    /// A file's size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<u64>,
    /// A file's object or a directory's tree, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    h: Option<String>,
    /// A link's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<String>,
}

fn hex(hash: &Hash) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
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
        hash BLOB PRIMARY KEY,
        size INTEGER NOT NULL,
        data BLOB
    ) STRICT, WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS points (
        task_id TEXT NOT NULL,
        seq     INTEGER NOT NULL,
        root    BLOB NOT NULL,
        PRIMARY KEY (task_id, seq)
    ) STRICT;
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
        conn.pragma_update(None, "journal_mode", "WAL")
            .and_then(|()| conn.pragma_update(None, "synchronous", "FULL"))
            .and_then(|()| conn.pragma_update(None, "wal_autocheckpoint", 256))
            .and_then(|()| conn.pragma_update(None, "journal_size_limit", 1 << 20))
            .and_then(|()| conn.execute_batch(SCHEMA))
            .map_err(|e| format!("cannot set up {}: {e}", path.display()))?;
        Ok(SavedWorkspaces {
            inner: Arc::new(Inner {
                objects,
                conn: Mutex::new(conn),
                caches: Mutex::new(HashMap::new()),
            }),
        })
    }

    fn cache(&self, task: &TaskId) -> Arc<Mutex<Cache>> {
        let mut caches = self
            .inner
            .caches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(caches.entry(task.clone()).or_default())
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
                Some((u64::try_from(seq).unwrap_or(0), format!("sha256:{}", hex(&hash))))
            })
        })
    }

    /// The bytes the keeper holds: its database and its large objects.
    pub fn size_on_disk(&self) -> u64 {
        fn walk(dir: &Path) -> u64 {
            std::fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| match e.metadata() {
                            Ok(m) if m.is_dir() => walk(&e.path()),
                            Ok(m) => m.blocks() * 512,
                            Err(_) => 0,
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        self.inner.objects.parent().map(walk).unwrap_or(0)
    }

    fn save_now(
        &self,
        task: &TaskId,
        seq: u64,
        dir: &Path,
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
            Err(e) => return unavailable(format!("the keeper's database: {e}")),
        };
        let settled = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX) - 1)
            .unwrap_or(0);
        let mut walk = Walk {
            tx: &tx,
            objects: &self.inner.objects,
            excludes: &excludes,
            cap: rules.cap(),
            old: &cache,
            new: Cache::new(),
            settled,
            saved: SavedWorkspace::default(),
            matched: BTreeSet::new(),
            written: Vec::new(),
        };
        let root = walk.tree(dir, Path::new(""));
        let mut written = std::mem::take(&mut walk.written);
        let (new_cache, mut saved, matched) = (walk.new, walk.saved, walk.matched);
        let committed = root.and_then(|root| {
            tx.execute(
                "INSERT OR REPLACE INTO points (task_id, seq, root) VALUES (?1, ?2, ?3)",
                params![
                    task.as_str(),
                    i64::try_from(seq).unwrap_or(i64::MAX),
                    root.as_slice()
                ],
            )
            .map_err(|e| format!("the keeper's database: {e}"))?;
            tx.commit()
                .map_err(|e| format!("the keeper's database: {e}"))?;
            Ok(root)
        });
        match committed {
            Ok(root) => {
                *cache = new_cache;
                saved.root = Some(format!("sha256:{}", hex(&root)));
                saved.excluded = matched.into_iter().collect();
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

    fn restore_now(&self, root: &str, into: &Path) -> Result<Restored, String> {
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
        self.write_tree(&conn, &root, into, &mut done)?;
        Ok(done)
    }

    fn write_tree(
        &self,
        conn: &Connection,
        tree: &Hash,
        into: &Path,
        done: &mut Restored,
    ) -> Result<(), String> {
        for entry in read_tree(conn, tree)? {
            let path = into.join(&entry.n);
            let failed = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
            match entry.k {
                'd' => {
                    std::fs::create_dir(&path).map_err(failed)?;
                    let sub = unhex(entry.h.as_deref().unwrap_or_default())?;
                    self.write_tree(conn, &sub, &path, done)?;
                    if let Some(mode) = entry.m {
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                            .map_err(failed)?;
                    }
                }
                'l' => {
                    std::os::unix::fs::symlink(entry.t.as_deref().unwrap_or_default(), &path)
                        .map_err(failed)?;
                }
                _ => {
                    let hash = unhex(entry.h.as_deref().unwrap_or_default())?;
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
                            std::fs::copy(self.large(&hash), &path).map_err(failed)?;
                        }
                        None => {
                            return Err(format!(
                                "the kept copy of {} is missing from the keeper",
                                path.display()
                            ));
                        }
                    }
                    if let Some(mode) = entry.m {
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                            .map_err(failed)?;
                    }
                    done.files += 1;
                    done.bytes += entry.s.unwrap_or(0);
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
                if let Some(h) = entry.h.as_deref() {
                    let hash = unhex(h)?;
                    if entry.k == 'd' {
                        trees.push(hash);
                    } else {
                        live.insert(hash);
                    }
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
    serde_json::from_slice(&data).map_err(|e| format!("tree sha256:{}: {e}", hex(tree)))
}

/// `.gitignore`-like patterns.
struct Excludes {
    patterns: Vec<(String, globset::GlobMatcher, bool)>,
}

impl Excludes {
    fn new(patterns: &[String]) -> Result<Excludes, String> {
        let mut out = Vec::new();
        for pattern in patterns {
            let dir_only = pattern.ends_with('/');
            let body = pattern.trim_end_matches('/');
            let glob = if let Some(anchored) = body.strip_prefix('/') {
                anchored.to_owned()
            } else if body.contains('/') {
                body.to_owned()
            } else {
                format!("**/{body}")
            };
            let matcher = globset::GlobBuilder::new(&glob)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("snapshot.exclude `{pattern}`: {e}"))?
                .compile_matcher();
            out.push((pattern.clone(), matcher, dir_only));
        }
        Ok(Excludes { patterns: out })
    }

    /// The pattern that leaves `rel` out, if one does.
    fn matching(&self, rel: &Path, is_dir: bool) -> Option<&str> {
        self.patterns
            .iter()
            .find(|(_, m, dir_only)| (is_dir || !dir_only) && m.is_match(rel))
            .map(|(p, _, _)| p.as_str())
    }
}

/// One save under way.
struct Walk<'a> {
    tx: &'a rusqlite::Transaction<'a>,
    objects: &'a Path,
    excludes: &'a Excludes,
    cap: u64,
    old: &'a Cache,
    new: Cache,
    /// Seconds since the epoch before which a file's times are trusted.
    settled: i64,
    saved: SavedWorkspace,
    matched: BTreeSet<String>,
    written: Vec<PathBuf>,
}

fn db(e: rusqlite::Error) -> String {
    format!("the keeper's database: {e}")
}

impl Walk<'_> {
    /// Keeps directory `abs` (at `rel` in the workspace): its tree's hash.
    fn tree(&mut self, abs: &Path, rel: &Path) -> Result<Hash, String> {
        let read = |e: std::io::Error| format!("cannot read {}: {e}", abs.display());
        let mut names: Vec<(std::ffi::OsString, std::fs::Metadata)> = Vec::new();
        for entry in std::fs::read_dir(abs).map_err(read)? {
            let entry = entry.map_err(read)?;
            let meta = entry.metadata().map_err(read)?;
            names.push((entry.file_name(), meta));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let mut entries = Vec::with_capacity(names.len());
        for (name, meta) in names {
            let (path, sub) = (abs.join(&name), rel.join(&name));
            let Some(n) = name.to_str().map(str::to_owned) else {
                self.saved.left_out += 1;
                self.matched.insert("(names that are not UTF-8)".into());
                continue;
            };
            if let Some(pattern) = self.excludes.matching(&sub, meta.is_dir()) {
                self.saved.left_out += 1;
                self.matched.insert(pattern.to_owned());
                continue;
            }
            let mode = Some(meta.permissions().mode() & 0o7777);
            let kind = meta.file_type();
            if kind.is_symlink() {
                let target = std::fs::read_link(&path).map_err(read)?;
                entries.push(Entry {
                    n,
                    k: 'l',
                    m: None,
                    s: None,
                    h: None,
                    t: Some(target.to_string_lossy().into_owned()),
                });
            } else if kind.is_dir() {
                let hash = self.tree(&path, &sub)?;
                entries.push(Entry {
                    n,
                    k: 'd',
                    m: mode,
                    s: None,
                    h: Some(hex(&hash)),
                    t: None,
                });
            } else if kind.is_file() {
                let hash = self.file(&path, &sub, &meta)?;
                entries.push(Entry {
                    n,
                    k: 'f',
                    m: mode,
                    s: Some(meta.len()),
                    h: Some(hex(&hash)),
                    t: None,
                });
            } else {
                self.saved.left_out += 1;
                self.matched.insert("(sockets, pipes and devices)".into());
            }
        }
        let body = serde_json::to_vec(&entries).map_err(|e| e.to_string())?;
        let hash: Hash = Sha256::digest(&body).into();
        self.put(&hash, body.len() as u64, Some(&body))?;
        Ok(hash)
    }

    /// Keeps one file: its object's hash.
    fn file(&mut self, path: &Path, rel: &Path, meta: &std::fs::Metadata) -> Result<Hash, String> {
        let failed = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
        self.saved.files += 1;
        self.saved.bytes += meta.len();
        if self.saved.bytes > self.cap {
            return Err(format!(
                "the workspace holds more than snapshot.max_bytes ({} bytes); raise it or exclude what need not be kept",
                self.cap
            ));
        }
        let stamp = Stamp::of(meta);
        if let Some((was, hash)) = self.old.get(rel)
            && *was == stamp
        {
            self.remember(rel, stamp, *hash);
            return Ok(*hash);
        }
        let hash = if meta.len() <= INLINE_MAX {
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            std::fs::File::open(path)
                .and_then(|mut f| f.read_to_end(&mut bytes))
                .map_err(failed)?;
            let hash: Hash = Sha256::digest(&bytes).into();
            self.put(&hash, bytes.len() as u64, Some(&bytes))?;
            hash
        } else {
            self.large(path, meta)?
        };
        self.remember(rel, stamp, hash);
        Ok(hash)
    }

    /// A large file copied to a temporary object while it is hashed, then
    /// renamed to its name (or dropped, if the keeper has it already).
    fn large(&mut self, path: &Path, meta: &std::fs::Metadata) -> Result<Hash, String> {
        let failed = |e: std::io::Error| format!("cannot keep {}: {e}", path.display());
        let temp = self
            .objects
            .join(format!("{}-{}.tmp", std::process::id(), meta.ino()));
        let mut from = std::fs::File::open(path).map_err(failed)?;
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
        let known: bool = self
            .tx
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
            return Ok(hash);
        }
        let name = hex(&hash);
        let shard = self.objects.join(&name[..2]);
        let placed = std::fs::create_dir_all(&shard)
            .and_then(|()| std::fs::rename(&temp, shard.join(&name[2..])))
            .and_then(|()| std::fs::File::open(&shard)?.sync_all());
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&temp);
            return Err(failed(e));
        }
        self.written.push(shard.join(&name[2..]));
        self.put(&hash, size, None)?;
        Ok(hash)
    }

    /// Remembers a file's hash for the next save, unless its times are too
    /// recent to tell a later change by.
    fn remember(&mut self, rel: &Path, stamp: Stamp, hash: Hash) {
        if stamp.mtime.0 < self.settled && stamp.ctime.0 < self.settled {
            self.new.insert(rel.to_owned(), (stamp, hash));
        }
    }

    /// Stores an object unless the keeper has it; `data` none for a large
    /// file already in place.
    fn put(&mut self, hash: &Hash, size: u64, data: Option<&[u8]>) -> Result<(), String> {
        let added = self
            .tx
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
            self.saved.new_bytes += size;
        }
        Ok(())
    }
}

#[async_trait]
impl WorkspaceHistory for SavedWorkspaces {
    async fn save(
        &self,
        task: &TaskId,
        seq: u64,
        dir: &Path,
        rules: &SnapshotRules,
    ) -> SavedWorkspace {
        let (me, task, dir, rules) = (self.clone(), task.clone(), dir.to_owned(), rules.clone());
        tokio::task::spawn_blocking(move || me.save_now(&task, seq, &dir, &rules))
            .await
            .unwrap_or_else(|e| unavailable(format!("the save stopped: {e}")))
    }

    async fn restore(&self, root: &str, into: &Path) -> Result<Restored, String> {
        let (me, root, into) = (self.clone(), root.to_owned(), into.to_owned());
        tokio::task::spawn_blocking(move || me.restore_now(&root, &into))
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
