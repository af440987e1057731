//! Workspaces kept as they were: byte for byte with their permissions,
//! stored once however often they are kept, what is left out said, a cap
//! that keeps nothing half, and releases that delete only what no other
//! point reaches.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use rein_core::saved::WorkspaceHistory;
use rein_protocol::{SnapshotRules, TaskId};
use rein_store::SavedWorkspaces;

fn write(dir: &Path, rel: &str, body: &[u8]) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Every file under `dir`, by path: its bytes and mode; links by target.
fn listing(dir: &Path) -> Vec<(String, String, u32)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String, u32)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            let kind = e.file_type().unwrap();
            if kind.is_symlink() {
                out.push((
                    rel,
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                    0,
                ));
            } else if kind.is_dir() {
                out.push((rel.clone(), "dir".into(), mode(&path)));
                walk(root, &path, out);
            } else {
                let body = std::fs::read(&path).unwrap();
                out.push((
                    rel,
                    format!("{} bytes {:x?}", body.len(), &body[..body.len().min(16)]),
                    mode(&path),
                ));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// Large objects kept as files of their own.
fn large_objects(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("saved/objects"))
        .unwrap()
        .flatten()
        .filter(|s| s.path().is_dir())
        .map(|s| std::fs::read_dir(s.path()).unwrap().count())
        .sum()
}

/// The workspace as the runner hands it over: its directory, open.
fn open_dir(dir: &Path) -> std::os::fd::OwnedFd {
    std::fs::File::open(dir).unwrap().into()
}

fn keeper(dir: &Path) -> SavedWorkspaces {
    SavedWorkspaces::open(&dir.join("saved")).unwrap()
}

