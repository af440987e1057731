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
    drop(SqliteStore::open(&path).unwrap());
    drop(SqliteStore::open(&path).unwrap());
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
