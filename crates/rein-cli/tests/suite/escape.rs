//! Commands that really try to get out of the sandbox (real bubblewrap, real
//! child processes, a real listener on loopback), and what stops them. Each
//! refusal has a positive control: the same act is allowed where it should be.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use rein_sandbox::{Confinement, Sandbox, SandboxKind, Trampoline};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

struct Place {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    outside: PathBuf,
}

fn place() -> Place {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    Place {
        workspace: workspace.canonicalize().unwrap(),
        outside: outside.canonicalize().unwrap(),
        _dir: dir,
    }
}

fn trampoline() -> Trampoline {
    Trampoline {
        program: PathBuf::from(env!("CARGO_BIN_EXE_rein-confine")),
        args: Vec::new(),
    }
}

/// Both sandboxes: bubblewrap (.ci/run installs it) and the Landlock fallback
/// (this kernel has Landlock), through the `rein-confine` trampoline; and
/// bubblewrap again, started through the trampoline as `rein` starts it.
async fn sandboxes() -> Vec<Sandbox> {
    let bwrap = Sandbox::probe().await.expect("bubblewrap runs here");
    let landlock = Sandbox::probe_landlock(trampoline())
        .await
        .expect("Landlock is enabled in this kernel");
    let started = bwrap.clone().started_by(trampoline()).await;
    vec![bwrap, landlock, started]
}

/// `dir` pinned as a task's workspace is.
fn pin(dir: &Path) -> rein_sandbox::Pinned {
    rein_sandbox::Pinned::pin(&dir.canonicalize().unwrap()).unwrap()
}

async fn run_in(sandbox: &Sandbox, ws: &Path, script: &str, confinement: &Confinement) -> Run {
    let env = vec![("MARK".to_owned(), "rein-test".to_owned())];
    let out = sandbox
        .command(&pin(ws), script, &env, confinement)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test]
async fn the_probes_find_each_sandbox_and_say_so() {
    let found = sandboxes().await;
    assert_eq!(found[0].kind(), SandboxKind::Bubblewrap);
    assert!(
        found[0].detail.contains("bubblewrap"),
        "{}",
        found[0].detail
    );
    assert_eq!(found[1].kind(), SandboxKind::Landlock);
    assert!(found[1].detail.contains("Landlock"), "{}", found[1].detail);
    // Bubblewrap through the trampoline: it passed its trial, and its
    // commands are the trampoline's, which becomes bwrap.
    assert_eq!(found[2].kind(), SandboxKind::Bubblewrap);
    assert!(
        found[2].detail.contains("started through"),
        "{}",
        found[2].detail
    );
    let ws = tempfile::tempdir().unwrap();
    let command = found[2].command(&pin(ws.path()), "true", &[], &Confinement::default());
    assert_eq!(
        command.as_std().get_program(),
        env!("CARGO_BIN_EXE_rein-confine")
    );
    let args: Vec<_> = command.as_std().get_args().collect();
    let exec = args.iter().position(|a| *a == "--exec").unwrap();
    assert_eq!(args[exec + 1], "--");
    assert!(
        args[exec + 2].to_string_lossy().ends_with("bwrap"),
        "{args:?}"
    );
    // A trampoline that is not there is a reason, not a panic.
    let missing = Trampoline {
        program: PathBuf::from("/nonexistent/rein-confine"),
        args: Vec::new(),
    };
    let why = Sandbox::probe_landlock(missing.clone()).await.unwrap_err();
    assert!(why.to_string().contains("cannot be started"), "{why}");
    // For bubblewrap it is a fork of rein instead, and the detail says why.
    let forked = found[0].clone().started_by(missing).await;
    assert!(
        forked.detail.contains("started by a fork of rein")
            && forked.detail.contains("cannot be started"),
        "{}",
        forked.detail
    );
    assert!(
        found[0]
            .command(&pin(ws.path()), "true", &[], &Confinement::default())
            .as_std()
            .get_program()
            .to_string_lossy()
            .ends_with("bwrap")
    );
    let out = run_in(&forked, ws.path(), "echo $MARK", &Confinement::default()).await;
    assert_eq!(out.stdout.trim(), "rein-test", "{}", out.stderr);
}

