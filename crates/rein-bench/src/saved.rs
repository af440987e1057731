//! `rein-bench saved`: what keeping a task's workspace at a step boundary
//! costs, and what it stores.
//!
//! - Many files, one changed: a workspace of `--files` small files (100
//!   directories); between saves one file is rewritten. The first save reads
//!   everything; each later one reads only the changed file (and any written
//!   in the last second, whose times cannot be trusted yet, so the changed
//!   file is back-dated by two seconds, as a step's earlier write would be;
//!   the directories are left two seconds to settle, as a directory whose
//!   times moved in the last second or two is listed again).
//!   Beside it, the floor: listing the same directories and reading each
//!   file's metadata, nothing else (`stat_walk_p50_ms`).
//! - Large and unchanged: a workspace of `--large-mb` MiB in 64 MiB files,
//!   saved again with nothing changed.
//! - Growth: `--steps` saves, each after one 1 KiB file was changed (a
//!   kilobyte no other step wrote), and how much the keeper's directory grew
//!   on disk once closed; its write-ahead log's largest size meanwhile beside
//!   it (bounded: it is cut back to 1 MiB at each checkpoint).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use rein_core::saved::WorkspaceHistory;
use rein_protocol::{SnapshotRules, TaskId};
use rein_store::SavedWorkspaces;
use serde_json::json;

/// Bytes a directory takes on disk (its files' blocks).
fn on_disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => on_disk(&e.path()),
                    Ok(m) => m.blocks() * 512,
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// A workspace as the runner hands it over: its directory, open.
fn open_dir(dir: &Path) -> anyhow::Result<std::os::fd::OwnedFd> {
    Ok(std::fs::File::open(dir)?.into())
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).copied().map_or(0.0, ms)
}

/// Rewrites `path` with `body`, dated two seconds ago.
fn rewrite(path: &Path, body: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, body)?;
    let then = SystemTime::now() - Duration::from_secs(2);
    std::fs::File::options()
        .write(true)
        .open(path)?
        .set_modified(then)?;
    Ok(())
}