#[tokio::test]
async fn a_kept_workspace_comes_back_byte_for_byte_with_its_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    write(&ws, "README", b"hello\n");
    write(&ws, "bin/run.sh", b"#!/bin/sh\necho hi\n");
    std::fs::set_permissions(
        ws.join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write(&ws, "secret/key", b"k");
    std::fs::set_permissions(
        ws.join("secret/key"),
        std::fs::Permissions::from_mode(0o400),
    )
    .unwrap();
    std::fs::set_permissions(ws.join("secret"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    write(&ws, "data/big.bin", &big);
    std::fs::create_dir_all(ws.join("empty")).unwrap();
    std::os::unix::fs::symlink("../README", ws.join("bin/readme")).unwrap();
    let before = listing(&ws);

    let keeper = keeper(dir.path());
    let task = TaskId::new();
    let saved = keeper
        .save(&task, 7, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert_eq!(saved.unavailable, None);
    assert_eq!((saved.files, saved.left_out), (4, 0), "{saved:?}");
    assert_eq!(saved.bytes, 6 + 18 + 1 + 300_000);
    let root = saved.root.clone().unwrap();
    assert!(root.starts_with("sha256:"), "{root}");
    // The large file is an object file of its own; the rest are packed.
    assert_eq!(large_objects(dir.path()), 1, "the one large file");

    // The workspace moves on; the kept one does not.
    write(&ws, "README", b"changed\n");
    std::fs::remove_file(ws.join("data/big.bin")).unwrap();
    let back = dir.path().join("back");
    let restored = keeper.restore(&root, &back).await.unwrap();
    assert_eq!((restored.files, restored.bytes), (4, saved.bytes));
    assert_eq!(listing(&back), before);
    assert_eq!(
        keeper.point_at(&task, 100).unwrap(),
        Some((7, root.clone()))
    );
    assert_eq!(keeper.point_at(&task, 6).unwrap(), None);

    // Only into a new or empty directory.
    let refused = keeper.restore(&root, &back).await.unwrap_err();
    assert!(refused.contains("is not empty"), "{refused}");
    let bad = keeper
        .restore("sha256:zz", &dir.path().join("x"))
        .await
        .unwrap_err();
    assert!(bad.contains("not a kept tree's address"), "{bad}");
}

#[tokio::test]
async fn what_did_not_change_is_not_stored_again_here_or_for_another_task() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    for i in 0..20 {
        write(
            &ws,
            &format!("src/f{i}.rs"),
            format!("fn f{i}() {{}}\n").as_bytes(),
        );
    }
    write(&ws, "notes.txt", b"one");
    let keeper = keeper(dir.path());
    let (a, b) = (TaskId::new(), TaskId::new());
    let first = keeper
        .save(&a, 1, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert!(first.new_bytes >= first.bytes, "{first:?}");
    // Nothing changed: nothing new, the same tree.
    let again = keeper
        .save(&a, 2, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert_eq!((again.new_bytes, &again.root), (0, &first.root));
    // One file of the same size changed at once (within the file system's
    // clock tick): still seen, by its bytes.
    write(&ws, "notes.txt", b"two");
    let changed = keeper
        .save(&a, 3, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert_ne!(changed.root, first.root);
    let tree_bytes = changed.new_bytes - 3;
    assert!(
        tree_bytes < 2_000,
        "only the root's listing is new: {changed:?}"
    );
    // Another task with the same files stores nothing new.
    let other = keeper
        .save(&b, 1, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert_eq!((other.new_bytes, &other.root), (0, &changed.root));
}

#[tokio::test]
async fn what_the_rules_leave_out_is_said_and_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    write(&ws, "src/main.rs", b"fn main() {}");
    write(&ws, "target/debug/app", b"binary");
    write(&ws, "src/target", b"a file named target is kept");
    write(&ws, "run.log", b"log");
    write(&ws, "build/out", b"top build dir");
    write(&ws, "src/build/keep", b"nested build dir kept");
    let rules = SnapshotRules {
        exclude: vec!["target/".into(), "*.log".into(), "/build".into()],
        max_bytes: None,
    };
    let keeper = keeper(dir.path());
    let saved = keeper.save(&TaskId::new(), 1, open_dir(&ws), &rules).await;
    assert_eq!(saved.excluded, ["*.log", "/build", "target/"], "{saved:?}");
    assert_eq!((saved.left_out, saved.files), (3, 3), "{saved:?}");
    let back = dir.path().join("back");
    keeper
        .restore(saved.root.as_deref().unwrap(), &back)
        .await
        .unwrap();
    let kept: Vec<String> = listing(&back).into_iter().map(|(p, _, _)| p).collect();
    assert_eq!(
        kept,
        [
            "src",
            "src/build",
            "src/build/keep",
            "src/main.rs",
            "src/target"
        ]
    );

    let bad = SnapshotRules {
        exclude: vec!["a[".into()],
        max_bytes: None,
    };
    let refused = keeper.save(&TaskId::new(), 1, open_dir(&ws), &bad).await;
    assert!(
        refused
            .unavailable
            .unwrap()
            .contains("snapshot.exclude `a[`")
    );
}

#[tokio::test]
async fn a_workspace_over_the_cap_is_not_kept_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    write(&ws, "a.bin", &vec![1u8; 100_000]);
    write(&ws, "b.bin", &vec![2u8; 100_000]);
    let keeper = keeper(dir.path());
    let task = TaskId::new();
    let rules = SnapshotRules {
        exclude: vec![],
        max_bytes: Some(150_000),
    };
    let saved = keeper.save(&task, 4, open_dir(&ws), &rules).await;
    let why = saved.unavailable.clone().unwrap();
    assert!(why.contains("snapshot.max_bytes (150000 bytes)"), "{why}");
    assert_eq!(saved.root, None);
    assert_eq!(keeper.point_at(&task, 4).unwrap(), None);
    // The large file copied before the cap was reached is gone again.
    let objects = dir.path().join("saved/objects");
    assert_eq!(large_objects(dir.path()), 0, "nothing half-kept");
    // Under the cap it is kept; a leftover temporary copy is cleared at open.
    let kept = keeper
        .save(&task, 5, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert!(kept.root.is_some(), "{kept:?}");
    std::fs::write(objects.join("123-456.tmp"), b"half").unwrap();
    drop(keeper);
    let reopened = SavedWorkspaces::open(&dir.path().join("saved")).unwrap();
    assert!(!objects.join("123-456.tmp").exists());
    assert_eq!(
        reopened.point_at(&task, 9).unwrap().unwrap().1,
        kept.root.unwrap()
    );
}

#[tokio::test]
async fn releasing_a_task_deletes_only_what_no_other_point_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    let shared: Vec<u8> = vec![7u8; 200_000];
    write(&one, "shared.bin", &shared);
    write(&two, "shared.bin", &shared);
    write(&one, "own.bin", &vec![1u8; 100_000]);
    write(&one, "own.txt", b"only one");
    write(&two, "own.txt", b"only two");
    let keeper = keeper(dir.path());
    let (a, b) = (TaskId::new(), TaskId::new());
    let kept_a = keeper
        .save(&a, 1, open_dir(&one), &SnapshotRules::default())
        .await;
    let kept_b = keeper
        .save(&b, 1, open_dir(&two), &SnapshotRules::default())
        .await;
    assert_eq!(large_objects(dir.path()), 2);
    let freed = keeper.release(&a).await.unwrap();
    // Task a's own large file, its own small one and its root listing.
    assert!(
        freed > 100_000 + 8 && freed < 100_000 + 8 + 1_000,
        "{freed}"
    );
    assert_eq!(large_objects(dir.path()), 1);
    assert_eq!(keeper.point_at(&a, 9).unwrap(), None);
    let back = dir.path().join("back");
    keeper
        .restore(kept_b.root.as_deref().unwrap(), &back)
        .await
        .unwrap();
    assert_eq!(std::fs::read(back.join("shared.bin")).unwrap(), shared);
    let gone = keeper
        .restore(kept_a.root.as_deref().unwrap(), &dir.path().join("gone"))
        .await
        .unwrap_err();
    assert!(gone.contains("missing from the keeper"), "{gone}");
    keeper.release(&b).await.unwrap();
    assert_eq!(large_objects(dir.path()), 0);
}

/// A step that swaps a file for a link to a secret outside the workspace
/// while rein keeps it, again and again, as a hostile step would: the
/// secret's bytes never reach the keeper (a link is kept as a link, and a
/// file is read only through a descriptor that follows none).
#[tokio::test]
async fn a_step_swapping_files_for_links_cannot_make_rein_keep_what_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, b"TOP-SECRET-BYTES").unwrap();
    std::fs::create_dir_all(dir.path().join("outside/deep")).unwrap();
    std::fs::write(dir.path().join("outside/deep/key"), b"TOP-SECRET-BYTES too").unwrap();
    let ws = dir.path().join("ws");
    write(&ws, "f", b"plain");
    write(&ws, "d/inner", b"inner");
    // A link present from the start: kept as a link.
    std::os::unix::fs::symlink(&secret, ws.join("leak")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, secret, outside, stop) = (
            ws.clone(),
            secret.clone(),
            dir.path().join("outside"),
            stop.clone(),
        );
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                // The file, then a link to the secret in its place.
                let _ = std::fs::remove_file(ws.join("f"));
                let _ = std::os::unix::fs::symlink(&secret, ws.join("f"));
                let _ = std::fs::remove_file(ws.join("f"));
                let _ = std::fs::write(ws.join("f"), b"plain");
                // The directory, then a link to one outside in its place.
                let _ = std::fs::rename(ws.join("d"), ws.join("d.away"));
                let _ = std::os::unix::fs::symlink(&outside, ws.join("d"));
                let _ = std::fs::remove_file(ws.join("d"));
                let _ = std::fs::rename(ws.join("d.away"), ws.join("d"));
                n += 1;
            }
            n
        })
    };
    let keeper = keeper(dir.path());
    let task = TaskId::new();
    let mut kept = 0;
    for seq in 0..1000 {
        let saved = keeper
            .save(&task, seq, open_dir(&ws), &SnapshotRules::default())
            .await;
        if let Some(root) = saved.root {
            kept += 1;
            let back = dir.path().join(format!("back{seq}"));
            keeper.restore(&root, &back).await.unwrap();
            for (path, what, _) in listing(&back) {
                if what.ends_with("bytes") || what.contains(" bytes ") {
                    let body = std::fs::read(back.join(&path)).unwrap();
                    assert!(!body.windows(10).any(|w| w == b"TOP-SECRET"), "{path}");
                }
            }
            assert_eq!(
                std::fs::read_link(back.join("leak")).unwrap(),
                secret,
                "a link is kept as a link"
            );
            std::fs::remove_dir_all(&back).unwrap();
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let swaps = swapper.join().unwrap();
    assert!(swaps > 10 && kept > 0, "{swaps} swaps, {kept} points kept");
    // Nothing the keeper holds has the secret's bytes.
    let db = std::fs::read(dir.path().join("saved/objects.db")).unwrap();
    let wal = std::fs::read(dir.path().join("saved/objects.db-wal")).unwrap_or_default();
    for bytes in [db, wal] {
        assert!(
            !bytes.windows(16).any(|w| w == b"TOP-SECRET-BYTES"),
            "the secret reached the keeper"
        );
    }
}

#[tokio::test]
async fn a_workspace_written_for_a_task_is_known_to_its_first_save_and_a_change_is_still_seen() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    write(&ws, "a.txt", b"aaaa");
    write(&ws, "sub/b.txt", b"bbbb");
    let keeper = keeper(&dir.path().join("saved"));
    let rules = SnapshotRules::default();
    let source = TaskId::new();
    let kept = keeper.save(&source, 1, open_dir(&ws), &rules).await;
    let root = kept.root.clone().unwrap();

    // Written for a fork, then kept as it was taken up: the same tree.
    let fork = TaskId::new();
    let into = dir.path().join("fork");
    let made = keeper.restore_for(&fork, &root, &into).await.unwrap();
    assert_eq!(made.files, 2);
    assert_eq!(listing(&into), listing(&ws));
    let first = keeper.save(&fork, 1, open_dir(&into), &rules).await;
    assert_eq!(first.root.as_deref(), Some(root.as_str()));
    assert_eq!(first.new_bytes, 0);

    // A change right after, of the same size, is seen by the next save.
    std::fs::write(into.join("a.txt"), b"AAAA").unwrap();
    let second = keeper.save(&fork, 2, open_dir(&into), &rules).await;
    assert_ne!(second.root.as_deref(), Some(root.as_str()));
    let back = dir.path().join("back");
    keeper
        .restore(second.root.as_deref().unwrap(), &back)
        .await
        .unwrap();
    assert_eq!(std::fs::read(back.join("a.txt")).unwrap(), b"AAAA");
    // And one made before the first save, too.
    let other = TaskId::new();
    let into = dir.path().join("other");
    keeper.restore_for(&other, &root, &into).await.unwrap();
    std::fs::write(into.join("sub/b.txt"), b"BBBB").unwrap();
    let first = keeper.save(&other, 1, open_dir(&into), &rules).await;
    let back = dir.path().join("back-other");
    keeper
        .restore(first.root.as_deref().unwrap(), &back)
        .await
        .unwrap();
    assert_eq!(std::fs::read(back.join("sub/b.txt")).unwrap(), b"BBBB");
}