/// Refusals read differently: an absent path under bubblewrap, a denied one
/// under Landlock.
fn refused(out: &Run) -> bool {
    [
        "No such file",
        "Directory nonexistent",
        "Read-only file system",
        "Permission denied",
    ]
    .iter()
    .any(|m| out.stderr.contains(m))
}

#[tokio::test]
async fn writing_inside_the_workspace_works_and_outside_it_does_not() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        let none = Confinement::default();
        let inside = run_in(
            &sandbox,
            &p.workspace,
            "echo hi > inside.txt && echo $MARK",
            &none,
        )
        .await;
        assert_eq!(inside.code, Some(0), "{kind:?}: {}", inside.stderr);
        assert_eq!(
            inside.stdout.trim(),
            "rein-test",
            "the step's environment is passed"
        );
        assert_eq!(
            std::fs::read_to_string(p.workspace.join("inside.txt")).unwrap(),
            "hi\n"
        );

        let target = p.outside.join("escaped.txt");
        let out = run_in(
            &sandbox,
            &p.workspace,
            &format!("echo x > {}", target.display()),
            &none,
        )
        .await;
        assert_ne!(out.code, Some(0), "{kind:?}");
        assert!(refused(&out), "{kind:?}: {}", out.stderr);
        assert!(!target.exists(), "{kind:?}: nothing was written outside");
        for path in ["/usr/escaped.txt", "/etc/escaped.txt"] {
            let out = run_in(&sandbox, &p.workspace, &format!("echo x > {path}"), &none).await;
            assert_ne!(out.code, Some(0), "{kind:?}: {path} is read-only");
            assert!(refused(&out), "{kind:?}: {}", out.stderr);
        }
    }
}

#[tokio::test]
async fn a_symlink_pointing_out_leads_nowhere() {
    for sandbox in sandboxes().await {
        let p = place();
        std::os::unix::fs::symlink(&p.outside, p.workspace.join("out")).unwrap();
        let out = run_in(
            &sandbox,
            &p.workspace,
            "echo x > out/escaped.txt",
            &Confinement::default(),
        )
        .await;
        assert_ne!(out.code, Some(0), "{:?}", sandbox.kind());
        assert!(!p.outside.join("escaped.txt").exists());
        // And the workspace's own path check refuses it before anything runs.
        let err = rein_sandbox::resolve(&p.workspace, "out/escaped.txt").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
    }
}

#[tokio::test]
async fn files_outside_the_allowed_paths_cannot_be_read() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        let secret = p.outside.join("secret.txt");
        std::fs::write(&secret, "hunter2").unwrap();
        let cat = format!("cat {}", secret.display());
        let out = run_in(&sandbox, &p.workspace, &cat, &Confinement::default()).await;
        assert_ne!(out.code, Some(0), "{kind:?}");
        assert!(!out.stdout.contains("hunter2"));
        assert!(refused(&out), "{kind:?}: {}", out.stderr);
        if kind == SandboxKind::Bubblewrap {
            // Masked system files read as empty (Landlock cannot mask a file).
            let shadow = run_in(
                &sandbox,
                &p.workspace,
                "cat /etc/shadow | wc -c",
                &Confinement::default(),
            )
            .await;
            assert_eq!(shadow.stdout.trim(), "0");
        }
        // Allowed explicitly, the same file is readable (and still not writable).
        let allowed = Confinement {
            read_only: vec![p.outside.clone()],
            ..Confinement::default()
        };
        let out = run_in(&sandbox, &p.workspace, &cat, &allowed).await;
        assert_eq!(out.stdout, "hunter2", "{kind:?}: {}", out.stderr);
        let write = format!("echo x > {}", secret.display());
        let out = run_in(&sandbox, &p.workspace, &write, &allowed).await;
        assert_ne!(out.code, Some(0), "{kind:?}");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "hunter2");
    }
}