pub async fn run(
    files: usize,
    large_mb: u64,
    steps: usize,
    saves: usize,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    let rules = SnapshotRules {
        exclude: vec![],
        max_bytes: Some(u64::MAX),
    };

    // Many files, one changed between saves.
    let ws = dir.join("many");
    for i in 0..files {
        let path = ws.join(format!("d{:02}/f{i}.txt", i % 100));
        std::fs::create_dir_all(path.parent().unwrap_or(&ws))?;
        std::fs::write(&path, format!("file {i}\n").repeat(8))?;
    }
    // Everything dated past the last second, as files and directories a
    // step left earlier.
    let then = SystemTime::now() - Duration::from_secs(2);
    for i in 0..files {
        let path = ws.join(format!("d{:02}/f{i}.txt", i % 100));
        std::fs::File::options()
            .write(true)
            .open(&path)?
            .set_modified(then)?;
    }
    // A directory's names are reused only once both its times are in a
    // second before the last one (its change time cannot be set back).
    std::thread::sleep(Duration::from_millis(2_000));
    let keeper = SavedWorkspaces::open(&dir.join("saved-many")).map_err(anyhow::Error::msg)?;
    let task = TaskId::new();
    let started = Instant::now();
    let first = keeper.save(&task, 1, open_dir(&ws)?, &rules).await;
    let first_ms = ms(started.elapsed());
    anyhow::ensure!(first.unavailable.is_none(), "{first:?}");
    let mut one_changed = Vec::with_capacity(saves);
    for n in 0..saves {
        rewrite(&ws.join("d07/f7.txt"), format!("change {n}\n").as_bytes())?;
        let started = Instant::now();
        let saved = keeper
            .save(&task, 2 + n as u64, open_dir(&ws)?, &rules)
            .await;
        one_changed.push(started.elapsed());
        anyhow::ensure!(saved.new_bytes > 0 && saved.new_bytes < 50_000, "{saved:?}");
    }

    // The floor: listing the same workspace and reading each file's
    // metadata, and nothing else.
    fn walk(dir: &Path) -> std::io::Result<u64> {
        let mut n = 0;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            n += if meta.is_dir() {
                walk(&entry.path())?
            } else {
                1
            };
        }
        Ok(n)
    }
    let mut walks = Vec::with_capacity(saves);
    for _ in 0..saves {
        let started = Instant::now();
        anyhow::ensure!(walk(&ws)? == files as u64);
        walks.push(started.elapsed());
    }

    // Large and unchanged.
    let big = dir.join("large");
    std::fs::create_dir_all(&big)?;
    let chunk: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let mut left = large_mb << 20;
    let mut n = 0;
    while left > 0 {
        let size = left.min(chunk.len() as u64) as usize;
        std::fs::write(big.join(format!("part{n}.bin")), &chunk[..size])?;
        left -= size as u64;
        n += 1;
    }
    let then = SystemTime::now() - Duration::from_secs(2);
    for i in 0..n {
        std::fs::File::options()
            .write(true)
            .open(big.join(format!("part{i}.bin")))?
            .set_modified(then)?;
    }
    let large_keeper =
        SavedWorkspaces::open(&dir.join("saved-large")).map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let first_large = large_keeper.save(&task, 1, open_dir(&big)?, &rules).await;
    let first_large_ms = ms(started.elapsed());
    anyhow::ensure!(first_large.unavailable.is_none(), "{first_large:?}");
    let mut unchanged = Vec::with_capacity(saves);
    for n in 0..saves {
        let started = Instant::now();
        let saved = large_keeper
            .save(&task, 2 + n as u64, open_dir(&big)?, &rules)
            .await;
        unchanged.push(started.elapsed());
        anyhow::ensure!(saved.new_bytes == 0, "{saved:?}");
    }

    // Growth over steps that each change one 1 KiB file.
    let small = dir.join("growth");
    std::fs::create_dir_all(&small)?;
    std::fs::write(small.join("README"), b"a small project\n")?;
    let growth_dir = dir.join("saved-growth");
    let growth_keeper = SavedWorkspaces::open(&growth_dir).map_err(anyhow::Error::msg)?;
    let growth_task = TaskId::new();
    growth_keeper
        .save(&growth_task, 0, open_dir(&small)?, &rules)
        .await;
    drop(growth_keeper);
    let before = on_disk(&growth_dir);
    let growth_keeper = SavedWorkspaces::open(&growth_dir).map_err(anyhow::Error::msg)?;
    let mut wal = 0;
    for step in 0..steps {
        // A kilobyte no other step wrote.
        let mut body = format!("step {step}\n").into_bytes();
        body.extend(
            (0..1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8 ^ (step as u8)),
        );
        body.truncate(1024);
        rewrite(&small.join(format!("out{}.bin", step % 10)), &body)?;
        let saved = growth_keeper
            .save(&growth_task, 1 + step as u64, open_dir(&small)?, &rules)
            .await;
        anyhow::ensure!(saved.unavailable.is_none(), "{saved:?}");
        wal = wal.max(std::fs::metadata(growth_dir.join("objects.db-wal")).map_or(0, |m| m.len()));
    }
    // Closed, the write-ahead log is folded into the database.
    drop(growth_keeper);
    let grown = on_disk(&growth_dir).saturating_sub(before);

    Ok(json!({
        "bench": "saved",
        "files": files,
        "first_save_ms": first_ms,
        "one_file_changed_p50_ms": median(one_changed),
        "stat_walk_p50_ms": median(walks),
        "large_mb": large_mb,
        "large_first_save_ms": first_large_ms,
        "large_unchanged_p50_ms": median(unchanged),
        "growth_steps": steps,
        "growth_bytes": grown,
        "growth_bytes_per_step": grown / steps.max(1) as u64,
        "growth_wal_max_bytes": wal,
    }))
}