#[test]
fn keepers_opened_at_once_on_a_new_directory_all_open() {
    // `rein run` and `rein tasks list` started together on a fresh data
    // directory both make the keeper's database: the second waits for the
    // first, it is not refused.
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let saved = std::sync::Arc::new(dir.path().join("saved"));
        let start = std::sync::Arc::new(std::sync::Barrier::new(6));
        let opens: Vec<_> = (0..6)
            .map(|_| {
                let (saved, start) = (saved.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    SavedWorkspaces::open(&saved).map(|_| ())
                })
            })
            .collect();
        for open in opens {
            let opened = open.join().unwrap();
            assert!(opened.is_ok(), "{:?}", opened.err());
        }
    }
}

/// Sets `path`'s modification time to `when` (its change time moves to now,
/// as it always does).
fn date(path: &Path, when: std::time::SystemTime) {
    std::fs::File::open(path)
        .unwrap()
        .set_modified(when)
        .unwrap();
}

#[tokio::test]
async fn a_directory_listed_before_is_read_again_when_its_names_change_even_with_its_time_put_back()
{
    // Settled directories are not listed again while their times stay the
    // same. A step that adds, removes and renames names, changes a mode and
    // then puts each directory's modification time back still moves its
    // change time: every save keeps the workspace exactly as it is.
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    for d in 0..40 {
        for f in 0..5 {
            write(
                &ws,
                &format!("d{d:02}/deeper/f{f}.txt"),
                format!("{d} {f}").as_bytes(),
            );
        }
        write(&ws, &format!("d{d:02}/top.txt"), b"top");
    }
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
    let mut dirs = vec![ws.clone()];
    for d in 0..40 {
        dirs.push(ws.join(format!("d{d:02}")));
        dirs.push(ws.join(format!("d{d:02}/deeper")));
    }
    for d in &dirs {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            date(&e.path(), then);
        }
        date(d, then);
    }
    // Names are reused once a directory's change time is in a second before
    // the last one (the clock of a file system ticks coarsely): waited for,
    // as the property under test is about time passing.
    let changed = std::fs::metadata(&ws).unwrap().ctime();
    while std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        < changed as u64 + 2
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let keeper = keeper(dir.path());
    let rules = SnapshotRules::default();
    let task = TaskId::new();
    let first = keeper.save(&task, 1, open_dir(&ws), &rules).await;
    assert_eq!(first.files, 240);
    let again = keeper.save(&task, 2, open_dir(&ws), &rules).await;
    assert_eq!(
        (again.root.as_ref(), again.new_bytes),
        (first.root.as_ref(), 0)
    );

    write(&ws, "d03/deeper/new.txt", b"new");
    std::fs::remove_file(ws.join("d17/deeper/f2.txt")).unwrap();
    std::fs::rename(ws.join("d29/top.txt"), ws.join("d29/moved.txt")).unwrap();
    std::fs::create_dir(ws.join("d35/made")).unwrap();
    write(&ws, "d35/made/inside.txt", b"inside");
    std::fs::set_permissions(
        ws.join("d08/deeper"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    for d in &dirs {
        date(d, then);
    }
    let after = keeper.save(&task, 3, open_dir(&ws), &rules).await;
    assert_eq!(after.files, 241, "{after:?}");
    let back = dir.path().join("back");
    keeper
        .restore(after.root.as_deref().unwrap(), &back)
        .await
        .unwrap();
    assert_eq!(listing(&back), listing(&ws));

    // And once more with nothing changed: the same tree, nothing new.
    let same = keeper.save(&task, 4, open_dir(&ws), &rules).await;
    assert_eq!(
        (same.root.as_ref(), same.new_bytes),
        (after.root.as_ref(), 0)
    );
}

#[tokio::test]
async fn a_directory_nested_a_thousand_deep_is_kept_to_256_levels_and_the_rest_said_left_out() {
    // A step that makes a directory in a directory over and over cannot
    // exhaust the keeper's stack: what is deeper than 256 levels is left
    // out, and said so.
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, mkdirat};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    write(&ws, "top.txt", b"top");
    let mut at = open(&ws, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..1_000 {
        mkdirat(&at, "d", Mode::from_bits_truncate(0o755)).unwrap();
        at = openat(
            &at,
            "d",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
    }
    let keeper = keeper(dir.path());
    let saved = keeper
        .save(&TaskId::new(), 1, open_dir(&ws), &SnapshotRules::default())
        .await;
    assert_eq!(saved.files, 1, "{saved:?}");
    assert_eq!(saved.left_out, 1, "{saved:?}");
    assert_eq!(
        saved.excluded,
        vec!["(directories nested more than 256 deep)".to_owned()]
    );
    let back = dir.path().join("back");
    keeper
        .restore(saved.root.as_deref().unwrap(), &back)
        .await
        .unwrap();
    let mut depth = 0;
    let mut here = back.clone();
    while here.join("d").is_dir() {
        here = here.join("d");
        depth += 1;
    }
    assert_eq!(depth, 256);
    assert_eq!(std::fs::read(back.join("top.txt")).unwrap(), b"top");
}