/// Connects to `port` on loopback from inside the sandbox (bash's /dev/tcp).
fn connect_script(port: u16) -> String {
    format!("exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected'")
}

#[tokio::test]
async fn no_network_unless_allowed() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();

        let denied = run_in(
            &sandbox,
            &p.workspace,
            &connect_script(port),
            &Confinement::default(),
        )
        .await;
        assert_ne!(denied.code, Some(0), "{kind:?}: {}", denied.stdout);
        assert!(!denied.stdout.contains("connected"));
        assert!(
            listener.accept().is_err(),
            "{kind:?}: the listener saw no connection from the sandbox"
        );

        let allowed = Confinement {
            network: true,
            ..Confinement::default()
        };
        let out = run_in(&sandbox, &p.workspace, &connect_script(port), &allowed).await;
        assert_eq!(out.code, Some(0), "{kind:?}: {}", out.stderr);
        assert!(out.stdout.contains("connected"));
        assert!(
            listener.accept().is_ok(),
            "{kind:?}: allowed, the connection arrives"
        );
    }
}

#[tokio::test]
async fn memory_beyond_the_limit_is_refused() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        // 256 MiB of address space, then 512 MiB asked for at once.
        let script = "python3 -c 'b = bytearray(512 * 1024 * 1024); print(len(b))'";
        let limited = Confinement {
            memory_bytes: Some(256 * 1024 * 1024),
            ..Confinement::default()
        };
        let out = run_in(&sandbox, &p.workspace, script, &limited).await;
        assert_ne!(out.code, Some(0), "{kind:?}");
        assert!(
            out.stderr.contains("MemoryError"),
            "{kind:?}: {}",
            out.stderr
        );
        let out = run_in(&sandbox, &p.workspace, script, &Confinement::default()).await;
        assert_eq!(
            out.code,
            Some(0),
            "{kind:?}: without the limit it fits: {}",
            out.stderr
        );
    }
}

/// Processes on this host whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) && !cmdline.contains("processes_with") {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[tokio::test]
async fn nothing_is_left_running_in_the_background_after_the_command_ends() {
    // Bubblewrap's PID namespace ends with the command. (Under Landlock there is
    // none: the engine stops the step's process group instead.)
    let sandbox = Sandbox::probe().await.unwrap();
    let p = place();
    // A duration no other process uses, to find it by.
    let needle = format!(
        "{}.{}",
        40 + std::process::id() % 50,
        std::process::id() % 997
    );
    let script = format!("sleep {needle} & sleep {needle} & echo started");
    let out = run_in(&sandbox, &p.workspace, &script, &Confinement::default()).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("started"));
    let left = processes_with(&format!("sleep {needle}"));
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Who a limited command runs as in these tests: as root, the kernel does not
/// limit processes, so (as rein does) the command runs as the workspace's owner,
/// here `nobody`; anyone else runs it as themselves.
fn unprivileged(p: &Place) -> Option<(u32, u32)> {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let parent = p.workspace.parent().unwrap();
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(&p.workspace, Some(65534), Some(65534)).unwrap();
    Some((65534, 65534))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_processes_than_the_limit_cannot_be_started() {
    // Twenty background processes, then wait for them all.
    let script = "i=0; while [ $i -lt 20 ]; do sleep 0.3 & i=$((i+1)); done; wait; echo all";
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        let run_as = unprivileged(&p);
        let limited = Confinement {
            processes: Some(8),
            run_as,
            ..Confinement::default()
        };
        let out = run_in(&sandbox, &p.workspace, script, &limited).await;
        assert!(!out.stdout.contains("all"), "{kind:?}: {}", out.stdout);
        assert!(
            out.stderr.to_lowercase().contains("fork"),
            "{kind:?}: {}",
            out.stderr
        );
        // The limit counts this sandbox's processes only: two at once, each
        // within it, both finish.
        let small = "i=0; while [ $i -lt 4 ]; do sleep 0.3 & i=$((i+1)); done; wait; echo all";
        let (a, b) = tokio::join!(
            run_in(&sandbox, &p.workspace, small, &limited),
            run_in(&sandbox, &p.workspace, small, &limited)
        );
        for out in [a, b] {
            assert_eq!(out.stdout.trim(), "all", "{kind:?}: {}", out.stderr);
        }
        // Without the limit, all twenty run.
        let free = Confinement {
            run_as,
            ..Confinement::default()
        };
        let out = run_in(&sandbox, &p.workspace, script, &free).await;
        assert_eq!(out.stdout.trim(), "all", "{kind:?}: {}", out.stderr);
    }
}

