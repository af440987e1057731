//! `rein-bench sandbox`: what the sandbox costs a step.

use super::*;

/// Times `runs` runs of `true`, plainly, under bubblewrap (forked from this
/// process, and started through the trampoline as `rein` starts it), and
/// under Landlock (through the `rein-confine` trampoline beside this binary,
/// when it is built: `cargo build --release -p rein-cli`), one of each in turn.
pub(super) async fn sandbox(runs: usize) -> anyhow::Result<serde_json::Value> {
    let bwrap = rein_sandbox::Sandbox::probe().await?;
    let trampoline = std::env::current_exe()?.with_file_name("rein-confine");
    let (landlock, bwrap_started) = if trampoline.exists() {
        let t = rein_sandbox::Trampoline {
            program: trampoline,
            args: Vec::new(),
        };
        (
            Some(rein_sandbox::Sandbox::probe_landlock(t.clone()).await?),
            Some(bwrap.clone().started_by(t).await),
        )
    } else {
        (None, None)
    };
    let dir = tempfile::tempdir()?;
    let workspace = dir.path().canonicalize()?;
    let pinned = rein_sandbox::Pinned::pin(&workspace)?;
    let confinement = rein_sandbox::Confinement::default();
    let mut plain = Vec::with_capacity(runs);
    let mut boxed = Vec::with_capacity(runs);
    let mut locked = Vec::with_capacity(runs);
    let mut through = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let status = tokio::process::Command::new("sh")
            .args(["-c", "true"])
            .current_dir(&workspace)
            .status()
            .await?;
        anyhow::ensure!(status.success(), "plain `true` failed");
        plain.push(started.elapsed());
        for (sandbox, times) in [
            (Some(&bwrap), &mut boxed),
            (landlock.as_ref(), &mut locked),
            (bwrap_started.as_ref(), &mut through),
        ] {
            let Some(sandbox) = sandbox else { continue };
            let started = Instant::now();
            let status = sandbox
                .command(&pinned, "true", &[], &confinement)
                .status()
                .await?;
            anyhow::ensure!(status.success(), "sandboxed `true` failed");
            times.push(started.elapsed());
        }
    }
    plain.sort();
    boxed.sort();
    locked.sort();
    through.sort();
    let ms = |d: f64| (d * 1000.0).round() / 1000.0;
    let at = |times: &[Duration], p: f64| (!times.is_empty()).then(|| ms(percentile(times, p)));
    Ok(serde_json::json!({
        "bench": "sandbox",
        "runs": runs,
        "sandbox": bwrap.detail,
        "plain_p50_ms": ms(percentile(&plain, 0.50)),
        "plain_p99_ms": ms(percentile(&plain, 0.99)),
        "sandboxed_p50_ms": ms(percentile(&boxed, 0.50)),
        "sandboxed_p99_ms": ms(percentile(&boxed, 0.99)),
        "overhead_p50_ms": ms(percentile(&boxed, 0.50) - percentile(&plain, 0.50)),
        "started_through_trampoline_p50_ms": at(&through, 0.50),
        "started_through_trampoline_p99_ms": at(&through, 0.99),
        "landlock_p50_ms": at(&locked, 0.50),
        "landlock_p99_ms": at(&locked, 0.99),
    }))
}
