//! Forks and kept workspaces under SIGKILL, for real: `rein tasks fork`
//! killed while it writes the fork's workspace leaves no half-made task,
//! and `rein` killed at random moments while it keeps workspaces loses none
//! it recorded. Seeded (REIN_CRASH_SEED replays a run).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{json, rein, run_ok, show, task_ids, write_plan};
use rand::{Rng, SeedableRng};
use rein_core::TaskStore;
use rein_core::saved::WorkspaceHistory;
use rein_protocol::{TaskChange, TaskId};

fn rng() -> rand::rngs::StdRng {
    let seed: u64 = std::env::var("REIN_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    eprintln!("seed {seed} (REIN_CRASH_SEED replays it)");
    rand::rngs::StdRng::seed_from_u64(seed)
}

/// Every file, directory and link under `dir`: path → (mode, content).
fn tree(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let rel = path.strip_prefix(dir).unwrap().to_owned();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                out.insert(rel, (mode, Vec::new()));
                stack.push(path);
            } else if meta.file_type().is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                out.insert(rel, (0, to.into_os_string().into_encoded_bytes()));
            } else {
                out.insert(rel, (mode, std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// A step that writes `n` files of a few hundred bytes into `dir`, some
/// with modes of their own, with shell builtins only (fast).
fn writer(id: &str, dir: &str, n: usize) -> String {
    format!(
        "[[steps]]\nid = \"{id}\"\nrun = '''mkdir -p {dir}; i=0; while [ $i -lt {n} ]; do printf '%0300d {id}' $i > {dir}/f$i; i=$((i+1)); done; chmod 600 {dir}/f1; chmod 750 {dir}'''\n"
    )
}

fn leftovers(data: &Path) -> Vec<String> {
    std::fs::read_dir(data.join("workspaces"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".forking."))
        .collect()
}

#[test]
fn sigkill_during_a_fork_leaves_no_half_made_task() {
    let (_dir, data, plan) = common::with_plan(
        "big.toml",
        &format!(
            "description = 'big'\n{}[[steps]]\nid = 'after'\nrun = 'echo after > after.txt'\ndepends_on = ['big']\n",
            writer("big", "d", 3000)
        ),
    );
    run_ok(rein(&data).arg("run").arg(&plan).arg("--quiet"));
    let source = task_ids(&data)[0].clone();
    let source_log = json(&run_ok(
        rein(&data).args(["tasks", "events", &source, "--json"]),
    ));
    let mut expected = tree(Path::new(
        show(&data, &source)["resources"]["workspace_path"]
            .as_str()
            .unwrap(),
    ));
    expected.remove(Path::new("after.txt"));
    let fork = || {
        common::fork_after(&data, &source, "big")
            .arg("--quiet")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut rng = rng();
    let mut killed_while_writing = 0;
    for round in 0..8 {
        let mut child = fork();
        // Killed once it is writing the fork's workspace (the directory it
        // writes, named with its pid, is there), a moment later.
        let writing = format!(".forking.{}", child.id());
        let mine = || leftovers(&data).iter().any(|n| n.ends_with(&writing));
        let until = Instant::now() + Duration::from_secs(20);
        while !mine() && child.try_wait().unwrap().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_micros(200));
        }
        if round % 2 == 0 {
            // A moment into the writing.
            std::thread::sleep(Duration::from_millis(rng.random_range(0..40)));
        } else {
            // As soon as the written directory is put in place.
            while mine() && child.try_wait().unwrap().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        if child.try_wait().unwrap().is_none() {
            killed_while_writing += usize::from(mine());
            common::kill9(&mut child);
        } else {
            child.wait().unwrap();
        }
        // Whatever forks exist are whole: the log from its first event,
        // the files exactly as they were after `big`.
        for f in &common::forks_of(&data, &source) {
            let id = f["id"].as_str().unwrap();
            let state = show(&data, id);
            let events = json(&run_ok(rein(&data).args(["tasks", "events", id, "--json"])));
            assert_eq!(events[0]["type"], "task_forked", "{id}");
            let ws = Path::new(state["resources"]["workspace_path"].as_str().unwrap());
            assert_eq!(tree(ws), expected, "fork {id}'s workspace");
        }
    }
    let made = common::forks_of(&data, &source);
    eprintln!(
        "{killed_while_writing} of 8 forks killed while writing their workspace, {} made",
        made.len()
    );
    assert!(
        killed_while_writing >= 2,
        "only {killed_while_writing} kills landed while a workspace was written"
    );
    // The next fork sweeps what the killed ones left, and is whole.
    let out = common::fork_after(&data, &source, "big")
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "it asks about `after`");
    let last = json(&out);
    assert_eq!(
        tree(Path::new(
            last["resources"]["workspace_path"].as_str().unwrap()
        )),
        expected
    );
    assert!(leftovers(&data).is_empty(), "{:?}", leftovers(&data));
    assert_eq!(
        json(&run_ok(
            rein(&data).args(["tasks", "events", &source, "--json"])
        )),
        source_log,
        "the source is as it was"
    );
}

#[test]
fn sigkill_while_workspaces_are_kept_loses_none_recorded() {
    let (dir, data) = common::scratch();
    let mut text = String::from("description = 'kept under kills'\n");
    for i in 0..6 {
        text.push_str(&writer(&format!("w{i}"), &format!("d{i}"), 1500));
        text.push_str("idempotent = true\n");
        if i > 0 {
            text.push_str(&format!("depends_on = ['w{}']\n", i - 1));
        }
    }
    let plan = write_plan(dir.path(), "kept.toml", &text);
    let mut rng = rng();
    let mut kills = 0;
    // Killed a dozen times at random moments, then let finish.
    for round in 0..40 {
        let ids = task_ids(&data);
        if ids
            .first()
            .is_some_and(|id| show(&data, id)["status"] == "completed")
        {
            break;
        }
        let mut cmd = rein(&data);
        match ids.first() {
            None => cmd.arg("run").arg(&plan),
            Some(id) => cmd.args(["tasks", "resume", id, "--no-wait"]),
        };
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if round >= 12 {
            child.wait().unwrap();
            continue;
        }
        std::thread::sleep(Duration::from_millis(rng.random_range(20..600)));
        if child.try_wait().unwrap().is_none() {
            common::kill9(&mut child);
            kills += 1;
        } else {
            child.wait().unwrap();
        }
    }
    let id = task_ids(&data)[0].clone();
    assert_eq!(
        show(&data, &id)["status"],
        "completed",
        "after {kills} kills"
    );
    assert!(kills >= 5, "only {kills} kills");

    // Every kept workspace the log records comes back whole.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rein_store::SqliteStore::open(&data.join("rein.db")).unwrap();
    let task = TaskId::parse(&id).unwrap();
    let events = rt.block_on(store.events(&task, 0, usize::MAX)).unwrap();
    let keeper = rein_store::SavedWorkspaces::open(&data.join("saved")).unwrap();
    let mut restored = 0;
    for e in &events {
        let TaskChange::WorkspaceSaved { workspace, .. } = &e.change else {
            continue;
        };
        let root = workspace.root.as_deref().expect("kept");
        let into = dir.path().join(format!("check-{}", e.seq));
        let made = rt.block_on(keeper.restore(root, &into)).unwrap();
        assert_eq!(made.files, workspace.files, "event {}", e.seq);
        restored += 1;
    }
    assert!(restored >= 7, "{restored} kept workspaces");
    // The last is the workspace as the task left it.
    let last = dir.path().join(format!(
        "check-{}",
        events
            .iter()
            .rev()
            .find(|e| matches!(e.change, TaskChange::WorkspaceSaved { .. }))
            .unwrap()
            .seq
    ));
    let ws = PathBuf::from(
        show(&data, &id)["resources"]["workspace_path"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(tree(&last), tree(&ws));
    // And the keeper's database is sound.
    let conn = rusqlite::Connection::open(data.join("saved/objects.db")).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    eprintln!("{kills} kills, {restored} kept workspaces restored");
}