#[tokio::test]
async fn under_bubblewrap_a_hidden_directory_stays_out_of_reach_whatever_is_mounted() {
    let sandbox = Sandbox::probe().await.expect("bubblewrap runs here");
    let p = place();
    // rein's data directory inside a directory the step may read, with a task
    // workspace of its own inside it.
    let data = p.outside.join("data");
    let own = data.join("workspaces/task_1");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(data.join("rein.db"), "store").unwrap();
    std::fs::write(p.outside.join("notes.txt"), "shared").unwrap();
    let confinement = Confinement {
        read_only: vec![p.outside.clone()],
        hidden: vec![data.clone()],
        ..Confinement::default()
    };
    let read = format!(
        "cat {}/notes.txt; cat {}/rein.db",
        p.outside.display(),
        data.display()
    );
    let out = run_in(&sandbox, &p.workspace, &read, &confinement).await;
    assert_eq!(out.stdout, "shared", "{}", out.stderr);
    assert!(out.stderr.contains("No such file"), "{}", out.stderr);
    // Without the cover, the same read would have shown it.
    let open = Confinement {
        hidden: Vec::new(),
        ..confinement.clone()
    };
    let out = run_in(&sandbox, &p.workspace, &read, &open).await;
    assert_eq!(out.stdout, "sharedstore");
    // A workspace inside the hidden directory is still there, writable.
    let out = run_in(&sandbox, &own, "echo hi > made; ls ..", &confinement).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(own.join("made")).unwrap(), "hi\n");
    assert_eq!(out.stdout.trim(), "task_1", "only its own workspace shows");
    // Hidden inside the workspace itself (the checks refuse such a workspace):
    // covered all the same.
    let inner = p.workspace.join("data");
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::write(inner.join("rein.db"), "store").unwrap();
    let covered = Confinement {
        hidden: vec![inner.clone()],
        ..Confinement::default()
    };
    let out = run_in(
        &sandbox,
        &p.workspace,
        "cat data/rein.db; rm -f data/rein.db",
        &covered,
    )
    .await;
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert_eq!(
        std::fs::read_to_string(inner.join("rein.db")).unwrap(),
        "store"
    );
    // The record of the run names what was covered.
    let reach = sandbox.reach(&p.workspace, &confinement);
    assert_eq!(reach.hidden, vec![data.display().to_string()]);
    assert_eq!(reach.writable, vec![p.workspace.display().to_string()]);
}

/// Sends one UDP datagram to `port` on loopback from inside the sandbox.
fn udp_script(port: u16) -> String {
    format!(
        "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'out', ('127.0.0.1', {port})); print('sent')\""
    )
}

#[tokio::test]
async fn no_udp_either_unless_allowed() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut buf = [0u8; 16];

        let denied = run_in(
            &sandbox,
            &p.workspace,
            &udp_script(port),
            &Confinement::default(),
        )
        .await;
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            listener.recv(&mut buf).is_err(),
            "{kind:?}: no datagram arrived from the sandbox ({})",
            denied.stdout
        );
        if kind == SandboxKind::Landlock {
            // Refused outright, not sent into a void.
            assert_ne!(denied.code, Some(0), "{kind:?}");
            assert!(
                denied.stderr.contains("Permission denied"),
                "{}",
                denied.stderr
            );
        }

        let allowed = Confinement {
            network: true,
            ..Confinement::default()
        };
        let out = run_in(&sandbox, &p.workspace, &udp_script(port), &allowed).await;
        assert_eq!(out.code, Some(0), "{kind:?}: {}", out.stderr);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let got = listener
            .recv(&mut buf)
            .expect("allowed, the datagram arrives");
        assert_eq!(&buf[..got], b"out");
    }
}

