//! The store's head, recorded beside it: after every commit, the writer
//! writes the store's commit count and the ledger's head to `rein.db-head`.
//! SQLite keeps recent commits in the write-ahead log (`rein.db-wal`) until
//! it copies them into the main file; deleting that log while rein is
//! stopped (or putting an older copy of the store in place) takes them away,
//! and SQLite opens what is left as if nothing happened. The count recorded
//! beside the store is then past the count inside it, and opening says so.
//!
//! The file is written after the commit is durable, without a sync of its
//! own: it may lag the store after a power loss (and say nothing), never lead
//! it. A torn or foreign file is ignored, not trusted.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rein_protocol::LedgerHead;
use rusqlite::Connection;

/// What the writer records after a commit, and what the store holds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Head {
    /// Transactions committed through rein's writers.
    pub commits: u64,
    /// The ledger's newest entry.
    pub ledger: Option<LedgerHead>,
}

const MAGIC: &str = "rein-store-head 1";
/// No ledger entry yet, in the hash's place.
const NO_HASH: &str = "----------------------------------------------------------------";

/// Where the store stood as a transaction began: the count its commit
/// follows, and the newest event then (an event newer than it at the commit
/// is the transaction's own).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before {
    commits: u64,
    newest_event: Option<i64>,
}

impl Head {
    /// The store's head as its own tables hold it: the commit count is the
    /// larger of `store_head.commits` and the newest event's `commit_no`
    /// (schema migration 11 says why).
    pub fn read(conn: &Connection) -> rusqlite::Result<Head> {
        let before = Head::before(conn)?;
        let mut head = conn.query_row(
            "SELECT commits, ledger_seq, ledger_hash FROM store_head WHERE id = 0",
            [],
            Head::from_row,
        )?;
        head.commits = before.commits;
        Ok(head)
    }

    /// Where the store stands, inside the transaction about to run.
    pub fn before(conn: &Connection) -> rusqlite::Result<Before> {
        conn.prepare_cached(
            "SELECT max(h.commits, COALESCE(e.commit_no, 0)), e.gseq
             FROM store_head h
             LEFT JOIN (SELECT gseq, commit_no FROM events ORDER BY gseq DESC LIMIT 1) e
             WHERE h.id = 0",
        )?
        .query_row([], |r| {
            let commits: i64 = r.get(0)?;
            Ok(Before {
                commits: u64::try_from(commits).unwrap_or(0),
                newest_event: r.get(1)?,
            })
        })
    }

    /// Counts one more commit, inside the transaction about to commit, and
    /// answers the head it makes. A transaction that appended events counts
    /// itself on the newest, whose page it writes anyway; any other (one
    /// that appended none, or deleted the newest before appending) in
    /// `store_head`.
    pub fn count_commit(conn: &Connection, before: Before) -> rusqlite::Result<(Head, Before)> {
        let commits = i64::try_from(before.commits.saturating_add(1)).unwrap_or(i64::MAX);
        let (newest, mut head): (Option<i64>, Head) = conn
            .prepare_cached(
                "SELECT (SELECT max(gseq) FROM events), ?1, ledger_seq, ledger_hash
                 FROM store_head WHERE id = 0",
            )?
            .query_row([commits], |r| {
                Ok((
                    r.get(0)?,
                    Head::from_columns(r.get(1)?, r.get(2)?, r.get(3)?),
                ))
            })?;
        let appended = match (newest, before.newest_event) {
            (Some(now), Some(then)) => now > then,
            (Some(_), None) => true,
            (None, _) => false,
        };
        match (appended, newest) {
            (true, Some(gseq)) => {
                conn.prepare_cached("UPDATE events SET commit_no = ?1 WHERE gseq = ?2")?
                    .execute([commits, gseq])?;
            }
            _ => {
                conn.prepare_cached("UPDATE store_head SET commits = ?1 WHERE id = 0")?
                    .execute([commits])?;
            }
        }
        head.commits = before.commits.saturating_add(1);
        let after = Before {
            commits: head.commits,
            newest_event: newest,
        };
        Ok((head, after))
    }

    fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Head> {
        Ok(Head::from_columns(r.get(0)?, r.get(1)?, r.get(2)?))
    }

    fn from_columns(commits: i64, seq: Option<i64>, hash: Option<String>) -> Head {
        Head {
            commits: u64::try_from(commits).unwrap_or(0),
            ledger: seq.zip(hash).map(|(seq, hash)| LedgerHead {
                seq: u64::try_from(seq).unwrap_or(0),
                hash,
            }),
        }
    }

