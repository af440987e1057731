//! `/healthz` (spec §6 rule 23): each component probed for real.

use rein_core::Engine;
pub use rein_protocol::api::{Alert, Component, Components, Health, HealthStatus as Status};

fn ok(detail: impl Into<String>) -> Component {
    Component {
        status: Status::Healthy,
        detail: detail.into(),
    }
}

fn bad(status: Status, detail: impl Into<String>) -> Component {
    Component {
        status,
        detail: detail.into(),
    }
}

/// Below this much free space on the store's file system, the store is
/// degraded: it still works, and soon will not.
pub const LOW_DISK_BYTES: u64 = 256 * 1024 * 1024;

/// The task store's component: unhealthy when a write through its file fails,
/// degraded when its file system has less than [`LOW_DISK_BYTES`] free.
fn store(probed: rein_core::StoreResult<rein_core::store::StoreProbe>) -> Component {
    let probe = match probed {
        Ok(probe) => probe,
        Err(e) => {
            return bad(
                Status::Unhealthy,
                format!("a write to the store failed: {e}"),
            );
        }
    };
    let mib = |b: u64| b / (1024 * 1024);
    let room = probe
        .free_bytes
        .map(|b| format!("; {} MiB free", mib(b)))
        .unwrap_or_default();
    let past = probe
        .last_write_error
        .as_deref()
        .map(|e| format!("; a write failed earlier: {e}"))
        .unwrap_or_default();
    if let Some(lost) = probe.lost_writes.first() {
        return bad(
            Status::Unhealthy,
            format!(
                "{}: {lost}; see what is left, then run `rein health --acknowledge-lost-writes` on its machine{past}",
                probe.location
            ),
        );
    }
    match probe.free_bytes {
        Some(free) if free < LOW_DISK_BYTES => bad(
            Status::Degraded,
            format!(
                "{}: a write and a read went through, but only {} MiB are free (below {} MiB): free some space before writes fail{past}",
                probe.location,
                mib(free),
                mib(LOW_DISK_BYTES)
            ),
        ),
        _ => ok(format!(
            "{}: a write and a read went through{room}{past}",
            probe.location
        )),
    }
}

/// This node and its leases, where nodes share the store.
async fn node(engine: &Engine) -> Option<rein_protocol::api::NodeHealth> {
    let leases = engine.store().leases()?;
    let me = leases.node().clone();
    let held = match leases.live().await {
        Ok(live) => live
            .into_iter()
            .filter(|l| l.runner == me)
            .map(|l| l.task_id)
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the task leases");
            Vec::new()
        }
    };
    Some(rein_protocol::api::NodeHealth {
        runner: me,
        lease_ms: u64::try_from(leases.lease_duration().as_millis()).unwrap_or(u64::MAX),
        leases: held,
        running: engine.running(),
        max_tasks: engine.config().max_tasks,
    })
}

pub async fn check(engine: &Engine) -> Health {
    let task_store = store(engine.store().probe().await);
    // The manager is healthy if a command runs the way steps run: sandboxed.
    let sandbox_manager = match engine.probe_executor().await {
        rein_core::ExecutorHealth::Healthy(detail) => ok(detail),
        rein_core::ExecutorHealth::Degraded(detail) => bad(Status::Degraded, detail),
        rein_core::ExecutorHealth::Unhealthy(detail) => bad(Status::Unhealthy, detail),
    };
    // The rules answer a trial question, and say how many there are.
    let policy = &engine.config().policy;
    let trial = policy.check_script("true");
    let permission_manager = ok(format!(
        "{} permission rule(s); a trial command `true` gets `{}` ({})",
        policy.len(),
        trial.verdict.as_str(),
        trial.rule
    ));
    let audit_logger = match engine.verify_ledger().await {
        Ok((n, breaks)) if breaks.is_empty() => ok(format!("ledger intact ({n} entries)")),
        // Entries lost with committed writes a person has acknowledged: the
        // ledger is short of them for good, and says so, but works.
        Ok((n, breaks))
            if breaks.iter().all(|b| {
                matches!(
                    b,
                    rein_protocol::ledger::ChainBreak::Lost {
                        acknowledged: true,
                        ..
                    }
                )
            }) =>
        {
            bad(
                Status::Degraded,
                format!(
                    "ledger intact ({n} entries) but short of entries lost with committed writes, acknowledged: {}",
                    breaks.first().map(ToString::to_string).unwrap_or_default()
                ),
            )
        }
        Ok((_, breaks)) => bad(
            Status::Unhealthy,
            format!(
                "the ledger's hash chain is broken: {}",
                breaks.first().map(ToString::to_string).unwrap_or_default()
            ),
        ),
        Err(e) => bad(Status::Unhealthy, format!("cannot read the ledger: {e}")),
    };
    let metrics = engine.metrics().await.ok();
    let components = Components {
        task_store,
        sandbox_manager,
        permission_manager,
        audit_logger,
    };
    let all = components.named().map(|(_, c)| c);
    let status = all
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(Status::Healthy);
    let alerts = all
        .iter()
        .filter(|c| c.status != Status::Healthy)
        .map(|c| Alert {
            severity: if c.status == Status::Unhealthy {
                "critical"
            } else {
                "warning"
            }
            .to_owned(),
            message: c.detail.clone(),
            timestamp: chrono::Utc::now(),
        })
        .collect();
    Health {
        status,
        components,
        metrics,
        alerts,
        node: node(engine).await,
    }
}