/// A root caller's command runs as the workspace's owner, with that owner's
/// group and no other: under Landlock the trampoline switches itself (so rein
/// starts it without a fork), under bubblewrap rein does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_callers_command_runs_as_the_workspaces_owner_only() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let p = place();
        let Some(run_as) = unprivileged(&p) else {
            // Not root: commands run as the caller, which needs no switch.
            let out = run_in(&sandbox, &p.workspace, "id -u", &Confinement::default()).await;
            assert_eq!(out.stdout.trim(), nix::unistd::getuid().to_string());
            continue;
        };
        let confinement = Confinement {
            run_as: Some(run_as),
            ..Confinement::default()
        };
        let out = run_in(
            &sandbox,
            &p.workspace,
            "id -u; id -g; id -G; touch made",
            &confinement,
        )
        .await;
        assert_eq!(out.code, Some(0), "{kind:?}: {}", out.stderr);
        assert_eq!(
            out.stdout.split_whitespace().collect::<Vec<_>>(),
            ["65534", "65534", "65534"],
            "{kind:?}"
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(p.workspace.join("made")).unwrap().uid(),
            65534,
            "{kind:?}"
        );
    }
}

/// The directory a command gets is the one pinned, not what the path names
/// when it starts: swapped for a symlink out, or for another directory,
/// between the pin and the start, the command is refused under every sandbox
/// and every way of starting one, and nothing is written anywhere. Put back,
/// it runs there, and no handle on the workspace is left open in it.
#[tokio::test]
async fn a_workspace_swapped_after_it_was_pinned_is_refused_as_the_command_starts() {
    for sandbox in sandboxes().await {
        let kind = sandbox.kind();
        let detail = sandbox.detail.clone();
        let p = place();
        let pinned = pin(&p.workspace);
        let old = p.workspace.with_file_name("ws.old");
        std::fs::rename(&p.workspace, &old).unwrap();
        let start = |script: &'static str| {
            let mut command = sandbox.command(&pinned, script, &[], &Confinement::default());
            command.stdin(Stdio::null());
            command
        };
        for swapped in ["symlink", "directory"] {
            if swapped == "symlink" {
                std::os::unix::fs::symlink(&p.outside, &p.workspace).unwrap();
            } else {
                std::fs::remove_file(&p.workspace).unwrap();
                std::fs::create_dir(&p.workspace).unwrap();
            }
            match start("touch escaped").output().await {
                // Refused by the trampoline that opened it.
                Ok(out) => {
                    let said = String::from_utf8_lossy(&out.stderr);
                    assert_eq!(out.status.code(), Some(125), "{detail}: {swapped}: {said}");
                    let named = if swapped == "symlink" {
                        "symlink"
                    } else {
                        "another directory"
                    };
                    assert!(said.contains(named), "{kind:?}: {swapped}: {said}");
                }
                // Refused by rein before bwrap was forked.
                Err(e) => assert_eq!(e.raw_os_error(), Some(nix::libc::ESTALE), "{e}"),
            }
            for dir in [&p.outside, &old, &p.workspace] {
                assert!(!dir.join("escaped").exists(), "{detail}: {swapped}");
            }
        }
        std::fs::remove_dir(&p.workspace).unwrap();
        std::fs::rename(&old, &p.workspace).unwrap();
        let out = start(
            "touch made; for f in /proc/$$/fd/*; do [ -d \"$f\" ] && echo \"dir $f\"; done; true",
        )
        .output()
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{detail}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(p.workspace.join("made").exists(), "{detail}");
        let open = String::from_utf8_lossy(&out.stdout);
        assert!(
            !open.contains("dir "),
            "{detail}: handles left open: {open}"
        );
    }
}
