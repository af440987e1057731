//! `rein-bench sse --clients N`: what N idle Server-Sent Events clients cost a
//! real `rein serve` process — its CPU while they sit there, its memory and
//! open files before, with and after them — read from `/proc` of the server;
//! `--bursts K` comes and goes K times, to show whether memory creeps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What `/proc` says of a process.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// User and system CPU time, in clock ticks.
    cpu_ticks: u64,
    rss_kib: u64,
    files: usize,
    threads: u64,
}

fn usage(pid: u32) -> anyhow::Result<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').unwrap_or(0) + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the file (11 and 12 after the name).
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Usage {
        cpu_ticks: field(11) + field(12),
        rss_kib: kib("VmRSS:"),
        files: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count(),
        threads: kib("Threads:"),
    })
}

/// Clock ticks per second (the kernel's USER_HZ).
const TICKS: f64 = 100.0;

/// Where the `rein` binary is: `--rein`, else beside this one.
pub(crate) fn rein_binary(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = flag {
        return Ok(path);
    }
    let me = std::env::current_exe()?;
    let beside = me.with_file_name("rein");
    anyhow::ensure!(
        beside.exists(),
        "no rein binary at {}: build it (cargo build --release -p rein-cli) or pass --rein PATH",
        beside.display()
    );
    Ok(beside)
}

/// The token the servers the benchmarks start take.
pub(crate) const TOKEN: &str = "bench-token-0123456";

/// `rein serve` on `data` (steps unsandboxed, token [`TOKEN`], a free
/// loopback port), and the address it says it listens on.
pub(crate) async fn start_serve(
    rein: &Path,
    data: &Path,
) -> anyhow::Result<(tokio::process::Child, String)> {
    start_serve_with(rein, data, "none", &[]).await
}

/// [`start_serve`] under `sandbox` (`--sandbox`), with more arguments
/// (`--store`, `--lease`, …).
pub(crate) async fn start_serve_with(
    rein: &Path,
    data: &Path,
    sandbox: &str,
    more: &[&str],
) -> anyhow::Result<(tokio::process::Child, String)> {
    let mut server = tokio::process::Command::new(rein)
        .arg("--data-dir")
        .arg(data)
        .args(["--sandbox", sandbox, "serve", "--listen", "127.0.0.1:0"])
        // Every client of a bench is this machine's loopback address: one
        // client, as the per-client cap counts them.
        .args(["--max-connections-per-client", "1000000"])
        .args(more)
        .env("REIN_TOKEN", TOKEN)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut out = server
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).await? == 1 && byte[0] != b'\n' {
        line.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let addr = line
        .rsplit("http://")
        .next()
        .and_then(|a| a.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("rein serve said {line:?}"))?
        .to_owned();
    Ok((server, addr))
}

pub async fn sse(
    clients: usize,
    seconds: u64,
    bursts: usize,
    rein: Option<PathBuf>,
    dir: &Path,
) -> anyhow::Result<serde_json::Value> {
    let rein = rein_binary(rein)?;
    let (mut server, addr) = start_serve(&rein, &dir.join("data")).await?;
    let pid = server
        .id()
        .ok_or_else(|| anyhow::anyhow!("rein serve has no pid"))?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let baseline = usage(pid)?;
    let request = format!(
        "GET /admin/events/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    let (mut with, mut idle, mut elapsed) = (baseline, baseline, 0.0);
    let mut after_each = Vec::new();
    for _ in 0..bursts.max(1) {
        let mut streams = Vec::with_capacity(clients);
        for _ in 0..clients {
            let mut s = tokio::net::TcpStream::connect(&addr).await?;
            s.write_all(request.as_bytes()).await?;
            let mut head = [0u8; 16];
            s.read_exact(&mut head).await?;
            anyhow::ensure!(head.starts_with(b"HTTP/1.1 200"), "a stream was refused");
            streams.push(s);
        }
        // Let the server settle, then time it while the clients sit idle.
        tokio::time::sleep(Duration::from_secs(1)).await;
        with = usage(pid)?;
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        idle = usage(pid)?;
        elapsed = started.elapsed().as_secs_f64();
        drop(streams);
        tokio::time::sleep(Duration::from_secs(2)).await;
        after_each.push(usage(pid)?);
    }
    let after = after_each.last().copied().unwrap_or(baseline);
    let _ = server.start_kill();
    let cores = (idle.cpu_ticks - with.cpu_ticks) as f64 / TICKS / elapsed;
    Ok(serde_json::json!({
        "bench": "sse",
        "clients": clients,
        "bursts": bursts.max(1),
        "idle_seconds": seconds,
        "cpu_cores_while_idle": (cores * 1000.0).round() / 1000.0,
        "rss_kib": { "before": baseline.rss_kib, "with_clients": idle.rss_kib, "after": after.rss_kib,
                 "after_each_burst": after_each.iter().map(|u| u.rss_kib).collect::<Vec<_>>() },
        "open_files": { "before": baseline.files, "with_clients": idle.files, "after": after.files },
        "threads": { "before": baseline.threads, "with_clients": idle.threads, "after": after.threads },
    }))
}
