//! SQLite-specific behaviour: pragmas, schema versions.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use rein_store::SqliteStore;
use rein_store::schema::CURRENT_VERSION;

#[test]
fn the_file_uses_wal_full_sync_and_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("rein.db");
    let _store = SqliteStore::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, CURRENT_VERSION);
}

#[test]
fn a_file_from_a_newer_rein_is_refused_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!("PRAGMA user_version = {}", CURRENT_VERSION + 1))
        .unwrap();
    drop(conn);
    let err = SqliteStore::open(&path).unwrap_err().to_string();
    assert!(
        err.contains("newer than this rein supports") && err.contains("upgrade rein"),
        "{err}"
    );
}

#[test]
fn opening_twice_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let first = SqliteStore::open(&path).unwrap();
    assert_eq!(
        first.migrated().applied(),
        CURRENT_VERSION,
        "a new store runs every migration"
    );
    drop(first);
    let second = SqliteStore::open(&path).unwrap();
    assert_eq!(
        second.migrated().applied(),
        0,
        "an opened store runs none again"
    );
    assert_eq!(second.migrated().to, CURRENT_VERSION);
}

/// What opening a store at `path` says (it must refuse).
fn refusal(path: &std::path::Path) -> String {
    SqliteStore::open(path).unwrap_err().to_string()
}

#[test]
fn only_a_missing_file_becomes_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Truncated to nothing: refused, not started afresh.
    std::fs::write(&path, b"").unwrap();
    let said = refusal(&path);
    assert!(
        said.contains("is empty (0 bytes)") && said.contains("backup"),
        "{said}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "left as it was");
    // Not SQLite at all.
    std::fs::write(&path, b"hello, this is a text file").unwrap();
    let said = refusal(&path);
    assert!(said.contains("not an SQLite database"), "{said}");
    // SQLite, but someone else's.
    std::fs::remove_file(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE TABLE photos (id INTEGER); INSERT INTO photos VALUES (1);")
        .unwrap();
    drop(conn);
    let said = refusal(&path);
    assert!(
        said.contains("not a rein store") && said.contains("photos"),
        "{said}"
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "nothing was added to it");
    // Two processes making the same new store: one store, both open it.
    let fresh = dir.path().join("fresh.db");
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let fresh = fresh.clone();
            std::thread::spawn(move || SqliteStore::open(&fresh).map(|s| s.migrated()))
        })
        .collect();
    let migrated: Vec<_> = opened
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    assert!(
        migrated.iter().all(|m| m.to == CURRENT_VERSION),
        "{migrated:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".new-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_data_directory_that_cannot_be_created_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = SqliteStore::open(&file.join("rein.db"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not-a-dir"), "{err}");
}