    /// The fixed-width line the file holds.
    fn encode(&self) -> String {
        let (seq, hash) = match &self.ledger {
            Some(h) if h.hash.len() == 64 => (h.seq, h.hash.as_str()),
            _ => (0, NO_HASH),
        };
        let body = format!(
            "{MAGIC} commits={:020} ledger={seq:020}:{hash}",
            self.commits
        );
        format!("{body} sum={:016x}\n", checksum(body.as_bytes()))
    }

    fn decode(text: &str) -> Option<Head> {
        let line = text.strip_suffix('\n')?;
        let (body, sum) = line.rsplit_once(" sum=")?;
        if u64::from_str_radix(sum, 16).ok()? != checksum(body.as_bytes()) {
            return None;
        }
        let rest = body.strip_prefix(MAGIC)?.strip_prefix(" commits=")?;
        let (commits, ledger) = rest.split_once(" ledger=")?;
        let (seq, hash) = ledger.split_once(':')?;
        let commits = commits.parse().ok()?;
        let seq: u64 = seq.parse().ok()?;
        Some(Head {
            commits,
            ledger: (hash != NO_HASH).then(|| LedgerHead {
                seq,
                hash: hash.to_owned(),
            }),
        })
    }
}

/// FNV-1a: enough to tell a torn write from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The file beside the store the head is recorded in.
#[derive(Debug)]
pub(crate) struct HeadFile {
    file: std::fs::File,
    /// Where the store stood after this process's last commit, and the
    /// connection's `data_version` then: while no other connection has
    /// committed since (the version is unchanged), the next transaction
    /// starts from there without reading it.
    after_last: std::sync::Mutex<Option<(i64, Before)>>,
}

/// Where the head of the store at `store` is recorded.
pub(crate) fn path_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push("-head");
    PathBuf::from(name)
}

impl HeadFile {
    /// Opens (or makes) the head file of the store at `store`.
    pub fn open(store: &Path) -> std::io::Result<HeadFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path_of(store))?;
        Ok(HeadFile {
            file,
            after_last: std::sync::Mutex::new(None),
        })
    }

    /// The head recorded, if the file holds a whole one.
    pub fn recorded(&self) -> Option<Head> {
        let mut buf = vec![0u8; 256];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        Head::decode(std::str::from_utf8(&buf[..n]).ok()?)
    }

    /// Where the store stands as a transaction of `conn` begins (see
    /// `after_last`), with the connection's `data_version`.
    pub fn before(&self, conn: &Connection) -> rusqlite::Result<(i64, Before)> {
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")?
            .query_row([], |r| r.get(0))?;
        let known = self
            .after_last
            .lock()
            .ok()
            .and_then(|last| *last)
            .filter(|(at, _)| *at == version);
        match known {
            Some((_, before)) => Ok((version, before)),
            None => Ok((version, Head::before(conn)?)),
        }
    }

    /// Remembers where a commit of `conn` left the store (`None`: a
    /// transaction that did not commit, after which the store is read again).
    pub fn committed(&self, at: Option<(i64, Before)>) {
        if let Ok(mut last) = self.after_last.lock() {
            *last = at;
        }
    }

    /// Records `head`. A failure is not the commit's: the store is whole,
    /// only the record beside it lags, and a later commit writes it again.
    pub fn record(&self, head: &Head) {
        if let Err(e) = self.file.write_all_at(head.encode().as_bytes(), 0) {
            tracing::warn!(error = %e, "cannot record the store's head beside it");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_head_reads_back_as_written_and_a_torn_one_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("rein.db");
        let file = HeadFile::open(&store).unwrap();
        assert_eq!(file.recorded(), None, "a new file holds none");
        let head = Head {
            commits: 42,
            ledger: Some(LedgerHead {
                seq: 7,
                hash: "ab".repeat(32),
            }),
        };
        file.record(&head);
        assert_eq!(file.recorded(), Some(head.clone()));
        let none = Head {
            commits: 43,
            ledger: None,
        };
        file.record(&none);
        assert_eq!(
            file.recorded(),
            Some(none),
            "fixed width: overwritten whole"
        );
        // A torn write: the digits changed, the sum not.
        let text = std::fs::read_to_string(path_of(&store)).unwrap();
        std::fs::write(path_of(&store), text.replace("43", "99")).unwrap();
        assert_eq!(file.recorded(), None);
        std::fs::write(path_of(&store), "something else\n").unwrap();
        assert_eq!(file.recorded(), None);
    }
}
